"""Driver of the ring-allreduce exercise: ``ring_allreduce(tensor)`` sums in place over all ranks.

The expected result is torch's own ``dist.all_reduce`` on a copy of each
rank's input, with the sum of absolute values beside it (the grader's float
tolerance); both leave the rank before the learner's code is loaded.
"""

from __future__ import annotations

import torch.distributed as dist

from drivers._tensors import as_list, make_input, run_in_place
from drivers._tensors import locate as _locate


def prepare(case: dict, rank: int, world: int):  # noqa: ARG001 - the driver interface
    tensor = make_input(case, rank)
    expected = tensor.clone()
    dist.all_reduce(expected)
    abs_sum = tensor.double().abs()
    dist.all_reduce(abs_sum)
    return {"input": tensor}, {"values": as_list(expected), "abs_sum": as_list(abs_sum)}


def locate(tensor, state):
    return _locate(tensor, state["buffer"], state["world"])


def run(case: dict, rank: int, world: int, submission, api, state) -> dict:  # noqa: ARG001
    return run_in_place(case, world, submission, state, "ring_allreduce")
