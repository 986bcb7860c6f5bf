"""Driver of average-gradients: N ranks with a shard each against one process on the global batch.

A case: ``{"id", "world_size", "seed", "dtype", "unused", "features",
"hidden", "classes", "batch" (per rank), "steps", "lr"}``. In the harness,
``inputs`` gives each rank the initial parameters and its own shard of the
global batch (never the seed, from which the others' shards follow), and
``expected`` trains the same model in one process on the whole global
batch: the final parameters, the first step's mean gradient and each
rank's own first gradient. In a rank, ``run`` trains on its shard and calls the learner's
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

from drivers._training import bounds as _bounds
from drivers._training import global_batch, load, sgd_step, shares


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


def values(model: nn.Module, *, grads: bool = False) -> dict:
    """{name: flat list of floats, or None for a missing gradient}, JSON-able."""
    out = {}
    for name, param in model.named_parameters():
        t = param.grad if grads else param
        out[name] = None if t is None else t.detach().reshape(-1).tolist()
    return out


def inputs(case: dict, world: int) -> list[dict]:
    """Per rank: the initial parameters and its own shard of the global batch, nothing else."""
    return shares(build(case), *global_batch(case, world), case["batch"], world)


def expected(case: dict, world: int, inputs: list[dict]) -> list[dict]:
    """One process on the global batch; beside it each rank's own first gradient (what a
    parameter the learner skipped keeps)."""
    x, y = global_batch(case, world)
    single = build(case)
    first_grads = None
    for _ in range(case["steps"]):
        F.cross_entropy(single(x), y).backward()
        if first_grads is None:
            first_grads = values(single, grads=True)
        sgd_step(single, case["lr"])
    out = []
    for rank in range(world):
        local = build(case)
        F.cross_entropy(local(inputs[rank]["x"]), inputs[rank]["y"]).backward()
        out.append({"params": values(single), "grads": first_grads, "local_grads": values(local, grads=True)})
    return out


def bounds(case: dict, world: int) -> dict:
    """An all-reduce of at most every parameter (in float64), no messages of zero bytes."""
    return _bounds(Net(case), world)


def run(case: dict, rank: int, world: int, submission, api, state) -> dict:  # noqa: ARG001 - the interface
    average_gradients = submission.average_gradients
    model = load(Net(case).to(getattr(torch, case["dtype"])), state)
    x, y = state["x"], state["y"]
    first_grads = None
    for _ in range(case["steps"]):
        F.cross_entropy(model(x), y).backward()
        average_gradients(model)
        if first_grads is None:
            first_grads = values(model, grads=True)
        sgd_step(model, case["lr"])
    return {"params": values(model), "grads": first_grads}
