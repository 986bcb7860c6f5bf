"""Driver of average-gradients: N ranks with a shard each against one process on the global batch.

A case: ``{"id", "world_size", "seed", "dtype", "unused", "features",
"hidden", "classes", "batch" (per rank), "steps", "lr"}``. ``prepare``
trains the same model in one process on the whole global batch (every rank
does it alone: no communication, no learner code loaded yet) and sends the
final parameters, the first step's mean gradient and this rank's own first
gradient. ``run`` trains on this rank's shard and calls the learner's
``average_gradients(model)`` after each backward; it returns the parameters
at the end and the gradients right after the first call, so that ``check``
can tell a missing division or a skipped parameter from any other error.
With ``unused`` the model has a layer the forward never uses: its
parameters keep ``grad is None``, which a correct solution must survive.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from drivers._training import sgd_step


class Net(nn.Module):
    def __init__(self, case: dict):
        super().__init__()
        self.hidden = nn.Linear(case["features"], case["hidden"])
        self.out = nn.Linear(case["hidden"], case["classes"])
        # Never called in forward: after backward its .grad is None on every rank.
        self.spare = nn.Linear(case["hidden"], case["classes"]) if case["unused"] else None

    def forward(self, x):
        return self.out(torch.tanh(self.hidden(x)))


def build(case: dict) -> nn.Module:
    """The same initial weights on every rank and in the single process (from the seed)."""
    torch.manual_seed(case["seed"])
    return Net(case).to(getattr(torch, case["dtype"]))


def global_batch(case: dict, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(case["seed"] + 1)
    n = case["batch"] * world
    x = torch.randn(n, case["features"], generator=gen, dtype=getattr(torch, case["dtype"]))
    y = torch.randint(0, case["classes"], (n,), generator=gen)
    return x, y


def values(model: nn.Module, *, grads: bool = False) -> dict:
    """{name: flat list of floats, or None for a missing gradient}, JSON-able."""
    out = {}
    for name, param in model.named_parameters():
        t = param.grad if grads else param
        out[name] = None if t is None else t.detach().reshape(-1).tolist()
    return out


def prepare(case: dict, rank: int, world: int):
    x, y = global_batch(case, world)
    lo, hi = rank * case["batch"], (rank + 1) * case["batch"]
    # This rank's own first gradient (what a parameter the learner skipped keeps).
    local = build(case)
    F.cross_entropy(local(x[lo:hi]), y[lo:hi]).backward()
    single = build(case)
    first_grads = None
    for _ in range(case["steps"]):
        F.cross_entropy(single(x), y).backward()
        if first_grads is None:
            first_grads = values(single, grads=True)
        sgd_step(single, case["lr"])
    expected = {"params": values(single), "grads": first_grads,
                "local_grads": values(local, grads=True)}
    state = {"model": build(case), "x": x[lo:hi].clone(), "y": y[lo:hi].clone()}
    return state, expected


def run(case: dict, rank: int, world: int, submission, api, state) -> dict:  # noqa: ARG001 - the interface
    average_gradients = submission.average_gradients
    model, x, y = state["model"], state["x"], state["y"]
    first_grads = None
    for _ in range(case["steps"]):
        F.cross_entropy(model(x), y).backward()
        average_gradients(model)
        if first_grads is None:
            first_grads = values(model, grads=True)
        sgd_step(model, case["lr"])
    return {"params": values(model), "grads": first_grads}
