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
from labs.model import PRECISIONS

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


# lab -> (what a report of it yields, the figure names it may yield)
FIGURES: dict[str, tuple[Callable[[Any], dict[str, float]], tuple[str, ...]]] = {
    "ring": (_ring, ("n", "S", "t", "bw")),
    "bench": (_bench, ("n", "a", "B")),
    "ddp": (_ddp, ("Y", "C", "k", "r1", "rk")),
    "sharding": (_sharding, ("n", "N", "P", "w", "g", "o", "z2")),
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
