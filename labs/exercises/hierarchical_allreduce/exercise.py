"""hierarchical-allreduce: the learner's ``hierarchical_allreduce(tensor, nodes)`` on a node map.

Trusted (never bound into the sandbox). Each case gives a node map,
``nodes``: the ranks of each node (m nodes of k ranks; not always
contiguous, so that a rank's node must be read from the map, not from its
number). The driver (``runtime/drivers/hierarchical_allreduce.py``) hands
the map to the learner's function and, in the harness, to the router
(``node_of``), which then records for every send whether it stayed inside
a node or crossed to another, and counts each rank's bytes per class.
``check`` reads only those records and the harness's expected values:

- **values**, **in place**, **shape**, **dtype**: as ring-allreduce.
- **links** (bytes per link class, the router's counts): across the nodes,
  all ranks together must send exactly 2(m-1) x S (each element crosses
  2(m-1) times: a ring all-reduce among m nodes, the least any all-reduce
  can send across), and each rank about 2(m-1)/m of its 1/k share, so that
  every rank of a node carries its part (on rail-optimised nodes each has
  its own network port). Inside the nodes each rank sends about 2(k-1)/k x S
  and all together exactly 2m(k-1) x S, a reduce-scatter and an all-gather.
  A flat ring sends 2(N-1)/N x S over every edge that crosses, which is
  more, and the message says that it looks like one.
- **phases** (the order of each rank's sends, by link class): first only
  inside the node, until the rank has sent its (k-1)/k x S of the
  reduce-scatter; then only across, and only to the ranks of its rail
  (the same position in their node); then inside the node again, (k-1)/k x S
  of the all-gather. The first rank that breaks this is named, with the
  phase: data that left the node too early, an all-gather before the
  exchange across nodes, a send to another rail, a send inside the node in
  the middle of the exchange, or an all-gather of the wrong size.

`trace` replays the messages of one case (`TRACE_CASE`) with
``labs.simclock`` on one H100 NVLink node and on H100 nodes over InfiniBand,
beside the flat ring and the reference schedule, as run and with every
message scaled to `SCALED_BYTES`: the report's simulated clock. It is
shown, never graded.
"""

from __future__ import annotations

from labs import simclock
from labs.exercises import checks

ID = "hierarchical-allreduce"
FUNCTION = "hierarchical_allreduce"
DRIVER = "hierarchical_allreduce"
FORBID_COLLECTIVES = True
ALLOWED = ("send", "recv", "isend", "irecv", "get_rank", "get_world_size")
TRACE_CASE = "w4-2x2-n1024-float32"  # the case the report's simulated clock replays
SCALED_BYTES = 64 << 20  # the clock's second size: every message of the traced case scaled up to it

# (world size, node map, shape, dtype): contiguous and interleaved maps, one rank per node and
# one node, sizes that divide, that do not and that are smaller than the ranks, 2-D.
_CASES = (
    (4, ((0, 1), (2, 3)), (8,), "float32"), (4, ((0, 1), (2, 3)), (10,), "float64"),
    (4, ((0, 1), (2, 3)), (3,), "float32"), (4, ((0, 1), (2, 3)), (3, 4), "int64"),
    (4, ((0, 1), (2, 3)), (1024,), "float32"),
    (4, ((0, 2), (1, 3)), (12,), "float32"), (4, ((0, 2), (1, 3)), (1001,), "float32"),
    (4, ((0,), (1,), (2,), (3,)), (10,), "float32"), (4, ((0, 1, 2, 3),), (10,), "float32"),
    (6, ((0, 1, 2), (3, 4, 5)), (12,), "float32"), (6, ((0, 1, 2), (3, 4, 5)), (1001,), "float64"),
    (6, ((0, 1), (2, 3), (4, 5)), (25,), "float32"), (6, ((0, 3), (1, 4), (2, 5)), (18,), "int64"),
)


def case_id(world: int, nodes: tuple, shape: tuple, dtype: str) -> str:
    contiguous = all(list(ranks) == list(range(ranks[0], ranks[0] + len(ranks))) for ranks in nodes)
    layout = f"{len(nodes)}x{len(nodes[0])}" + ("" if contiguous else "i")
    dims = "x".join(map(str, shape))
    return f"w{world}-{layout}-{'n' if len(shape) == 1 else ''}{dims}-{dtype}"


def cases(seed: int) -> list[dict]:
    """The hidden cases; ``seed`` only changes the numbers in them."""
    return [{"id": case_id(w, nodes, shape, dtype), "world_size": w, "nodes": [list(r) for r in nodes],
             "shape": list(shape), "dtype": dtype, "seed": seed * 100 + i}
            for i, (w, nodes, shape, dtype) in enumerate(_CASES)]


def layout(case: dict) -> tuple[int, int, list[int], list[int]]:
    """(m nodes, k ranks per node, node of each rank, position of each rank in its node)."""
    nodes = case["nodes"]
    where, local = [0] * case["world_size"], [0] * case["world_size"]
    for n, ranks in enumerate(nodes):
        for j, rank in enumerate(ranks):
            where[rank], local[rank] = n, j
    return len(nodes), len(nodes[0]), where, local


def flat_ring_inter(case: dict) -> int:
    """What a flat ring in rank order sends across nodes, all ranks together: each of its
    edges that crosses carries 2(N-1)/N x S (exact for the sizes of the cases)."""
    m, _k, where, _local = layout(case)
    n, size = case["world_size"], checks.size_bytes(case)
    crossing = sum(where[r] != where[(r + 1) % n] for r in range(n))
    return round(crossing * 2 * (n - 1) / n * size)


def _sends(r: dict) -> list[dict]:
    return [c for c in r["calls"] if c["op"] in ("send", "isend")]


def links(case: dict, ranks: list[dict]) -> dict:
    """Bytes per link class against a hierarchical all-reduce's (the router's counts)."""
    m, k, _where, _local = layout(case)
    size = checks.size_bytes(case)
    elem = size // max(1, len(ranks[0]["expected"]["values"]))
    count = size // elem
    inter = [r["sent_by_link"]["inter"] for r in ranks]
    intra = [r["sent_by_link"]["intra"] for r in ranks]
    want_inter, want_intra = 2 * (m - 1) * size, 2 * m * (k - 1) * size
    if sum(inter) != want_inter:
        flat = flat_ring_inter(case)
        key = "hier_inter_flat" if m > 1 and sum(inter) == flat else "hier_inter_total"
        return checks.failed("links", key, sent=sum(inter), expected=want_inter, m=m, k=k, size=size)
    share_low = 2 * (m - 1) * (count // k) // m * elem - 2 * elem
    share_high = 2 * (m - 1) * -(-count // k) // m * elem + 2 * elem
    for r, sent in zip(ranks, inter, strict=True):
        if not max(0, share_low) <= sent <= share_high:
            return checks.failed("links", "hier_inter_rank", rank=r["rank"], sent=sent, low=max(0, share_low),
                                 high=share_high, m=m, k=k)
    if sum(intra) != want_intra:
        return checks.failed("links", "hier_intra_total", sent=sum(intra), expected=want_intra, m=m, k=k,
                             size=size)
    expected = 2 * (k - 1) * size / k
    for r, sent in zip(ranks, intra, strict=True):
        if abs(sent - expected) > 2 * k * elem:
            return checks.failed("links", "hier_intra_rank", rank=r["rank"], sent=sent, expected=round(expected),
                                 k=k)
    return checks.passed("links", inter=sum(inter), intra=sum(intra))


# The order in which `phases` names what went wrong, when ranks went wrong in several ways:
# the earliest phase first, and a rank that never crossed last (a flat ring's first rank
# sends only inside its node; its neighbour's early crossing says more).
PHASE_ORDER = ("phase_left_early", "phase_gather_first", "phase_off_rail", "phase_mixed", "phase_gather_after",
               "phase_never_crossed")


def phases(case: dict, ranks: list[dict]) -> dict:
    """Each rank's sends, in order: inside its node, then across to its rail only, then inside again.
    Of the ranks that break this, the finding names the one whose mistake comes earliest (`PHASE_ORDER`)."""
    m, k, _where, _local = layout(case)
    if m == 1 or k == 1:
        return checks.passed("phases")
    wrong = [f for f in (_rank_phases(case, r) for r in ranks) if f is not None]
    if not wrong:
        return checks.passed("phases")
    return min(wrong, key=lambda f: PHASE_ORDER.index(f["key"]))


def _rank_phases(case: dict, r: dict) -> dict | None:
    """The first way rank ``r``'s sends leave the three phases, or None."""
    m, k, where, local = layout(case)
    size = checks.size_bytes(case)
    elem = size // max(1, len(r["expected"]["values"]))
    half = (k - 1) * size / k  # a reduce-scatter's, or an all-gather's, bytes per rank
    tol = k * elem
    me, sends = r["rank"], _sends(r)
    crossing = [i for i, c in enumerate(sends) if c["link"] == "inter"]
    if not crossing:
        return checks.failed("phases", "phase_never_crossed", rank=me, m=m)
    first, last = crossing[0], crossing[-1]
    before = sum(c["bytes"] for c in sends[:first])
    peer = sends[first]["peer"]
    if before + tol < half:
        return checks.failed("phases", "phase_left_early", rank=me, peer=peer, node=where[peer], sent=before,
                             needed=round(half), k=k)
    if before > half + tol:
        return checks.failed("phases", "phase_gather_first", rank=me, sent=before, needed=round(half), k=k)
    for c in sends[first:last + 1]:
        if c["link"] == "intra":
            return checks.failed("phases", "phase_mixed", rank=me, peer=c["peer"])
        if local[c["peer"]] != local[me]:
            return checks.failed("phases", "phase_off_rail", rank=me, peer=c["peer"], mine=local[me],
                                 theirs=local[c["peer"]])
    after = sum(c["bytes"] for c in sends[last + 1:])
    if abs(after - half) > tol:
        return checks.failed("phases", "phase_gather_after", rank=me, sent=after, needed=round(half), k=k)
    return None


def check(case: dict, ranks: list[dict]) -> list[dict]:
    findings = checks.shape_and_dtype(case, ranks)
    findings.append(checks.in_place(case, ranks))
    findings.append(checks.values(case, ranks))
    findings.append(links(case, ranks))
    findings.append(phases(case, ranks))
    return findings


# --------------------------------------------------------------------------
# The simulated clock of the report


def message_log(ranks: list[dict], scale: float = 1.0) -> simclock.Log:
    """Each rank's sends and receives in the order it made them, as the router recorded them."""
    log = []
    for r in ranks:
        ops = []
        for c in r["calls"]:
            if c["op"] in ("send", "isend") or (c["op"] in ("recv", "irecv") and c["peer"] is not None):
                ops.append(("send" if c["op"].endswith("send") else "recv", c["peer"], c["bytes"] * scale))
        log.append(ops)
    return log


def _project(log, node_of: list[int], m: int, k: int, size: float) -> dict:
    out = {}
    for key, target in simclock.TARGETS.items():
        row = {}
        for name, messages, where in (("yours", log, node_of),
                                      ("flat", simclock.schedule("flat", m, k, int(size)), simclock.node_map(m, k)),
                                      ("hierarchical", simclock.schedule("hierarchical", m, k, int(size)),
                                       simclock.node_map(m, k))):
            try:
                row[name] = simclock.replay(messages, where, target).time_s
            except simclock.LogError:
                row[name] = None
        out[key] = row
    return out


def trace(case: dict, ranks: list[dict]) -> dict:
    """The report's simulated clock: the traced case's messages replayed on both targets, as run
    and scaled to `SCALED_BYTES`, beside a flat ring and the reference; and the time the router
    saw the case take on this machine."""
    m, k, where, _local = layout(case)
    size = checks.size_bytes(case)
    times = [t for r in ranks for c in r["calls"] for t in (c.get("t_start"), c.get("t_end")) if t is not None]
    at = [{"size_bytes": size, "targets": _project(message_log(ranks), where, m, k, size)},
          {"size_bytes": SCALED_BYTES,
           "targets": _project(message_log(ranks, SCALED_BYTES / size), where, m, k, SCALED_BYTES)}]
    return {"kind": "clock", "case": case["id"], "nodes": case["nodes"], "size_bytes": size,
            "cpu_s": (max(times) - min(times)) if times else None, "at": at,
            "bytes": {"intra": sum(r["sent_by_link"]["intra"] for r in ranks),
                      "inter": sum(r["sent_by_link"]["inter"] for r in ranks)}}
