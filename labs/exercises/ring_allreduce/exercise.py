"""ring-allreduce: the learner's ``ring_allreduce(tensor)`` against ``dist.all_reduce``.

Graded per case: shape and dtype kept, the result in the tensor passed in
(in place), every value within float rounding of the built-in sum (exact
for integers), the bytes each rank sent through the counted send/isend,
and, from three ranks on, the message pattern: a ring.

The bytes rule. A ring splits S bytes into n chunks. In reduce-scatter each
rank sends every chunk but one (n-1 sends), in all-gather every chunk but
another one: so rank r sends 2S minus two chunks, and the ranks together
send exactly 2(n-1) x S (each chunk crosses n-1 links in each phase). When
n does not divide the number of elements the chunks differ by one element,
so a rank's own total is 2(n-1)/n x S give or take less than two elements.
The check: every rank within two elements of 2(n-1)/n x S, and the sum over
ranks exactly 2(n-1) x S. A ring that passes whole buffers sends (n-1) x S
per rank: for n = 2 that is the same (it is then the best one can do) and
passes, for n = 3 and 4 it fails with ``bytes_whole_buffer``. A result that
reached a rank some way other than our send/recv counts 0 bytes and fails.

The pattern rule. The bytes alone do not say who talked to whom: a direct
reduce-scatter and all-gather (every rank sends each chunk straight to its
owner, then each owner its finished chunk straight to everyone) moves
exactly a ring's bytes, and so does recursive halving and doubling on four
ranks. The certificate says "ring", so from three ranks on the router's log
must show one (``labs.exercises.patterns``): every rank sends to one rank
only and those sends go around all ranks, in at most 2(n-1) messages (a
ring), or in more, each no larger than the largest chunk of the usual
splits (a pipelined ring, its chunks in segments). Anything else fails with the family found (direct,
halving, tree, gather to a root, extra messages, other), the rank and the
message where it first left the ring, what it costs in the alpha-beta
model beside the ring, and how to make it one. The report names the family
of the traced case beside the learner's animation (`pattern`).

Where the counts come from. A rank holds no process group: each send and
receive is a frame to the harness's router, which forwards it and counts
its payload outside the learner's process (``runtime/router.py``). The
counts are exact (no framing), so the rules above hold in every case, and
a result that reached a rank without passing the router cannot: the rank
had no other way to the others' inputs, which only the harness held, and
the router answers a rank with nothing but its own calls' completions and
the payloads it counted into it.
"""

from __future__ import annotations

import math

from labs.exercises import checks, patterns

ID = "ring-allreduce"
FUNCTION = "ring_allreduce"
DRIVER = "ring_allreduce"
FORBID_COLLECTIVES = True
ALLOWED = ("send", "recv", "isend", "irecv", "get_rank", "get_world_size")
TRACE_CASE = "w4-n10-float32"  # the case whose sends draw the learner's ring
PATTERN_CASE = TRACE_CASE  # and whose message pattern the report names beside it
# The message of each family that is no ring (labs.exercises.patterns).
PATTERN_KEYS = {"direct": "pattern_direct", "halving": "pattern_halving", "tree": "pattern_tree",
                "gather": "pattern_gather", "extra": "pattern_extra", "silent": "pattern_silent",
                "other": "pattern_other"}

# (world size, shape, dtype): sizes divisible by n, not divisible, smaller than n (1 too), 2-D.
_CASES = (
    (2, (1,), "float32"), (2, (5,), "float32"), (2, (8,), "float32"), (2, (7,), "float64"),
    (2, (6,), "int64"), (2, (3, 4), "float32"),
    (3, (1,), "float32"), (3, (2,), "float32"), (3, (7,), "float32"), (3, (9,), "float32"),
    (3, (10,), "float64"), (3, (5,), "int64"), (3, (2, 5), "float32"),
    (4, (1,), "float32"), (4, (3,), "float32"), (4, (10,), "float32"), (4, (16,), "float32"),
    (4, (7,), "float64"), (4, (9,), "int64"), (4, (3, 3), "float32"), (4, (6,), "bfloat16"),
    # Larger, and not divisible by n.
    (3, (1001,), "float32"), (4, (1027,), "float32"),
)
# Of the traced case's calls, the animation draws at most this many sends per rank
# (a ring makes 2(n-1)); a report never carries a longer trace (review N-4).
TRACE_SENDS_PER_RANK_EXTRA = 2


def case_id(world: int, shape: tuple, dtype: str) -> str:
    dims = "x".join(map(str, shape))
    return f"w{world}-{'n' if len(shape) == 1 else ''}{dims}-{dtype}"


def cases(seed: int) -> list[dict]:
    """The hidden cases; ``seed`` only changes the numbers in them."""
    return [{"id": case_id(w, shape, dtype), "world_size": w, "shape": list(shape), "dtype": dtype,
             "seed": seed * 100 + i} for i, (w, shape, dtype) in enumerate(_CASES)]


def bytes_check(case: dict, ranks: list[dict]) -> dict:
    n = len(ranks)
    size = checks.size_bytes(case)
    elem = size // max(1, len(ranks[0]["expected"]["values"]))
    expected = 2 * (n - 1) / n * size
    low, high = expected - 2 * elem, expected + 2 * elem
    total_expected = 2 * (n - 1) * size
    shown = round(expected, 1) if expected % 1 else int(expected)
    def whole(r) -> bool:  # a rank that sent the whole tensor in one message
        return n > 2 and any(c["op"] in ("send", "isend") and c["bytes"] == size for c in r["calls"])

    for r in ranks:
        sent = r["sent"]
        if low <= sent <= high:
            continue
        common = {"rank": r["rank"], "sent": sent, "expected": shown, "world_size": n, "size": size}
        if sent == 0:
            return checks.failed("bytes", "bytes_none", **common)
        if whole(r):
            return checks.failed("bytes", "bytes_whole_buffer", **common, whole=(n - 1) * size)
        return checks.failed("bytes", "bytes_off", **common, low=max(0, int(low)), high=int(high))
    total = sum(r["sent"] for r in ranks)
    if total == 0:
        return checks.failed("bytes", "bytes_none", rank=0, sent=0, expected=shown, world_size=n, size=size)
    if total != total_expected:
        r = next((r for r in ranks if whole(r)), None)
        if r is not None:
            return checks.failed("bytes", "bytes_whole_buffer", rank=r["rank"], sent=r["sent"], expected=shown,
                                 world_size=n, size=size, whole=(n - 1) * size)
        return checks.failed("bytes", "bytes_total", sent=total, expected=total_expected, world_size=n,
                             size=size)
    return checks.passed("bytes", expected=shown)


def _found(case: dict, ranks: list[dict]) -> tuple[dict, list]:
    """The family of the ranks' sends (``patterns.allreduce``), and the sends."""
    n = len(ranks)
    size = checks.size_bytes(case)
    numel = math.prod(case["shape"])
    sends = [patterns.sends_of(r["calls"]) for r in ranks]
    # The largest chunk of the usual splits: ceil-sized (tensor_split, torch.chunk), or floor-sized
    # with the remainder in the last one. A pipelined ring's segments are no larger.
    largest = max(-(-numel // n), numel - (n - 1) * (numel // n))
    return patterns.allreduce(n, sends, chunk=largest * (size // max(1, numel))), sends


def pattern_check(case: dict, ranks: list[dict]) -> dict:
    """From three ranks on, the messages must form a ring (or a pipelined ring): else the
    family found, where it left the ring, and its cost in the alpha-beta model."""
    n = len(ranks)
    if n < 3:  # one other rank to send to: every exchange is a ring
        return checks.passed("pattern", world_size=n)
    found, sends = _found(case, ranks)
    if found["family"] in patterns.RINGS:
        return checks.passed("pattern", world_size=n, messages=found["messages"])
    size = checks.size_bytes(case)
    cost = patterns.cost(found["family"], n, size, sends)
    return checks.failed("pattern", PATTERN_KEYS[found["family"]], **found["left"], **cost, world_size=n,
                         size=size, messages=found["messages"])


def pattern(case: dict, ranks: list[dict]) -> dict:
    """The report's pattern of ``PATTERN_CASE``: ``{"family", "world_size", "messages"}``."""
    found, _ = _found(case, ranks)
    return {"family": found["family"], "world_size": found["world_size"], "messages": found["messages"]}


def check(case: dict, ranks: list[dict]) -> list[dict]:
    findings = checks.shape_and_dtype(case, ranks)
    findings.append(checks.in_place(case, ranks))
    findings.append(checks.values(case, ranks))
    findings.append(bytes_check(case, ranks))
    findings.append(pattern_check(case, ranks))
    return findings


def trace(case: dict, ranks: list[dict]) -> dict:
    """The learner's sends, as the router recorded them, as ``labs.ring`` trace records
    for ``labs.ring.ringtrace.trace_steps``: at most 2(n-1) + `TRACE_SENDS_PER_RANK_EXTRA` per
    rank, so that no submission can make the page draw more than a ring's steps."""
    n = len(ranks)
    size = checks.size_bytes(case)
    limit = 2 * (n - 1) + TRACE_SENDS_PER_RANK_EXTRA
    sends = [[c for c in r["calls"] if c["op"] in ("send", "isend")][:limit] for r in ranks]
    recvs = [[c for c in r["calls"] if c["op"] in ("recv", "irecv")][:limit] for r in ranks]
    starts = [c["t_start"] for calls in sends for c in calls]
    origin = min(starts) if starts else 0.0
    whole = all(c["bytes"] == size for calls in sends for c in calls)
    traces = []
    for rank_sends, rank_recvs in zip(sends, recvs, strict=True):
        steps = []
        for i, c in enumerate(rank_sends):
            recv = rank_recvs[i] if i < len(rank_recvs) else None
            phase = "pass-around" if whole else ("reduce-scatter" if i < n - 1 else "all-gather")
            t_end = c["t_end"] if c["t_end"] is not None else c["t_start"]
            steps.append({"step": i, "phase": phase, "send_chunk": None if whole else c["chunk"],
                          "recv_chunk": None, "send_to": c["peer"],
                          "recv_from": recv["peer"] if recv else None, "bytes": c["bytes"],
                          "recv_bytes": recv["bytes"] if recv else 0,
                          "t_start": c["t_start"] - origin, "t_end": t_end - origin})
        traces.append(steps)
    return {"world_size": n, "size": len(ranks[0]["expected"]["values"]), "size_bytes": size,
            "dtype": case["dtype"], "traces": traces}
