"""Driver of bucketed-overlap: the learner's Bucketer trains N ranks; the api's records show the buckets.

A case: ``{"id", "world_size", "seed", "cap" (bytes), "features", "hidden",
"classes", "batch" (per rank), "steps", "lr"}``. In the harness, ``inputs``
gives each rank the initial parameters and its own shard, and ``expected``
trains the same MLP in one process on the global batch: its final
parameters, and the order and size in which backward produces the
gradients (hooks on the single process's parameters). In a rank, ``run``
builds ``Bucketer(model, cap)`` and trains: a step marker to the router,
forward, backward, ``finish()``, step; it returns the parameters and, per
step, the moment backward ended (and, for the report's timeline only, when
the step, forward, ``finish()`` and the optimizer step ended: the rank's
word, which no check reads). The all-reduces themselves (bytes, order, when
each was made and waited for) are the router's record, so ``check`` can
work out how many buckets the cap gives and whether the first one
overlapped backward.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import nn

from drivers._training import bounds as _bounds
from drivers._training import global_batch, load, params, sgd_step, shares


def arch(case: dict) -> nn.Module:
    h = case["hidden"]
    return nn.Sequential(nn.Linear(case["features"], h), nn.Tanh(), nn.Linear(h, h), nn.Tanh(),
                         nn.Linear(h, case["classes"]))


def build(case: dict) -> nn.Module:
    torch.manual_seed(case["seed"])
    return arch(case)


def inputs(case: dict, world: int) -> list[dict]:
    """Per rank: the initial parameters and its own shard of the global batch."""
    return shares(build(case), *global_batch(case, world), case["batch"], world)


def expected(case: dict, world: int, inputs: list[dict]) -> list[dict]:  # noqa: ARG001 - the interface
    """One process on the global batch: the final parameters, and the order and size in
    which backward produces the gradients (the same on every rank and step)."""
    x, y = global_batch(case, world)
    single = build(case)
    ready: list[list] = []
    for name, param in single.named_parameters():
        param.register_post_accumulate_grad_hook(
            lambda p, name=name: ready.append([name, p.grad.numel() * p.grad.element_size()]))
    order = None
    for _ in range(case["steps"]):
        ready.clear()
        F.cross_entropy(single(x), y).backward()
        order = order or list(ready)
        sgd_step(single, case["lr"])
    return [{"params": params(single), "ready": order} for _ in range(world)]


def bounds(case: dict, world: int) -> dict:
    """A bucket of at most every gradient (in float64), no messages of zero bytes."""
    return _bounds(arch(case), world)


def run(case: dict, rank: int, world: int, submission, api, state) -> dict:  # noqa: ARG001 - the interface
    model, x, y = load(arch(case), state), state["x"], state["y"]
    bucketer = submission.Bucketer(model, case["cap"])
    steps = []
    for step in range(case["steps"]):
        api.mark(step)
        start = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        forward_end = time.perf_counter()
        loss.backward()
        backward_end = time.perf_counter()
        bucketer.finish()
        finish_end = time.perf_counter()
        sgd_step(model, case["lr"])
        steps.append({"start": start, "forward_end": forward_end, "backward_end": backward_end,
                      "finish_end": finish_end, "step_end": time.perf_counter()})
    return {"params": params(model), "steps": steps}
