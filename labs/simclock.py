"""The simulated clock: replay a collective's messages on a model of real hardware.

A run on this machine measures CPU time, which depends on how busy the two
cores are. This module answers a different question, the same way every time:
if these exact messages ran on real hardware, how long would they take? Its
input is a message log (the trusted router's record of an exercise, or the
topology lab's trace): for each rank, in the order the rank made them, its
sends and receives, each with a peer and a byte count. Its output is a time
that depends only on that log, the node map and the target, so a rerun of the
same code gives the same figure to the last bit.

The rules, which are those of the alpha-beta model with one addition
(contention for a port):

- a message of ``n`` bytes over a link of latency alpha and bandwidth B
  takes ``alpha + n / B``; the link class (inside a node, or between nodes)
  comes from the node map;
- a send leaves when everything its rank did before it in its log is
  complete: the messages it received have arrived, and so have the ones it
  sent (a send is complete when its data is at the other end). A receive
  logged right after a send overlaps with it, as ``isend`` then ``recv``
  do; the next send waits for both, as the ring's ``request.wait()`` does;
- the k-th send from rank a to rank b is the k-th receive b posted from a
  (MPI's and gloo's matching rule);
- a message occupies the ports it crosses for ``n / B``: inside a node each
  GPU's NVLink port out and in; between nodes each GPU's own network card
  (a rail-optimised cluster: one NIC per GPU), or, on the shaped link of the
  topology lab, the one link each way. A second message on a busy port waits
  its turn (in the order the messages were posted).

With one link class and no waiting, a ring all-reduce of S bytes on n ranks
replays as ``2(n-1) (alpha + S/(n B))``: the closed form of ``labs.model``
(`labs.model.ring_time`), which ``tests/test_simclock.py`` checks.

`schedule` writes the logs of the two all-reduces of the topology lab (flat
ring, hierarchical) for any node map, so a projection can be made at a size
no lab ran (two nodes of eight GPUs). Pure arithmetic: no torch, cheap to import.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

# One entry of a rank's log: ("send" or "recv", peer rank, bytes).
Op = tuple[str, int, int]
Log = list[list[Op]]


@dataclass(frozen=True)
class Link:
    """One class of link: latency per message (s) and bandwidth each way (bytes/s)."""

    alpha_s: float
    bandwidth_Bps: float

    def time(self, nbytes: float) -> float:
        return self.alpha_s + nbytes / self.bandwidth_Bps


@dataclass(frozen=True)
class Target:
    """Hardware to project onto: the link inside a node and the link between nodes.

    ``per_gpu_nic``: True when every GPU has its own network port (rail-optimised
    nodes: the messages of different GPUs do not share one); False when all
    traffic from one node to another shares one link each way (the lab's veth).
    ``one_node``: place every rank in one node whatever the run's node map was.
    """

    key: str
    intra: Link
    inter: Link
    per_gpu_nic: bool = True
    one_node: bool = False
    max_ranks_per_node: int | None = None


# The figures and where they come from (the lesson "topology" cites the same):
# - NVLink 4 on H100/H200: 900 GB/s per GPU both ways together, 450 GB/s each way
#   (NVIDIA H100 datasheet); NVSwitch gives every GPU its full rate to any other.
# - InfiniBand NDR: 400 Gb/s per port = 50 GB/s each way; a DGX H100 has eight
#   ConnectX-7 ports for the compute fabric, one per GPU (NVIDIA DGX H100 user guide).
# - Latency per message: NCCL's own tuning constants for its ring with the
#   Simple protocol, 3.4 us on NVLink and 14 us over the network
#   (NVIDIA/nccl src/graph/tuning.cc, hwLatencies). A model value, not a measurement.
NVLINK4 = Link(alpha_s=3.4e-6, bandwidth_Bps=450e9)
IB_NDR = Link(alpha_s=14e-6, bandwidth_Bps=50e9)
H100_NODE = Target("h100_node", intra=NVLINK4, inter=NVLINK4, one_node=True, max_ranks_per_node=8)
H100_TWO_NODES = Target("h100_ib", intra=NVLINK4, inter=IB_NDR, per_gpu_nic=True, max_ranks_per_node=8)
TARGETS = {t.key: t for t in (H100_NODE, H100_TWO_NODES)}


@dataclass
class Projection:
    """What a replay gives: the time, and the bytes each link class carried."""

    time_s: float
    bytes_intra: int = 0
    bytes_inter: int = 0
    messages: int = 0
    rank_end_s: list[float] = field(default_factory=list)


class LogError(ValueError):
    """A log whose sends and receives do not pair up (a rank waits for a message nobody sent)."""


def replay(log: Sequence[Sequence[Op]], nodes: Sequence[int], target: Target) -> Projection:
    """The time ``log`` takes on ``target`` with rank r on node ``nodes[r]``.

    Raises `LogError` when a receive has no matching send or the other way
    round, or a log names a rank that is not in it.
    """
    world = len(log)
    if len(nodes) != world:
        raise LogError(f"{world} ranks in the log, {len(nodes)} in the node map")
    where = [0] * world if target.one_node else list(nodes)
    partner = _pairs(log)
    free: dict[tuple, float] = {}  # port -> when it is free again
    arrival: dict[tuple[int, int], float] = {}  # (rank, index of recv) -> when its data is there
    clock = [0.0] * world  # when everything the rank did so far has completed
    pos = [0] * world  # the next entry of each rank's log
    unsent = [0] * world  # the rank's sends posted but not yet scheduled
    posted: list[tuple[float, int, int]] = []  # (time, rank, index) of sends ready to go
    out = Projection(time_s=0.0)

    def advance(rank: int) -> None:
        """Walk ``rank``'s log until it must wait: for a message not yet scheduled, or,
        before its next send, for its own earlier sends."""
        ops = log[rank]
        while pos[rank] < len(ops):
            i = pos[rank]
            if ops[i][0] == "recv":
                if (rank, i) not in arrival:
                    return
                clock[rank] = max(clock[rank], arrival[(rank, i)])
            else:
                if unsent[rank]:
                    return
                unsent[rank] += 1
                heapq.heappush(posted, (clock[rank], rank, i))
            pos[rank] += 1

    for rank in range(world):
        advance(rank)
    while posted:
        # The earliest posted send goes first: a send not posted yet waits for a message
        # in this heap to arrive, so it cannot be posted earlier than this one.
        t, src, i = heapq.heappop(posted)
        _kind, dst, nbytes = log[src][i]
        inter = where[src] != where[dst]
        link = target.inter if inter else target.intra
        if inter and not target.per_gpu_nic:
            ports = [("link", where[src], where[dst])]
        else:
            kind = "nic" if inter else "nvl"
            ports = [(kind, "out", src), (kind, "in", dst)]
        start = max([t, *(free.get(p, 0.0) for p in ports)])
        busy = nbytes / link.bandwidth_Bps
        for p in ports:
            free[p] = start + busy
        done = start + link.alpha_s + busy
        out.messages += 1
        if inter:
            out.bytes_inter += nbytes
        else:
            out.bytes_intra += nbytes
        out.time_s = max(out.time_s, done)
        receiver = partner[(src, i)]
        arrival[receiver] = done
        unsent[src] -= 1
        clock[src] = max(clock[src], done)  # the send is complete when its data has arrived
        advance(receiver[0])
        advance(src)
    stuck = [r for r in range(world) if pos[r] < len(log[r])]
    if stuck:
        raise LogError(f"rank {stuck[0]} waits for a message that is never sent")
    out.rank_end_s = list(clock)
    return out


def _pairs(log: Sequence[Sequence[Op]]) -> dict[tuple[int, int], tuple[int, int]]:
    """(rank, index of a send) -> (rank, index of its receive): the k-th send from a to b
    is the k-th receive b posted from a."""
    world = len(log)
    sends: dict[tuple[int, int], list[tuple[int, int]]] = {}
    recvs: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for rank, ops in enumerate(log):
        for i, (kind, peer, nbytes) in enumerate(ops):
            if not 0 <= peer < world or peer == rank:
                raise LogError(f"rank {rank} names peer {peer}")
            if nbytes < 0:
                raise LogError(f"rank {rank}: a message of {nbytes} bytes")
            if kind == "send":
                sends.setdefault((rank, peer), []).append((rank, i))
            elif kind == "recv":
                recvs.setdefault((peer, rank), []).append((rank, i))
            else:
                raise LogError(f"rank {rank}: unknown op {kind!r}")
    partner: dict[tuple[int, int], tuple[int, int]] = {}
    for pair in sorted(set(sends) | set(recvs)):
        s, r = sends.get(pair, []), recvs.get(pair, [])
        if len(s) != len(r):
            raise LogError(f"rank {pair[0]} sends {len(s)} message(s) to rank {pair[1]}, which receives {len(r)}")
        partner.update(zip(s, r, strict=True))
    return partner


# --------------------------------------------------------------------------
# The two all-reduces of the topology lab, as logs


def _chunks(nbytes: int, parts: int, item: int) -> list[int]:
    """Bytes of each of ``parts`` chunks of an ``nbytes`` buffer of ``item``-byte elements,
    split as ``torch.tensor_split`` splits it (the first ones one element longer)."""
    count = nbytes // item
    base, extra = divmod(count, parts)
    return [(base + (1 if c < extra else 0)) * item for c in range(parts)]


def ring_ops(members: Sequence[int], rank: int, chunk_bytes: Sequence[int], phases: str) -> list[Op]:
    """``rank``'s messages in a ring over ``members`` (global ranks, in ring order).

    ``phases``: "rs" (reduce-scatter, n-1 steps), "ag" (all-gather, n-1
    steps) or "rs+ag" (a ring all-reduce). At step s of reduce-scatter the
    rank at ring position p sends chunk p-s to its right and receives chunk
    p-s-1 from its left, as ``labs.ring.allreduce.ring_allreduce`` does; each
    step is an isend followed by a receive.
    """
    n = len(members)
    p = members.index(rank)
    right, left = members[(p + 1) % n], members[(p - 1) % n]
    ops: list[Op] = []
    if "rs" in phases:
        for s in range(n - 1):
            ops += [("send", right, chunk_bytes[(p - s) % n]), ("recv", left, chunk_bytes[(p - s - 1) % n])]
    if "ag" in phases:
        for s in range(n - 1):
            ops += [("send", right, chunk_bytes[(p + 1 - s) % n]), ("recv", left, chunk_bytes[(p - s) % n])]
    return ops


def node_map(nodes: int, per_node: int) -> list[int]:
    """Rank r lives on node r // per_node: ranks are numbered node by node."""
    return [r // per_node for r in range(nodes * per_node)]


def schedule(algo: str, nodes: int, per_node: int, size_bytes: int, item: int = 4) -> Log:
    """The log of one all-reduce of ``size_bytes`` on ``nodes`` x ``per_node`` ranks.

    ``algo`` "flat": one ring over all ranks in rank order (it crosses between
    nodes where a node's last rank passes to the next node's first).
    "hierarchical": a ring reduce-scatter inside each node, so that the rank
    with local index j owns chunk j+1 of k; a ring all-reduce of that chunk
    among the ranks with the same local index on every node (one "rail"); a
    ring all-gather inside each node. What ``labs.topology.rank`` runs.
    """
    world = nodes * per_node
    if algo == "flat":
        members = list(range(world))
        chunks = _chunks(size_bytes, world, item)
        return [ring_ops(members, r, chunks, "rs+ag") for r in range(world)]
    if algo != "hierarchical":
        raise ValueError(f"unknown algorithm {algo!r}: flat or hierarchical")
    k = per_node
    local = _chunks(size_bytes, k, item)
    log: Log = []
    for r in range(world):
        node, j = divmod(r, k)
        inside = [node * k + i for i in range(k)]
        rail = [i * k + j for i in range(nodes)]
        owned = local[(j + 1) % k]
        ops = ring_ops(inside, r, local, "rs") if k > 1 else []
        if nodes > 1:
            ops += ring_ops(rail, r, _chunks(owned, nodes, item), "rs+ag")
        if k > 1:
            ops += ring_ops(inside, r, local, "ag")
        log.append(ops)
    return log


# --------------------------------------------------------------------------
# Closed forms, for the tests and the lesson


def flat_ring_time(nodes: int, per_node: int, size_bytes: float, target: Target) -> float:
    """A ring over all N ranks takes 2(N-1) steps of S/N bytes, each as slow as the slowest
    link the ring uses: the network when it spans nodes (a step-by-step ring waits for its
    slowest hop at every step), else the link inside the node."""
    n = nodes * per_node
    if n <= 1:
        return 0.0
    link = target.inter if nodes > 1 and not target.one_node else target.intra
    return 2 * (n - 1) * link.time(size_bytes / n)


def hierarchical_time(nodes: int, per_node: int, size_bytes: float, target: Target) -> float:
    """Reduce-scatter inside the node (k-1 steps of S/k), all-reduce of S/k across nodes
    (2(m-1) steps of S/(k m)), all-gather inside the node (k-1 steps of S/k).

    Exact for the replay when no two messages share a port (one NIC per GPU, or
    everything on one NVLink node). On one shared link each way the k rails'
    messages queue on it: this form charges each middle step k messages' worth
    of bytes, an upper bound the replay can beat where a rail runs ahead.
    """
    m, k = nodes, per_node
    inside = 2 * (k - 1) * target.intra.time(size_bytes / k) if k > 1 else 0.0
    if m == 1:
        return inside
    link = target.intra if target.one_node else target.inter
    share = 1 if target.one_node or target.per_gpu_nic else k
    step = link.alpha_s + share * size_bytes / (k * m) / link.bandwidth_Bps
    return inside + 2 * (m - 1) * step


def inter_node_bytes(algo: str, nodes: int, per_node: int, size_bytes: float) -> float:
    """Bytes that cross from one node to the other, each way, with two nodes.

    Flat ring: 2(N-1)/N x S (one ring edge each way, each carries what every
    rank sends). Hierarchical: k rails each all-reduce S/k among m nodes,
    2(m-1)/m x S/k each, so 2(m-1)/m x S in all.
    """
    m, k = nodes, per_node
    n = m * k
    if m < 2:
        return 0.0
    if algo == "flat":
        return 2 * (n - 1) / n * size_bytes
    return 2 * (m - 1) / m * size_bytes
