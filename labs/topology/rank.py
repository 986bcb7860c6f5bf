"""The topology lab's rank code: enter a node, run both all-reduces, FSDP against HSDP.

Imported only by the ranks (``labs.topology.lab.RANK_MODULE``). Rank 0 makes
the namespaces (``labs.topology.netns``) and tells the others their names
over the default process group, which stays on the machine's loopback; then
every rank moves its main thread into its node's namespace and builds the
lab's own gloo groups there, bound to the node's address (``topo0``) or, with
one node, its loopback: the whole world, each node, and each "rail" (the ranks
with the same local index on every node), each as a `Duplex` (a socket per
direction). Everything measured runs on those
groups; barriers and results use the default group, so the link's counters
count the measured traffic alone.

The two all-reduces, by hand, each a small diff of the last (as ``labs.ring``):

- `flat_allreduce`: `reduce_scatter` and `all_gather` over the world group;
- `hierarchical_allreduce`: `reduce_scatter` over the node, a ring all-reduce
  of the chunk this rank now owns over its rail, `all_gather` over the node.

Both append every message to a log (``("send" | "recv", global peer, bytes)``
in program order), which ``labs.simclock`` replays.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from typing import NamedTuple

import torch
import torch.distributed as dist
import torch.nn.functional as F

from labs.sharding.zero import held_bytes, make_model, optimizer_tensors
from labs.topology import netns
from labs.topology.lab import ALGOS, Params, layout

SMALL_PROBE = 64  # bytes: the ping-pong that measures a link's latency
# Bytes of the ping-pong that measures a link's bandwidth: a few ms on each class here.
PROBE_BYTES = {"intra": 4 << 20, "inter": 1 << 20}
PROBE_REPEATS = 5


# --------------------------------------------------------------------------
# The all-reduces


class Duplex(NamedTuple):
    """Two gloo groups with the same ranks: ``up`` carries the messages from a lower group rank
    to a higher one, ``down`` the others. gloo moves both directions of one pair of ranks through
    one socket, one after the other (measured on the shaped link: a ring of 2 exchanging 8 MiB
    each way took twice the time of 8 MiB one way); with a socket per direction the link
    carries both at once, as a real full-duplex link does."""

    up: dist.ProcessGroup
    down: dist.ProcessGroup


def _exchange(send: torch.Tensor, into: torch.Tensor, *, group: Duplex, right: int, left: int, ranks: list[int],
              log: list | None) -> None:
    """Send to the right and receive from the left at once (isend, then a blocking recv)."""
    me = dist.get_rank(group.up)
    request = dist.isend(send, group=group.up if me < right else group.down, group_dst=right)
    dist.recv(into, group=group.up if left < me else group.down, group_src=left)
    request.wait()
    if log is not None:
        log.append(("send", ranks[right], send.numel() * send.element_size()))
        log.append(("recv", ranks[left], into.numel() * into.element_size()))


def reduce_scatter(chunks: list[torch.Tensor], group: Duplex, log: list | None = None) -> int:
    """Ring reduce-scatter of ``chunks`` (one per member of ``group``) in place; returns the
    index of the chunk this rank now holds summed over the group: its position + 1."""
    n, p = dist.get_world_size(group.up), dist.get_rank(group.up)
    ranks = dist.get_process_group_ranks(group.up)
    incoming = torch.empty_like(chunks[0])  # the first chunk is the largest
    for s in range(n - 1):
        send_c, recv_c = (p - s) % n, (p - s - 1) % n
        into = incoming[: chunks[recv_c].numel()]
        _exchange(chunks[send_c], into, group=group, right=(p + 1) % n, left=(p - 1) % n, ranks=ranks, log=log)
        chunks[recv_c].add_(into)
    return (p + 1) % n


def all_gather(chunks: list[torch.Tensor], group: Duplex, log: list | None = None) -> None:
    """Ring all-gather: the rank at position p holds chunk p + 1; afterwards every rank holds all."""
    n, p = dist.get_world_size(group.up), dist.get_rank(group.up)
    ranks = dist.get_process_group_ranks(group.up)
    for s in range(n - 1):
        _exchange(chunks[(p + 1 - s) % n], chunks[(p - s) % n], group=group, right=(p + 1) % n,
                  left=(p - 1) % n, ranks=ranks, log=log)


def flat_allreduce(flat: torch.Tensor, world: Duplex, log: list | None = None) -> torch.Tensor:
    """One ring over every rank: 2(N-1) steps of S/N."""
    chunks = list(torch.tensor_split(flat, dist.get_world_size(world.up)))
    reduce_scatter(chunks, world, log)
    all_gather(chunks, world, log)
    return flat


def hierarchical_allreduce(flat: torch.Tensor, node: Duplex, rail: Duplex, log: list | None = None) -> torch.Tensor:
    """Reduce-scatter inside the node, all-reduce of the owned 1/k across the nodes (the
    rail: one rank per node, same local index), all-gather inside the node."""
    local = list(torch.tensor_split(flat, dist.get_world_size(node.up)))
    owned = reduce_scatter(local, node, log)
    if dist.get_world_size(rail.up) > 1:
        flat_allreduce(local[owned], rail, log)
    all_gather(local, node, log)
    return flat


# --------------------------------------------------------------------------
# The node this rank lives on


class Fabric:
    """This rank's side of the lab's network: its node's namespace, and the lab's groups."""

    def __init__(self, ctx, p: Params):
        self.ctx, self.p = ctx, p
        self.m, self.k = layout(p, ctx.world_size)
        self.node, self.local = divmod(ctx.rank, self.k)
        self.made: netns.Fabric | None = None
        self.home: int | None = None
        self.saved_ifname = os.environ.get("GLOO_SOCKET_IFNAME")
        self.groups: list = []
        self.info = self._make()
        if self.info["names"]:
            self.home = netns.enter(self.info["names"][self.node])
        # The lab's groups bind to the node's address: topo0 between two nodes, else loopback.
        os.environ["GLOO_SOCKET_IFNAME"] = netns.IFACE if self.info["linked"] else "lo"
        world = ctx.world_size
        self.world = self._group(list(range(world)))
        nodes = [self._group([n * self.k + i for i in range(self.k)]) for n in range(self.m)]
        rails = [self._group([n * self.k + j for n in range(self.m)]) for j in range(self.k)]
        self.node_group, self.rail_group = nodes[self.node], rails[self.local]

    def _group(self, ranks: list[int]) -> Duplex:
        pair = Duplex(dist.new_group(ranks), dist.new_group(ranks))  # every rank makes every group, in order
        self.groups.extend(pair)
        return pair

    def _make(self) -> dict:
        """Rank 0 makes the namespaces and tells everyone their names, or why there are none."""
        hosts = [None] * self.ctx.world_size
        dist.all_gather_object(hosts, socket.gethostname())
        info = {"names": [], "linked": False, "reason": None, "detail": ""}
        if self.ctx.rank == 0:
            if len(set(hosts)) > 1:
                info.update(reason="several_hosts", detail=f"{len(set(hosts))} machines")
            else:
                try:
                    self.made = netns.create(self.m, self.p.rate_mbit)
                    info.update(names=self.made.names, linked=self.made.linked)
                except netns.Unavailable as why:
                    info.update(reason=why.reason, detail=why.detail)
        box = [info]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def counters(self) -> list[dict] | None:
        return self.made.counters() if self.made is not None and self.made.linked else None

    def close(self) -> None:
        """Leave the node, and (rank 0, once every rank has left) delete the namespaces."""
        for group in reversed(self.groups):
            with contextlib.suppress(Exception):
                dist.destroy_process_group(group)
        self.groups = []
        if self.home is not None:
            netns.leave(self.home)
            self.home = None
        if self.saved_ifname is None:
            os.environ.pop("GLOO_SOCKET_IFNAME", None)
        else:
            os.environ["GLOO_SOCKET_IFNAME"] = self.saved_ifname
        dist.barrier()
        if self.made is not None:
            self.made.close()
            self.made = None


def crossed(before: list[dict] | None, after: list[dict] | None, times: int = 1,
            what: str = "tx_bytes") -> list[float] | None:
    """What each node's end of the link sent between two readings (bytes, or with ``what``
    "tx_packets" frames), per ``times``."""
    if before is None or after is None:
        return None
    return [(a[what] - b[what]) / times for a, b in zip(after, before, strict=True)]


# --------------------------------------------------------------------------
# Measuring


def probe(fab: Fabric, peer: int, large: int, repeats: int, tick) -> dict | None:
    """Alpha and bandwidth of the link between rank 0 and ``peer``: ping-pongs of a small
    message and of ``large`` bytes, one-way time = round trip / 2; rank 0 returns them.

    The fit takes the fastest of the repeats (at least `PROBE_REPEATS`): on a busy machine
    the slower ones measure how long a rank waited for a core, not the link."""
    me = fab.ctx.rank
    one_way: dict[int, list[float]] = {SMALL_PROBE: [], large: []}
    for nbytes, times in one_way.items():
        buf = torch.zeros(nbytes // 4)
        for _ in range(max(repeats, PROBE_REPEATS) + 1):  # the first is a warm-up
            dist.barrier()
            t0 = time.perf_counter()
            if me == 0:
                dist.send(buf, group=fab.world.up, group_dst=peer)
                dist.recv(buf, group=fab.world.down, group_src=peer)
            elif me == peer:
                dist.recv(buf, group=fab.world.up, group_src=0)
                dist.send(buf, group=fab.world.down, group_dst=0)
            times.append((time.perf_counter() - t0) / 2)
        times.pop(0)
    tick()
    if me != 0:
        return None
    small, big = (min(one_way[n]) for n in (SMALL_PROBE, large))
    bandwidth = (large - SMALL_PROBE) / max(big - small, 1e-9)
    return {"alpha_s": max(small - SMALL_PROBE / bandwidth, 1e-9), "bandwidth_Bps": bandwidth,
            "probe_bytes": large, "small": _spread(one_way[SMALL_PROBE]), "large": _spread(one_way[large])}


def _spread(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"median": ordered[len(ordered) // 2], "min": ordered[0], "max": ordered[-1]}


def _values(size: int, rank: int, seed: int) -> torch.Tensor:
    """Rank ``rank``'s buffer: small whole numbers, so that every sum is exact in float32."""
    n = size // 4
    return ((torch.arange(n, dtype=torch.int64) * (seed + 7) + rank * 5) % 9 + 1).to(torch.float32) * (rank + 1)


def allreduces(fab: Fabric, tick) -> dict:
    """Both algorithms at every size, ``repeats`` times each: times, link bytes, logs, checks."""
    p, ctx = fab.p, fab.ctx
    runs, timings, traces, link_bytes, link_frames, resent, correct, errors = [], [], [], [], [], [], [], []
    for size in p.sizes:
        expected = sum(_values(size, r, p.seed) for r in range(ctx.world_size))
        mine = _values(size, ctx.rank, p.seed)
        for algo in ALGOS:
            buf = mine.clone()
            log: list = []
            times = []
            dist.barrier()
            before = fab.counters() if ctx.rank == 0 else None
            for i in range(p.repeats):
                buf.copy_(mine)
                dist.barrier()  # the default group: on the machine's loopback, not the link
                t0 = time.perf_counter()
                with ctx.communicating():
                    if algo == "flat":
                        flat_allreduce(buf, fab.world, log if i == 0 else None)
                    else:
                        hierarchical_allreduce(buf, fab.node_group, fab.rail_group, log if i == 0 else None)
                times.append(time.perf_counter() - t0)
                tick()
            dist.barrier()
            if ctx.rank == 0:
                after = fab.counters()
                link_bytes.append(crossed(before, after, p.repeats))
                link_frames.append(crossed(before, after, p.repeats, "tx_packets"))
                resent.append(int(sum(crossed(before, after, 1, "retransmitted") or [0])))
            err = float((buf - expected).abs().max())
            runs.append((algo, size))
            timings.append(times)
            traces.append(log)
            correct.append(err == 0.0)
            errors.append(err)
    return {"runs": runs, "timings": timings, "traces": traces, "correct": correct, "max_abs_err": errors,
            "link_bytes": link_bytes if ctx.rank == 0 and all(b is not None for b in link_bytes) else None,
            "link_frames": link_frames if ctx.rank == 0 and all(b is not None for b in link_frames) else None,
            "retransmitted": resent if ctx.rank == 0 and link_bytes and all(b is not None for b in link_bytes) else None}


# --------------------------------------------------------------------------
# FSDP over all ranks against HSDP


# What each collective sends across the cut between two nodes, per byte of payload,
# as gloo runs it here (measured on this lab's veth, 4 ranks): an all-gather is a ring,
# (n-1)/n of the output over each ring edge; a reduce-scatter sends what an all-reduce
# of its whole input sends, 2(n-1)/n; an all-reduce 2(n-1)/n. A group inside one node
# sends nothing across.
_KINDS = {"all_gather_single": ("all_gather", "output_tensor", 0, 1),
          "all_gather_into_tensor": ("all_gather", "output_tensor", 0, 1),
          "reduce_scatter_single": ("reduce_scatter", "input", 1, 2),
          "reduce_scatter_tensor": ("reduce_scatter", "input", 1, 2),
          "all_reduce": ("all_reduce", "tensor", 0, 2)}


class Recorder:
    """The collectives FSDP2 calls, with their groups (FSDP2 calls ``torch.distributed``'s functions)."""

    def __init__(self, node_of: list[int]):
        self.node_of = node_of
        self.calls: list[tuple[str, int, bool, int]] = []  # (kind, group size, spans nodes, payload bytes)

    @contextlib.contextmanager
    def recording(self):
        saved = {name: getattr(dist, name) for name in _KINDS}

        def wrap(name, func):
            kind, arg, position, _factor = _KINDS[name]

            def recorded(*args, **kwargs):
                t = kwargs[arg] if arg in kwargs else args[position]
                group = kwargs.get("group")
                ranks = dist.get_process_group_ranks(group) if group is not None else list(range(len(self.node_of)))
                spans = len({self.node_of[r] for r in ranks}) > 1
                self.calls.append((kind, len(ranks), spans, t.numel() * t.element_size()))
                return func(*args, **kwargs)

            return recorded

        for name, func in saved.items():
            setattr(dist, name, wrap(name, func))
        try:
            yield self
        finally:
            for name, func in saved.items():
                setattr(dist, name, func)

    def summary(self, steps: int) -> list[dict]:
        """Per kind and group: payload and calls per step, and the bytes it sends from node 0 to node 1.

        A ring over a group that spans two nodes (its ranks in order, node by node) crosses
        from node 0 to node 1 once; so does a group of one rank per node (a rail, a ring of
        m). Each such call sends factor x (n-1)/n x payload across, and the world holds
        world/n such groups calling it at once (one per rail; one when the group is the world).
        """
        world = len(self.node_of)
        out: dict[tuple, dict] = {}
        factors = {kind: factor for kind, _arg, _pos, factor in _KINDS.values()}
        for kind, n, spans, nbytes in self.calls:
            entry = out.setdefault((kind, n, spans), {"kind": kind, "group_size": n, "spans_nodes": spans,
                                                      "bytes": 0.0, "calls": 0, "predicted_link_bytes": 0.0})
            entry["bytes"] += nbytes / steps
            entry["calls"] += 1
            if spans and n > 1:
                entry["predicted_link_bytes"] += (world // n) * factors[kind] * (n - 1) / n * nbytes / steps
        return list(out.values())


def _mesh(fab: Fabric, name: str):
    from torch.distributed.device_mesh import DeviceMesh

    if name == "fsdp":
        return DeviceMesh.from_group(fab.world.up, "cpu")
    grid = torch.arange(fab.ctx.world_size).view(fab.m, fab.k)
    return DeviceMesh.from_group([fab.rail_group.up, fab.node_group.up], "cpu", mesh=grid,
                                 mesh_dim_names=("replicate", "shard"))


def train(fab: Fabric, name: str, tick) -> tuple[dict, torch.Tensor]:
    """``p.steps`` Adam steps of the MLP under FSDP2 (one mesh dimension, every rank) or HSDP."""
    from torch.distributed.fsdp import fully_shard

    p, ctx = fab.p, fab.ctx
    model = make_model(p.width, p.depth, p.seed)
    total = sum(q.numel() for q in model.parameters())
    mesh = _mesh(fab, name)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh, reshard_after_forward=True)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    recorder = Recorder([r // fab.k for r in range(ctx.world_size)])
    step_s = []
    dist.barrier()
    before = fab.counters() if ctx.rank == 0 else None
    for step in range(p.steps):
        gen = torch.Generator().manual_seed(p.seed * 1009 + step * ctx.world_size + ctx.rank)
        x, y = torch.randn(8, p.width, generator=gen), torch.randn(8, p.width, generator=gen)
        opt.zero_grad()
        dist.barrier()
        t0 = time.perf_counter()
        with ctx.communicating(), recorder.recording():
            F.mse_loss(model(x), y).backward()
            opt.step()
        step_s.append(time.perf_counter() - t0)
        tick()
    dist.barrier()
    after = fab.counters() if ctx.rank == 0 else None
    measured = held_bytes({"params": list(model.parameters()),
                           "grads": [q.grad for q in model.parameters() if q.grad is not None],
                           "optimizer": optimizer_tensors(opt)})
    owned = sum(q.to_local().numel() if hasattr(q, "to_local") else q.numel() for q in model.parameters())
    collectives = recorder.summary(p.steps)
    with ctx.communicating():
        weights = torch.cat([q.full_tensor().detach().reshape(-1) for q in model.parameters()])
    row = {"measured": measured, "owned": owned, "parameters": total, "step_s": step_s,
           "collectives": collectives, "predicted_link_bytes": sum(c["predicted_link_bytes"] for c in collectives),
           "link_bytes": crossed(before, after, p.steps), "link_frames": crossed(before, after, p.steps, "tx_packets")}
    return row, weights


def run_rank(ctx, p: Params) -> dict:
    """Make or join the node, measure, leave; rank 0's result carries the link's figures."""
    t0 = time.perf_counter()
    m, k = layout(p, ctx.world_size)
    total = (len(p.sizes) * len(ALGOS) * p.repeats if "allreduce" in p.parts else 0) \
        + (2 * p.steps if "hsdp" in p.parts else 0) + 2
    done = [0]

    def tick(phase: str = "") -> None:
        done[0] += 1
        ctx.progress(done[0], total, phase or ctx.phase)

    ctx.progress(0, total, "namespaces")
    fab = Fabric(ctx, p)
    try:
        out = {"fabric": "namespaces" if fab.info["names"] else "loopback",
               "unavailable": fab.info["reason"], "unavailable_detail": fab.info["detail"],
               "rate_mbit": p.rate_mbit if fab.info["linked"] else None, "links": {}}
        ctx.progress(done[0], total, "probe")
        intra = probe(fab, 1, PROBE_BYTES["intra"], p.repeats, tick) if k > 1 else None
        inter = probe(fab, k, PROBE_BYTES["inter"], p.repeats, tick) if m > 1 else None
        if inter is not None and fab.info["linked"]:
            inter["rate_Bps"] = p.rate_mbit * 1e6 / 8  # what tbf lets through, each way
        for key, link in (("intra", intra), ("inter", inter)):
            if link is not None:
                out["links"][key] = link
        if "allreduce" in p.parts:
            ctx.progress(done[0], total, "all-reduce")
            out.update(allreduces(fab, tick))
        if "hsdp" in p.parts:
            out["sharding"] = {}
            reference = None
            for name in ("fsdp", "hsdp"):
                ctx.progress(done[0], total, name)
                row, weights = train(fab, name, tick)
                reference = weights if reference is None else reference
                row["max_abs_diff"] = float((weights - reference).abs().max())
                out["sharding"][name] = row
    finally:
        fab.close()
    ctx.progress(total, total, "done")
    out["work_s"] = time.perf_counter() - t0
    return out
