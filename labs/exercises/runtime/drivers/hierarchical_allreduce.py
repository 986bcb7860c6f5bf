"""Driver of the hierarchical-allreduce exercise: ``hierarchical_allreduce(tensor, nodes)`` sums in place.

As the ring's driver (inputs from the case's seed, the sum computed in the
harness in float64 and rounded once), with the case's node map: ``nodes``
lists the ranks of each node, which the learner's function receives, and
`bounds` gives the router the node of each rank (``node_of``), so that it
counts each send as staying inside a node or crossing to another.
"""

from __future__ import annotations

from drivers import ring_allreduce
from drivers._tensors import run_in_place

inputs = ring_allreduce.inputs
expected = ring_allreduce.expected
locate = ring_allreduce.locate


def node_of(case: dict) -> list[int]:
    """The node of each rank, from the case's map."""
    where = [0] * case["world_size"]
    for node, ranks in enumerate(case["nodes"]):
        for rank in ranks:
            where[rank] = node
    return where


def bounds(case: dict, world: int) -> dict:
    """The ring's bounds, the node map for the router, and empty messages wherever the chunks
    of either level can be empty: a tensor with fewer elements than twice the ranks."""
    found = ring_allreduce.bounds(case, world)
    numel = 1
    for d in case["shape"]:
        numel *= d
    return {**found, "empty_messages": found["empty_messages"] or numel < 2 * world,
            "node_of": tuple(node_of(case))}


def run(case: dict, rank: int, world: int, submission, api, state) -> dict:  # noqa: ARG001
    nodes = [list(ranks) for ranks in case["nodes"]]  # a copy: what the learner does to it stays theirs
    return run_in_place(case, world, submission, state, "hierarchical_allreduce", nodes)
