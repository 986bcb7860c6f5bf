"""Driver of the broadcast exercise: ``broadcast(tensor, src)`` copies rank src's tensor to all, in place.

In the harness: every rank's input (each starts with different numbers, so
a rank that kept its own shows) and the expected result, rank src's input.
In a rank: only its own input.
"""

from __future__ import annotations

from drivers._tensors import as_list, make_input, run_in_place
from drivers._tensors import bounds as _bounds
from drivers._tensors import locate as _locate


def inputs(case: dict, world: int) -> list[dict]:
    return [{"input": make_input(case, rank)} for rank in range(world)]


def expected(case: dict, world: int, inputs: list[dict]) -> list[dict]:  # noqa: ARG001 - the interface
    values = as_list(inputs[int(case["src"])]["input"])
    return [{"values": values} for _ in inputs]


def bounds(case: dict, world: int) -> dict:
    return _bounds(case, world)


def locate(tensor, state):
    return _locate(tensor, state["buffer"], state["world"])


def run(case: dict, rank: int, world: int, submission, api, state) -> dict:  # noqa: ARG001
    return run_in_place(case, world, submission, state, "broadcast", int(case["src"]))

