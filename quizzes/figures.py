"""The figures of a finished lab run that questions are built from (issue #42).

A question template (``content/quiz-templates/<lab>.yaml``, ``quizzes.templates``)
names the figures it reads; this module reads them from the run's stored
report through its one reader, ``labs.reports.read``, in the units the
templates' texts state. Each figure is rounded to ``SIG`` significant
figures (ranks and other counts stay whole): the learner sees exactly the
values the answer is computed from.

A figure a run does not have (a section left out, a fit that failed, the
naive ring whose traffic is not the ring's) is simply absent, and no
template that reads it is asked of that run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from labs import reports
from labs.ddp.report import DdpSummary
from labs.failure.report import FailureSummary
from labs.model import PRECISIONS, powersgd_elements
from labs.straggler.report import StragglerSummary

SIG = 3  # significant figures of a figure as the question shows it


def rounded(value: float) -> float:
    """``value`` to ``SIG`` significant figures, as a plain float (0.0646, 21.6, 31400.0)."""
    if value == 0 or not math.isfinite(value):
        return value
    return float(f"{value:.{SIG}g}")


def _usable(value: Any) -> bool:
    """A positive, finite measured number (a least-squares fit can give alpha < 0 or B = inf)."""
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def _ring(s: reports.RingSummary) -> dict[str, float]:
    """n ranks; S MB all-reduced (10^6 bytes); t ms, the median run; bw its busbw in GB/s.

    Only the chunked rings (ring, pipelined) send 2(n-1)/n of the buffer; the
    naive ring's figures answer none of the templates."""
    if s.algo == "naive" or s.world_size < 2 or not _usable(s.total_time_s):
        return {}
    return {"n": s.world_size, "S": rounded(s.size_bytes / 1e6), "t": rounded(s.total_time_s * 1e3),
            "bw": rounded(s.busbw_GBps)}


def _bench(s: reports.BenchSummary) -> dict[str, float]:
    """n ranks; a µs per step and B GB/s: the alpha-beta fit of the built-in all-reduce,
    the fit the Labs page shows."""
    fit = s.fit.get("all_reduce")
    if s.world_size < 2 or fit is None or not (_usable(fit.alpha_s) and _usable(fit.bandwidth_GBps)):
        return {}
    return {"n": s.world_size, "a": rounded(fit.alpha_s * 1e6), "B": rounded(fit.bandwidth_GBps)}


def _ddp(s: DdpSummary) -> dict[str, float]:
    """From the timeline's DDP variant: Y % of the communication overlapped backward, C ms
    per step and rank an all-reduce was in flight. From the scaling section: r1 and rk
    samples/s on 1 and on k ranks (k the largest world size measured)."""
    out: dict[str, float] = {}
    timeline = s.sections.timeline
    variant = timeline.variants.get("ddp") if timeline is not None else None
    if variant is not None and _usable(variant.comm_ms):
        out.update(Y=rounded(variant.overlap * 100), C=rounded(variant.comm_ms))
    scaling = s.sections.scaling
    rows = {row.world_size: row for row in scaling.rows} if scaling is not None else {}
    k = max((w for w in rows if w > 1), default=None)
    if 1 in rows and k is not None and _usable(rows[1].samples_per_s) and _usable(rows[k].samples_per_s):
        out.update(k=k, r1=rounded(rows[1].samples_per_s), rk=rounded(rows[k].samples_per_s))
    return out


def _sharding(s: reports.ShardingSummary) -> dict[str, float]:
    """n ranks; N million parameters; P MB of weights; on rank 0, measured: under DDP w, g
    and o MB of weights, gradients and optimizer state, under ZeRO-2 z2 MB in all."""
    ddp, zero2 = s.strategies.get("ddp"), s.strategies.get("zero2")
    if ddp is None or zero2 is None or not ddp.ranks or not zero2.ranks:
        return {}
    held = ddp.ranks[0].measured
    parts = [held.get("params"), held.get("grads"), held.get("optimizer")]
    parameters = s.model.bytes / PRECISIONS.get(s.precision, {"weights": math.nan})["weights"]
    if not all(_usable(p) for p in parts) or not _usable(parameters):
        return {}
    w, g, o = (rounded(p / 1e6) for p in parts)
    return {"n": s.world_size, "N": rounded(parameters / 1e6), "P": rounded(s.model.bytes / 1e6),
            "w": w, "g": g, "o": o, "z2": rounded(sum(zero2.ranks[0].measured.values()) / 1e6)}


def _compression(s: reports.CompressionSummary) -> dict[str, float]:
    """Bytes each rank handed to the collectives per compressed step, measured and whole: D
    under fp32 (all-reduce), K under top-k (all-gather), p1 and p2 under PowerSGD of rank 1
    and 2 (all-reduce).

    p1 and p2 come only where every matrix of the run's model is still compressed at rank
    3 (``labs.model.powersgd_elements`` grows by the same step from rank 1 to 2 to 3), so
    that rank 3's bytes follow from them as the lab would measure them."""
    out: dict[str, float] = {}
    ran = s.strategies
    if "fp32" in ran and ran["fp32"].bytes_per_step > 0:
        out["D"] = ran["fp32"].bytes_per_step
    topk = ran.get("topk_ef") or ran.get("topk")
    if topk is not None and topk.bytes_per_step > 0:
        out["K"] = topk.bytes_per_step
    one, two = ran.get("powersgd_r1"), ran.get("powersgd_r2")
    elements = [powersgd_elements(s.shapes, r) for r in (1, 2, 3)]
    if one is not None and two is not None and elements[2] - elements[1] == elements[1] - elements[0] > 0:
        out.update(p1=one.bytes_per_step, p2=two.bytes_per_step)
    return out


def _topology(s: reports.TopologySummary) -> dict[str, float]:
    """Two nodes of k ranks, the link between them counted: at the largest size both
    all-reduces ran (S MB), f and h MB of payload crossed from node 0 to node 1 per
    all-reduce under the flat ring and the hierarchical all-reduce (the veth's counters,
    less the frames' headers). None where the nodes were not two or nothing was counted."""
    if s.nodes != 2:
        return {}
    counted: dict[int, dict[str, float]] = {}
    for row in s.rows:
        if row.payload_bytes and _usable(row.payload_bytes[0]):
            counted.setdefault(row.size, {})[row.algo] = row.payload_bytes[0]
    sizes = [size for size, algos in counted.items() if {"flat", "hierarchical"} <= set(algos)]
    if not sizes:
        return {}
    size = max(sizes)
    return {"k": s.per_node, "S": rounded(size / 1e6), "f": rounded(counted[size]["flat"] / 1e6),
            "h": rounded(counted[size]["hierarchical"] / 1e6)}


def _straggler(s: StragglerSummary) -> dict[str, float]:
    """n ranks. Nobody slowed: o ms per step, the longest own time of a rank (all but its
    waiting), and a ms, one all-reduce of the gradients that waits for nobody. Local SGD,
    averaging every H steps with one rank slowed: oL ms, the longest own time per step, and
    aL ms, one averaging all-reduce as the last rank to arrive saw it."""
    out: dict[str, float] = {}
    even, local = s.variants.get("even"), s.variants.get("local_sgd")
    if even is not None and even.own_ms and all(map(_usable, even.own_ms)) and _usable(s.allreduce_ms.median):
        out.update(n=s.world_size, o=rounded(max(even.own_ms)), a=rounded(s.allreduce_ms.median))
    if (local is not None and local.own_ms and all(map(_usable, local.own_ms)) and local.allreduce_ms is not None
            and _usable(local.allreduce_ms.median)):
        out.update(H=s.period, oL=rounded(max(local.own_ms)), aL=rounded(local.allreduce_ms.median))
    return out


def _failure(s: FailureSummary) -> dict[str, float]:
    """A checkpoint every E steps of s ms (the median step); d ms, the median save on rank 0;
    R s, the median restart (kill to the first resumed step). d only where a save was
    timed, R only where a restart was."""
    out: dict[str, float] = {}
    if s.checkpoint_every > 0 and _usable(s.step_s.median):
        out.update(E=s.checkpoint_every, s=rounded(s.step_s.median * 1e3))
    if s.save_s is not None and _usable(s.delta_s):
        out["d"] = rounded(s.delta_s * 1e3)
    if s.restarts > 0 and _usable(s.restart_cost_s):
        out["R"] = rounded(s.restart_cost_s)
    return out


# lab -> (what a report of it yields, the figure names it may yield)
FIGURES: dict[str, tuple[Callable[[Any], dict[str, float]], tuple[str, ...]]] = {
    "ring": (_ring, ("n", "S", "t", "bw")),
    "bench": (_bench, ("n", "a", "B")),
    "ddp": (_ddp, ("Y", "C", "k", "r1", "rk")),
    "sharding": (_sharding, ("n", "N", "P", "w", "g", "o", "z2")),
    "compression": (_compression, ("D", "K", "p1", "p2")),
    "topology": (_topology, ("k", "S", "f", "h")),
    "straggler": (_straggler, ("n", "o", "a", "H", "oL", "aL")),
    "failure": (_failure, ("E", "s", "d", "R")),
}


def figures(lab: str, result: Any) -> dict[str, float]:
    """The figures of a finished run of ``lab`` (``LabRun.result``); empty for a lab
    without templates or a result that is not its lab's report."""
    if lab not in FIGURES:
        return {}
    try:
        report = reports.read(lab, result)
    except reports.ReportError:
        return {}
    return FIGURES[lab][0](report.summary)
