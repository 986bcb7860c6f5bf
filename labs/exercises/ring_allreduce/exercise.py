"""ring-allreduce: the learner's ``ring_allreduce(tensor)`` against ``dist.all_reduce``.

Graded per case: shape and dtype kept, the result in the tensor passed in
(in place), every value within float rounding of the built-in sum (exact
for integers), and the bytes each rank sent through the counted
send/isend.

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

Where the counts come from. A rank holds no process group: each send and
receive is a frame to the harness's router, which forwards it and counts
its payload outside the learner's process (``runtime/router.py``). The
counts are exact (no framing), so the rule above holds in every case, and
a result that reached a rank without passing the router cannot: the rank
had no other way to the others' inputs, which only the harness held.
"""

from __future__ import annotations

from labs.exercises import checks

ID = "ring-allreduce"
FUNCTION = "ring_allreduce"
DRIVER = "ring_allreduce"
FORBID_COLLECTIVES = True
ALLOWED = ("send", "recv", "isend", "irecv", "get_rank", "get_world_size")
TRACE_CASE = "w4-n10-float32"  # the case whose sends draw the learner's ring

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


def check(case: dict, ranks: list[dict]) -> list[dict]:
    findings = checks.shape_and_dtype(case, ranks)
    findings.append(checks.in_place(case, ranks))
    findings.append(checks.values(case, ranks))
    findings.append(bytes_check(case, ranks))
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
