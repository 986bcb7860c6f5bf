"""Driver of shard-indices: each rank asks the learner's function for its share, alone.

A case: ``{"id", "world_size", "n" (data set length), "seed", "other_seed"}``.
Nothing is expected up front (the rules are checked on what all ranks
return together), and no rank gets a tensor; the seeds are the learner's
function's own arguments, so the whole case is public. ``run`` calls
``shard_indices`` four times: epoch 0, the same call again (is it
deterministic?), epoch 1 (reshuffled?) and epoch 0 with another seed. A
result that is not a list of integers is reported by its type name.
Before the learner's file is loaded (``setup``) each rank seeds the global generators (``random`` and
torch's) with its own rank, as ranks on separate machines would be: a
solution that shuffles with the global state then disagrees between ranks
instead of agreeing by the accident of a fork.
"""

from __future__ import annotations

import operator
import random

import torch

CALLS = (("first", 0, "seed"), ("again", 0, "seed"), ("epoch1", 1, "seed"),
         ("other_seed", 0, "other_seed"))


def setup(rank: int, world: int) -> None:  # noqa: ARG001 - the interface
    # Here, not in run: torch.manual_seed walks the stack (torch.cuda's lazy
    # init), which the guard refuses once it is armed.
    random.seed(10_007 * (rank + 1))
    torch.manual_seed(10_007 * (rank + 1))


def public(case: dict) -> dict:
    return case


def inputs(case: dict, world: int) -> list[dict]:  # noqa: ARG001 - the interface
    return [{} for _ in range(world)]


def expected(case: dict, world: int, inputs: list[dict]) -> list[None]:  # noqa: ARG001
    return [None] * world


def bounds(case: dict, world: int) -> dict:  # noqa: ARG001 - the interface
    """No messages at all: the exercise allows no call that makes one."""
    return {"message_bytes": 0, "tags": 1, "empty_messages": False}


def as_indices(result) -> list[int] | str:
    """The result as a list of int, or the name of its type when it is not one."""
    if isinstance(result, torch.Tensor) and result.dim() == 1 and not result.is_floating_point():
        result = result.tolist()
    if not isinstance(result, list | tuple):
        return type(result).__name__[:60]
    out = []
    for value in result:
        if isinstance(value, bool | float):
            return f"{type(result).__name__[:60]} of {type(value).__name__[:60]}"
        try:
            out.append(operator.index(value))
        except TypeError:
            return f"{type(result).__name__[:60]} of {type(value).__name__[:60]}"
    return out


def run(case: dict, rank: int, world: int, submission, api, state) -> dict:  # noqa: ARG001 - the interface
    fn = submission.shard_indices
    return {key: as_indices(fn(case["n"], rank, world, epoch, case[seed]))
            for key, epoch, seed in CALLS}
