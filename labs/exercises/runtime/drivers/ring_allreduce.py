"""Driver of the ring-allreduce exercise: ``ring_allreduce(tensor)`` sums in place over all ranks.

In the harness (no learner code there): every rank's input from the case's
seed, and the expected sum, computed in float64 (exact for the integers)
and rounded once to the case's dtype, with the sum of absolute values
beside it (the grader's float tolerance). In a rank: only that rank's own
input, on which the learner's function runs.
"""

from __future__ import annotations

import torch

from drivers._tensors import as_list, make_input, run_in_place
from drivers._tensors import bounds as _bounds
from drivers._tensors import locate as _locate


def inputs(case: dict, world: int) -> list[dict]:
    return [{"input": make_input(case, rank)} for rank in range(world)]


def expected(case: dict, world: int, inputs: list[dict]) -> list[dict]:  # noqa: ARG001 - the interface
    stacked = torch.stack([i["input"] for i in inputs])
    exact = stacked.sum(0, dtype=torch.float64 if stacked.is_floating_point() else torch.int64)
    values = as_list(exact.to(stacked.dtype))
    abs_sum = as_list(stacked.double().abs().sum(0))
    return [{"values": values, "abs_sum": abs_sum} for _ in inputs]


def bounds(case: dict, world: int) -> dict:
    return _bounds(case, world)


def locate(tensor, state):
    return _locate(tensor, state["buffer"], state["world"])


def run(case: dict, rank: int, world: int, submission, api, state) -> dict:  # noqa: ARG001
    return run_in_place(case, world, submission, state, "ring_allreduce")

