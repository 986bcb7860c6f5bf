"""broadcast: the learner's ``broadcast(tensor, src)`` against ``dist.broadcast``.

Graded per case: shape and dtype kept, in place, every value equal to rank
src's input (a copy is exact), and the bytes. The bytes rule lets every
correct algorithm pass (a chain, a binomial tree, src sending to each rank
in turn) and fails the wasteful or the missing: every rank other than src
receives exactly S bytes (it needs the tensor once), src receives nothing,
and src sends at least S (the data has to leave it).

The counts are the router's (``runtime/router.py``): every send and
receive of a rank is a frame to the harness, which forwards it and counts
its payload outside the learner's process, so the learner's code cannot set
them, and a rank other than src has no way to src's tensor but a message
the router counted (the router answers a rank with nothing but its own
calls' completions and the payloads it counted into it).

Any correct scheme passes; the report names the one found in
`PATTERN_CASE` (``labs.exercises.patterns.broadcast``): a star, a chain, a
pipeline (a chain in segments), a tree, or other.
"""

from __future__ import annotations

from labs.exercises import checks, patterns

ID = "broadcast"
FUNCTION = "broadcast"
DRIVER = "broadcast"
FORBID_COLLECTIVES = True
ALLOWED = ("send", "recv", "isend", "irecv", "get_rank", "get_world_size")
TRACE_CASE = None
PATTERN_CASE = "w4-src3-n10-float32"  # the case whose message pattern the report names

# (world size, src, shape, dtype): src is not only 0; sizes below n and 2-D too.
_CASES = (
    (2, 0, (5,), "float32"), (2, 1, (1,), "float32"), (2, 1, (6,), "int64"),
    (3, 2, (7,), "float32"), (3, 1, (1,), "float64"), (3, 0, (2, 3), "int64"), (3, 1, (4,), "float32"),
    (4, 3, (10,), "float32"), (4, 1, (3,), "float32"), (4, 2, (5,), "float64"), (4, 0, (2, 2), "int64"),
    # Larger ones.
    (3, 1, (1001,), "float32"), (4, 2, (1027,), "float32"),
)


def cases(seed: int) -> list[dict]:
    out = []
    for i, (w, src, shape, dtype) in enumerate(_CASES):
        dims = "x".join(map(str, shape))
        out.append({"id": f"w{w}-src{src}-{'n' if len(shape) == 1 else ''}{dims}-{dtype}", "world_size": w,
                    "src": src, "shape": list(shape), "dtype": dtype, "seed": seed * 100 + i})
    return out


def bytes_check(case: dict, ranks: list[dict]) -> dict:
    size = checks.size_bytes(case)
    src = int(case["src"])
    for r in ranks:
        if r["rank"] == src and r["received"]:
            return checks.failed("bytes", "bytes_src_received", rank=src, received=r["received"])
        if r["rank"] != src and r["received"] != size:
            key = "bytes_none" if r["received"] == 0 and r["sent"] == 0 else "bytes_received"
            return checks.failed("bytes", key, rank=r["rank"], received=r["received"], expected=size,
                                 sent=r["sent"])
    sent = ranks[src]["sent"]
    if sent < size:
        return checks.failed("bytes", "bytes_src_sent", rank=src, sent=sent, expected=size)
    return checks.passed("bytes", expected=size)


def check(case: dict, ranks: list[dict]) -> list[dict]:
    findings = checks.shape_and_dtype(case, ranks)
    findings.append(checks.in_place(case, ranks))
    findings.append(checks.values(case, ranks, exact=True))
    findings.append(bytes_check(case, ranks))
    return findings


def pattern(case: dict, ranks: list[dict]) -> dict:
    """The report's pattern of ``PATTERN_CASE``: ``{"family", "world_size", "depth"}``."""
    sends = [patterns.sends_of(r["calls"]) for r in ranks]
    return patterns.broadcast(len(ranks), int(case["src"]), sends)
