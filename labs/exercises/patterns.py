"""The message pattern of a collective, named from the router's log: who sent to whom, how much, in what order.

    from labs.exercises import patterns
    found = patterns.allreduce(4, [[(1, 12), (1, 12), ...], ...], chunk=12)   # per rank: (peer, bytes) sent
    found["family"]            # "ring", "pipelined_ring", "direct", "halving", "tree", "gather", "extra",
                               # "silent" or "other"
    found["left"]              # where the first rank left the ring: {"rank", "step", "peer", "expected"}
    patterns.broadcast(4, 1, sends)["family"]   # "star", "chain", "pipeline", "tree" or "other"

Pure functions of the log (``traffic.calls`` of every rank, made by the
router outside the learners' processes): no torch, no processes, so the
checks and their unit tests are cheap. The all-reduce families:

- **ring**: every rank sends to one rank only, and following those sends
  visits every rank (a single cycle: r -> r+1 mod n, the other way round,
  or any other order of the ranks), in at most 2(n-1) messages (n-1 of
  reduce-scatter, n-1 of all-gather; a ring that passes whole buffers
  sends n-1, and the bytes rule says what that costs);
- **pipelined_ring**: the same ring, with more messages, each no larger than
  a chunk (the largest of the usual splits of m elements into n): each
  step's chunk in segments;
- **direct**: every rank sends to every other rank (a reduce-scatter and an
  all-gather straight to each owner, or whole buffers to everyone);
- **halving**: every rank exchanges only with partners r XOR 2^k, all ranks
  as many times (recursive halving and doubling, n a power of two);
- **tree**: the links used form a tree that is no star (a reduction up a
  binomial or binary tree and a broadcast down it);
- **gather**: a star: one root exchanges with every other rank, and they only
  with it (everything gathered at the root, summed there and sent back);
- **extra**: a ring with more messages than 2(n-1), some larger than a chunk:
  messages beyond the ring's, not its segments;
- **silent**: every message goes around a ring, but some rank sent none;
- **other**: anything else.

On two ranks every exchange is a ring (there is one other rank to send to),
so the families differ from three ranks on, and the ones that need a power
of two (halving) or room for a tree that is not a star from four.

`cost` says what a family costs in the alpha-beta model (``labs.model``):
``steps`` latencies alpha and ``bytes`` over the link bandwidth B, for the
rank that waits longest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from labs import model

Sends = Sequence[Sequence[tuple[int, int]]]  # per rank, in the order it made them: (peer, bytes)

RINGS = ("ring", "pipelined_ring")
ALLREDUCE_FAMILIES = (*RINGS, "direct", "halving", "tree", "gather", "extra", "silent", "other")
BROADCAST_FAMILIES = ("star", "chain", "pipeline", "tree", "other")
P2P_SENDS = ("send", "isend")


def sends_of(calls: Sequence[dict]) -> list[tuple[int, int]]:
    """One rank's sends from its router record: (peer, bytes), in the order it made them."""
    return [(int(c["peer"]), int(c["bytes"])) for c in calls if c.get("op") in P2P_SENDS]


def _one_cycle(succ: Sequence[int]) -> bool:
    """Whether following ``succ`` from rank 0 visits every rank before coming back."""
    seen, rank = set(), 0
    while rank not in seen:
        seen.add(rank)
        rank = succ[rank]
    return rank == 0 and len(seen) == len(succ)


def _connected(n: int, edges: set[frozenset[int]]) -> bool:
    reach, todo = {0}, [0]
    while todo:
        here = todo.pop()
        for edge in edges:
            if here in edge:
                (there,) = edge - {here}
                if there not in reach:
                    reach.add(there)
                    todo.append(there)
    return len(reach) == n


def _family(n: int, sends: Sends, dests: list[set[int]]) -> str:
    """The family of an all-reduce that is no ring (see the module docstring)."""
    if any(not d for d in dests):
        return "silent" if all(d <= {(r + 1) % n} for r, d in enumerate(dests)) \
            or all(d <= {(r - 1) % n} for r, d in enumerate(dests)) else "other"
    if all(d == set(range(n)) - {r} for r, d in enumerate(dests)):
        return "direct"
    edges = {frozenset((r, p)) for r, d in enumerate(dests) for p in d}
    if len(edges) == n - 1 and _connected(n, edges):
        degree = [sum(r in e for e in edges) for r in range(n)]
        return "gather" if max(degree) == n - 1 else "tree"
    if n & (n - 1) == 0 and len({len(s) for s in sends}) == 1 \
            and all((p ^ r) & ((p ^ r) - 1) == 0 for r, d in enumerate(dests) for p in d) \
            and all(len(d) == n.bit_length() - 1 for d in dests):
        return "halving"
    return "other"


def _left(n: int, sends: Sends) -> dict:
    """Where the pattern first left the ring r -> r+1 (or r -> r-1, when rank 0's first message
    went that way): the earliest message, by its place in its rank's order, then by rank,
    that went elsewhere; a rank that sent nothing when none did."""
    step = -1 if n > 2 and sends[0] and sends[0][0][0] == (0 - 1) % n else 1
    expected = [(r + step) % n for r in range(n)]
    off = [(k, r, peer) for r, rank_sends in enumerate(sends) for k, (peer, _) in enumerate(rank_sends)
           if peer != expected[r]]
    if off:
        k, r, peer = min(off)
        return {"rank": r, "step": k + 1, "peer": peer, "expected": expected[r]}
    r = next((r for r in range(n) if not sends[r]), None)
    if r is not None:
        return {"rank": r, "step": 1, "peer": None, "expected": expected[r]}
    # Every message went around the ring: the first one past a ring's 2(n-1), on the busiest rank.
    r = max(range(n), key=lambda q: len(sends[q]))
    return {"rank": r, "step": model.ring_steps("all_reduce", n) + 1, "peer": expected[r], "expected": expected[r]}


def allreduce(world: int, sends: Sends, *, chunk: int | None = None) -> dict:
    """The family of an all-reduce on ``world`` ranks from its sends.

    ``chunk``: the largest chunk in bytes (of the usual ways to cut m elements into n),
    which no segment of a pipelined ring exceeds; None: any. Returns ``{"family", "world_size", "messages"
    (the most any rank sent), "left" (None for a ring)}``."""
    n = world
    counts = [len(s) for s in sends]
    dests = [{peer for peer, _ in s} for s in sends]
    found = {"world_size": n, "messages": max(counts, default=0), "left": None}
    succ = [next(iter(d)) if len(d) == 1 else None for d in dests]
    if None not in succ and _one_cycle(succ):
        if max(counts) <= model.ring_steps("all_reduce", n):
            return {**found, "family": "ring"}
        if chunk is None or all(b <= chunk for s in sends for _, b in s):
            return {**found, "family": "pipelined_ring"}
        return {**found, "family": "extra", "left": _left(n, sends)}
    return {**found, "family": _family(n, sends, dests), "left": _left(n, sends)}


def cost(family: str, world: int, size: int, sends: Sends) -> dict:
    """What ``family`` costs on ``world`` ranks for ``size`` bytes in the alpha-beta model
    (T = steps x alpha + bytes / B, for the rank that waits longest), beside the ring's.

    The textbook counts for the families whose schedule is fixed (ring, halving: 2 log2 n
    steps with the ring's bytes; tree: 2 ceil(log2 n) steps of the whole buffer; gather:
    the root takes in and sends out n-1 whole buffers); for the others, what the log
    shows: the most messages and bytes one rank sent or received."""
    n, s = world, size
    ring = {"ring_steps": model.ring_steps("all_reduce", n), "ring_bytes": _round(model.bus_factor("all_reduce", n) * s)}
    logn = math.ceil(math.log2(n)) if n > 1 else 0
    if family in RINGS:
        steps, moved = ring["ring_steps"], ring["ring_bytes"]
    elif family == "halving":
        steps, moved = 2 * logn, ring["ring_bytes"]
    elif family == "tree":
        steps, moved = 2 * logn, 2 * logn * s
    elif family == "gather":
        steps, moved = 2 * (n - 1), 2 * (n - 1) * s
    else:
        received: list[list[int]] = [[] for _ in range(n)]
        for rank_sends in sends:
            for peer, b in rank_sends:
                if 0 <= peer < n:
                    received[peer].append(b)
        steps = max((max(len(out), len(into)) for out, into in zip(sends, received, strict=True)), default=0)
        moved = max((max(sum(b for _, b in out), sum(into)) for out, into in zip(sends, received, strict=True)),
                    default=0)
    return {"steps": steps, "bytes": _round(moved), **ring}


def _round(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(x, 1)


def broadcast(world: int, src: int, sends: Sends) -> dict:
    """The family of a broadcast from ``src`` on ``world`` ranks: who gave each rank the tensor.

    ``star``: src sends to every rank itself; ``chain``: each rank passes it to one next
    rank, one message each; ``pipeline``: the same chain, in several messages per link;
    ``tree``: ranks that have it pass it to more than one (a binomial tree); ``other``: a
    rank that heard from several ranks (a scatter and an all-gather) or from none.
    Returns ``{"family", "world_size", "depth"}``, depth the most links between src and a rank."""
    n = world
    parents: list[set[int]] = [set() for _ in range(n)]
    per_link: dict[tuple[int, int], int] = {}
    for r, rank_sends in enumerate(sends):
        for peer, _ in rank_sends:
            if 0 <= peer < n:
                parents[peer].add(r)
                per_link[(r, peer)] = per_link.get((r, peer), 0) + 1
    found = {"world_size": n, "depth": 0}
    others = [r for r in range(n) if r != src]
    if parents[src] or any(len(parents[r]) != 1 for r in others):
        return {**found, "family": "other"}
    parent = {r: next(iter(parents[r])) for r in others}
    depth = 0
    for r in others:  # every rank must hear from src through its parents, without a loop
        hops, here = 0, r
        while here != src and hops <= n:
            here, hops = parent[here], hops + 1
        if here != src:
            return {**found, "family": "other"}
        depth = max(depth, hops)
    found["depth"] = depth
    if all(parent[r] == src for r in others):
        return {**found, "family": "star"}
    children = [sum(parent[r] == p for r in others) for p in range(n)]
    if max(children) <= 1:
        return {**found, "family": "chain" if all(k == 1 for k in per_link.values()) else "pipeline"}
    return {**found, "family": "tree"}
