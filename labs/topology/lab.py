"""Topology: two "nodes" in one box, a shaped link between them, flat ring against hierarchical.

Launch (the namespaces need root, or CAP_SYS_ADMIN and CAP_NET_ADMIN; see
``labs.topology.netns``):

    python -m labs topology                                # 2 nodes x 2 ranks, 200 Mbit/s, ~15 s
    python -m labs topology --world-size 2                 # 2 nodes x 1 rank
    python -m labs topology --namespaces 1                 # 1 node x 4 ranks: no link to cross
    python -m labs topology --rate-mbit 100 --sizes 1048576 4194304 --json
    torchrun --standalone --nproc-per-node 4 -m labs.topology

Rank r lives on node r // k (k = world size / ``namespaces``, the number of
nodes; not ``nodes``, which a run's parameters keep for the workers a
multi-node run spans, ``academy.labruns.queue.nodes_of``). Each node is a network
namespace; with two, a veth pair shaped by ``tc tbf`` to ``rate_mbit`` each
way joins them. Ranks of one node meet on the node's own address (the
kernel's loopback); ranks of different nodes cross the veth. The default
process group stays on the machine's loopback and carries only barriers and
the results, so that the veth's counters see the measured traffic alone.

What the ranks run (``labs.topology.rank``), at each of ``sizes``, each
``repeats`` times:

- ``flat``: one ring over all N ranks (reduce-scatter, then all-gather, by
  hand, as ``labs.ring``'s): where it passes from one node to the other it
  sends 2(N-1)/N of the buffer over the link, each way;
- ``hierarchical``: a ring reduce-scatter inside each node, a ring
  all-reduce of the 1/k a rank owns among the ranks of the same local index
  on every node, a ring all-gather inside each node: 2(m-1)/m of the buffer
  over the link, each way, in fewer slow steps.

For each: the time per all-reduce (the slowest rank's, median and spread over
the repeats), the bytes that crossed the link each way from the veth's own
counters against the bytes the ranks' message log sends across
(`BYTES_TOLERANCE`), the values checked against the sum computed locally, and
projections of the same log by ``labs.simclock``: onto this box (its link
classes measured by a ping-pong, ``links``), onto one H100 NVLink node and
onto H100 nodes joined by InfiniBand NDR. ``scale`` projects both algorithms
at two nodes of eight GPUs.

Then, unless ``--parts allreduce``: FSDP2 over all ranks against HSDP
(``fully_shard`` on a 2-D mesh: shard inside a node, replicate across nodes)
on a small MLP: the bytes over the link per step (counted and predicted from
the collectives called) and what each rank holds (measured, and
``labs.model.state_bytes``).

Where the namespaces cannot be made (no CAP_NET_ADMIN, no iproute2, ranks on
several machines) the ranks run the same on the loopback and the report says
why, in ``unavailable``; the projections need no link and are there all the same.
This module imports no torch.
"""

from __future__ import annotations

import statistics
from typing import Annotated

from pydantic import Field

from labs import reports, simclock
from labs.model import per_parameter, state_bytes
from labs.params import Page, ParamError, dataclass, limit, option

ALGOS = ("flat", "hierarchical")
PARTS = ("allreduce", "hsdp")
RATES = (50, 100, 200, 500, 1000)  # Mbit/s each way: slow enough to dominate loopback on 2 cores
BYTES_TOLERANCE = 0.02  # the payload the link counted within 2% of the bytes the ranks' log sends across
# Bytes of header in each frame the veth counts: Ethernet 14, IPv4 20, TCP 32 (20 and the
# 12-byte timestamp option Linux sends by default).
FRAME_HEADER = 14 + 20 + 32
RANK_MODULE = "labs.topology.rank"
SUMMARY = reports.TopologySummary
DEFAULT_WORLD_SIZE = 4


@dataclass
class Params:
    namespaces: int = option(2, key="topology.nodes", help="nodes in the box, each a network namespace; the "
                             "ranks are split evenly over them", choices=(1, 2), labels="topology.nodes_",
                             page=Page())
    rate_mbit: int = option(200, key="topology.rate", help="rate of the link between the nodes, Mbit/s each way",
                            choices=RATES, labels="topology.rate_", page=Page())
    sizes: list[Annotated[int, Field(ge=64)]] = option([262144, 1048576, 4194304], unit="bytes",
                                                       help="all-reduce sizes in bytes (float32)",
                                                       high=limit("max_bytes"))
    repeats: int = option(3, key="topology.repeats", help="timed all-reduces per size and algorithm "
                          "(the report gives their median and spread)", low=1, high=20,
                          page=Page(widget="slider", low=2, high=5, default=3))
    parts: list[str] = option(list(PARTS), help="what to run: the all-reduces, FSDP against HSDP, or both",
                              choices=PARTS)
    width: int = option(256, help="width of the MLP's square layers (the HSDP part)", low=8, high=2048)
    depth: int = option(4, help="layers of the MLP (the HSDP part)", low=1, high=16)
    steps: int = option(2, help="training steps of FSDP and of HSDP", low=1, high=10)
    seed: int = option(0, help="seed of the values, the model and the batches")

    def __post_init__(self) -> None:
        if not self.parts:
            raise ParamError("parts", "empty", "parts must not be empty")


def check(params: Params, world_size: int) -> None:
    if world_size % params.namespaces:
        raise ParamError("world_size", "nodes", f"{world_size} ranks do not split evenly over "
                         f"{params.namespaces} nodes", value=world_size, nodes=params.namespaces)
    if world_size > 2 * 8:
        raise ParamError("world_size", "range", "the topology lab runs at most 16 ranks", value=world_size,
                         low=1, high=16)


def payload_bytes(counted: list[float] | None, frames: list[float] | None) -> list[float] | None:
    """What the frames the link counted carried above TCP: their bytes less `FRAME_HEADER`
    each. Bare acknowledgements carry nothing and drop out; gloo's own few bytes per
    message stay in (what remains of the gap to the ranks' log)."""
    if counted is None or frames is None:
        return None
    return [c - FRAME_HEADER * f for c, f in zip(counted, frames, strict=True)]


def layout(params: Params, world_size: int) -> tuple[int, int]:
    """(nodes, ranks per node)."""
    return params.namespaces, world_size // params.namespaces


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def box_target(links: dict[str, dict]) -> simclock.Target | None:
    """This machine as a `labs.simclock.Target`: the link classes the ping-pong measured.
    Between the nodes, one shaped link each way that the ranks' messages share, at the rate
    tbf enforces (a lone ping-pong beats it by the bucket tbf lets through at once)."""
    def link(d: dict) -> simclock.Link:
        return simclock.Link(d["alpha_s"], d.get("rate_Bps") or d["bandwidth_Bps"])

    intra, inter = links.get("intra"), links.get("inter")
    if intra is None and inter is None:
        return None
    return simclock.Target("box", intra=link(intra or inter), inter=link(inter or intra), per_gpu_nic=False)


def _project(log, nodes: list[int], targets: dict[str, simclock.Target]) -> dict[str, float]:
    out = {}
    for key, target in targets.items():
        try:
            out[key] = simclock.replay(log, nodes, target).time_s
        except simclock.LogError:
            continue
    return out


def summarize(params: Params, ranks: list[dict], *, world_size: int, backend: str) -> reports.TopologySummary:
    m, k = layout(params, world_size)
    first = ranks[0]
    nodes = simclock.node_map(m, k)
    targets = dict(simclock.TARGETS)
    box = box_target(first.get("links") or {})
    if box is not None:
        targets = {"box": box, **targets}
    rows = []
    for index, (algo, size) in enumerate(first.get("runs", [])):
        per_rank = [r["timings"][index] for r in ranks]
        times = [max(t[i] for t in per_rank) for i in range(len(per_rank[0]))]  # the slowest rank, per repeat
        log = [[tuple(op) for op in r["traces"][index]] for r in ranks]
        crossing = [sum(op[2] for r, ops in enumerate(log) for op in ops
                        if op[0] == "send" and nodes[r] == a and nodes[op[1]] != a) for a in range(m)]
        counted = first["link_bytes"][index] if first.get("link_bytes") else None
        frames = first["link_frames"][index] if first.get("link_frames") else None
        payload = payload_bytes(counted, frames)
        errors = ([abs(c - x) / x if x else (0.0 if c == 0 else 1.0) for c, x in zip(payload, crossing, strict=True)]
                  if payload is not None else None)
        projected = _project(log, nodes, targets)
        rows.append(reports.TopologyRow(
            algo=algo, size=size, time=reports.Spread(**spread(times)),
            link_bytes=counted, link_frames=frames, payload_bytes=payload, model_bytes=crossing,
            retransmitted=first["retransmitted"][index] if first.get("retransmitted") else None,
            bytes_error=max(errors) if errors else None,
            formula_bytes=simclock.inter_node_bytes(algo, m, k, size) if m > 1 else 0.0,
            predicted_s=projected.pop("box", None), projected=projected,
            messages=sum(len(ops) for ops in log) // 2,
            correct=all(r["correct"][index] for r in ranks),
            max_abs_err=max(r["max_abs_err"][index] for r in ranks)))
    scale = [reports.ScaleRow(nodes=2, per_node=8, size=size, algo=algo,
                              projected={key: simclock.replay(simclock.schedule(algo, 2, 8, size),
                                                              simclock.node_map(2, 8), t).time_s
                                         for key, t in simclock.TARGETS.items()},
                              inter_bytes=simclock.inter_node_bytes(algo, 2, 8, size))
             for size in params.sizes for algo in ALGOS] if "allreduce" in params.parts else []
    errors = [r.bytes_error for r in rows if r.bytes_error is not None]
    return reports.TopologySummary(
        world_size=world_size, backend=backend, nodes=m, per_node=k,
        rate_mbit=first.get("rate_mbit"), fabric=first["fabric"], unavailable=first.get("unavailable"),
        unavailable_detail=first.get("unavailable_detail") or "",
        links={name: reports.LinkClass(**d) for name, d in (first.get("links") or {}).items()},
        repeats=params.repeats, rows=rows, scale=scale,
        within_tolerance=all(e <= BYTES_TOLERANCE for e in errors) if errors else None,
        tolerance=BYTES_TOLERANCE, sharding=_sharding(ranks, m, k) if "hsdp" in params.parts else [])


def _sharding(ranks: list[dict], m: int, k: int) -> list[reports.MeshRow]:
    """FSDP over all ranks, HSDP sharded inside the node: what each held and sent."""
    out = []
    for name in ("fsdp", "hsdp"):
        per_rank = [r["sharding"][name] for r in ranks]
        first = per_rank[0]
        shard = m * k if name == "fsdp" else k
        memory = []
        for r, row in enumerate(per_rank):
            predicted = state_bytes("zero3", first["parameters"], owned=row["owned"], **per_parameter("fp32"))
            memory.append(reports.MeshMemory(rank=r, measured=row["measured"],
                                             predicted={key: float(v) for key, v in predicted.items()}))
        steps = [max(r["step_s"][i] for r in per_rank) for i in range(len(first["step_s"]))]
        out.append(reports.MeshRow(
            name=name, shard_size=shard, replicas=(m * k) // shard, parameters=first["parameters"],
            link_bytes=first.get("link_bytes"), link_frames=first.get("link_frames"),
            payload_bytes=payload_bytes(first.get("link_bytes"), first.get("link_frames")),
            predicted_link_bytes=first["predicted_link_bytes"],
            collectives=[reports.MeshCollective(**c) for c in first["collectives"]],
            memory=memory, step_time=reports.Spread(**spread(steps)),
            max_abs_diff=max(r["max_abs_diff"] for r in per_rank)))
    return out


def _mb(x: float) -> str:
    return f"{x / 1e6:.3f}"


def format_text(summary: dict) -> str:
    s = reports.TopologySummary.model_validate(summary)
    head = (f"Topology lab: {s.nodes} node(s) x {s.per_node} rank(s), {s.backend}; "
            + (f"link shaped to {s.rate_mbit:g} Mbit/s each way (veth + tbf, network namespaces)"
               if s.fabric == "namespaces" and s.nodes > 1 else
               "one namespace, no link" if s.fabric == "namespaces" else
               f"no namespaces ({s.unavailable}: {s.unavailable_detail}): loopback only"))
    lines = [head]
    for name, link in s.links.items():
        lines.append(f"  link {name}: alpha {link.alpha_s * 1e6:.1f} us, {link.bandwidth_Bps / 1e6:.2f} MB/s "
                     f"(ping-pong of {link.probe_bytes} bytes)")
    lines.append("size      algo          time ms (median [min..max])  MB over the link each way: counted / "
                 "log   predicted here | H100 node | H100 x IB (ms)")
    for r in s.rows:
        counted = "/".join(_mb(b) for b in r.link_bytes) if r.link_bytes else "-"
        logged = "/".join(_mb(b) for b in r.model_bytes) if r.model_bytes else "-"
        proj = " | ".join(f"{r.projected[key] * 1e3:.4f}" if key in r.projected else "-"
                          for key in simclock.TARGETS)
        pred = f"{r.predicted_s * 1e3:.2f}" if r.predicted_s is not None else "-"
        lines.append(f"{r.size:<9} {r.algo:<13} {r.time.median * 1e3:8.2f} [{r.time.min * 1e3:.2f}.."
                     f"{r.time.max * 1e3:.2f}]   {counted} / {logged}   {pred} | {proj}"
                     + ("" if r.correct else "  WRONG VALUES"))
    if s.within_tolerance is not None:
        lines.append(f"bytes over the link within {s.tolerance:.0%} of the log: {s.within_tolerance}")
    for r in s.scale:
        lines.append(f"at 2 x 8 GPUs, {r.size} bytes, {r.algo}: " + ", ".join(
            f"{key} {v * 1e6:.1f} us" for key, v in r.projected.items()))
    for mesh in s.sharding:
        held = max(sum(x.measured.values()) for x in mesh.memory)
        lines.append(f"[{mesh.name}] shards over {mesh.shard_size}, {mesh.replicas} replica(s): "
                     f"held {held / 1e6:.3f} MB per rank; over the link per step (payload) "
                     + ("/".join(_mb(b) for b in mesh.payload_bytes) if mesh.payload_bytes else "-")
                     + f" MB (predicted {_mb(mesh.predicted_link_bytes)}); step {mesh.step_time.median * 1e3:.1f} ms")
    return "\n".join(lines)
