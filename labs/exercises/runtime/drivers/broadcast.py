"""Driver of the broadcast exercise: ``broadcast(tensor, src)`` copies rank src's tensor to all, in place.

The expected result is torch's own ``dist.broadcast`` on a copy of each
rank's input; every rank starts with different numbers, so a rank that
kept its own shows.
"""

from __future__ import annotations

import torch.distributed as dist

from drivers._tensors import as_list, make_input, run_in_place
from drivers._tensors import locate as _locate


def prepare(case: dict, rank: int, world: int):  # noqa: ARG001 - the driver interface
    tensor = make_input(case, rank)
    expected = tensor.clone()
    dist.broadcast(expected, src=int(case["src"]))
    return {"input": tensor}, {"values": as_list(expected)}


def locate(tensor, state):
    return _locate(tensor, state["buffer"], state["world"])


def run(case: dict, rank: int, world: int, submission, api, state) -> dict:  # noqa: ARG001
    return run_in_place(case, world, submission, state, "broadcast", int(case["src"]))
