"""Driver of bucketed-overlap: the learner's Bucketer trains N ranks; the api's records show the buckets.

A case: ``{"id", "world_size", "seed", "cap" (bytes), "features", "hidden",
"classes", "batch" (per rank), "steps", "lr"}``. ``prepare`` trains the
same MLP in one process on the global batch and sends its final parameters.
``run`` registers its own post-accumulate-grad hooks first (they run before
the learner's, in registration order) to note the order and size in which
backward produces the gradients, then builds ``Bucketer(model, cap)`` and
trains: zero_grad, backward, ``finish()``, step. Per step it returns that
order, the all-reduces the api counted (bytes, whether made during backward,
when they returned) and the moment backward ended, so ``check`` can work out
how many buckets the cap gives and whether the first one overlapped backward.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import nn

from drivers._training import sgd_step


def build(case: dict) -> nn.Module:
    torch.manual_seed(case["seed"])
    h = case["hidden"]
    return nn.Sequential(nn.Linear(case["features"], h), nn.Tanh(), nn.Linear(h, h), nn.Tanh(),
                         nn.Linear(h, case["classes"]))


def global_batch(case: dict, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(case["seed"] + 1)
    n = case["batch"] * world
    return (torch.randn(n, case["features"], generator=gen),
            torch.randint(0, case["classes"], (n,), generator=gen))


def params(model: nn.Module) -> dict:
    return {name: p.detach().reshape(-1).tolist() for name, p in model.named_parameters()}


def prepare(case: dict, rank: int, world: int):
    x, y = global_batch(case, world)
    single = build(case)
    for _ in range(case["steps"]):
        F.cross_entropy(single(x), y).backward()
        sgd_step(single, case["lr"])
    lo, hi = rank * case["batch"], (rank + 1) * case["batch"]
    state = {"model": build(case), "x": x[lo:hi].clone(), "y": y[lo:hi].clone()}
    return state, {"params": params(single)}


def run(case: dict, rank: int, world: int, submission, api, state) -> dict:  # noqa: ARG001 - the interface
    model, x, y = state["model"], state["x"], state["y"]
    ready: list[list] = []
    for name, param in model.named_parameters():
        param.register_post_accumulate_grad_hook(
            lambda p, name=name: ready.append([name, p.grad.numel() * p.grad.element_size()]))
    bucketer = submission.Bucketer(model, case["cap"])
    steps = []
    for _ in range(case["steps"]):
        ready.clear()
        first = len(api.calls)
        F.cross_entropy(model(x), y).backward()
        backward_end = time.perf_counter()
        bucketer.finish()
        calls = [{"bytes": c["bytes"], "in_backward": bool(c["in_backward"]),
                  "t_end": c.get("t_end")}
                 for c in api.calls[first:] if c["op"] == "all_reduce"]
        steps.append({"ready": list(ready), "calls": calls, "backward_end": backward_end})
        sgd_step(model, case["lr"])
    return {"params": params(model), "steps": steps}
