"""The straggler and failure labs on the Labs page: when a rank is slow, and when one dies.

Numbers come from the run's typed report (``labs.StragglerSummary``,
``labs.FailureSummary``), figures from ``app.charts`` and
``app.timeline`` (the DDP lab's swim lanes), drawn through
``app.widgets.chart`` with their tables; the Young/Daly curve is
``labs.failure.lab.waste_fraction`` over the run's own measured costs.
"""

from __future__ import annotations

import math

import streamlit as st

from academy.models import LabRun
from app import charts
from app import timeline as lanes
from app.ddp import lane_names  # the DDP lab's lane words, shared
from app.ui import t
from app.widgets import chart, lang, num
from labs import reports
from labs.failure.lab import waste_fraction
from labs.failure.report import FailureSummary
from labs.straggler.report import StragglerSummary

VARIANTS = ("even", "slow", "local_sgd")
ACHIEVED_SHORT = 0.8  # a slowdown under 80% of the asked factor: say why a quota can bind less


def _spread(x: reports.Spread, spec: str = ".2f") -> str:
    return f"{num(x.median, spec)} ({num(x.min, spec)}–{num(x.max, spec)})"


def straggler(run: LabRun, s: StragglerSummary) -> None:
    """The slowed rank, the steps beside the model, every rank's timeline, what local SGD won and paid."""
    v = s.variants
    st.markdown(t(f"straggler.how_{s.mechanism}", rank=s.slow_rank, factor=s.factor, achieved=s.achieved.median,
                  lo=s.achieved.min, hi=s.achieved.max))
    if s.achieved.median < ACHIEVED_SHORT * s.factor:
        st.info(t(f"straggler.short_{s.mechanism}", factor=s.factor, achieved=s.achieved.median),
                icon=":material/info:")
    names = {name: t(f"straggler.variant.{name}", rank=s.slow_rank, factor=s.factor, period=s.period)
             for name in VARIANTS}
    cols = st.columns(3)
    for where, name in zip(cols, VARIANTS, strict=True):
        x = v[name]
        where.metric(names[name], f"{num(x.step_ms.median, '.2f')} ms",
                     help=t("straggler.step_help", q1=x.step_ms.q1, q3=x.step_ms.q3, count=x.step_ms.k))
    st.markdown(f"**{t('straggler.model_title')}**")
    rows = [{"name": names[name], "median": v[name].step_ms.median, "q1": v[name].step_ms.q1,
             "q3": v[name].step_ms.q3, "model": v[name].model_ms.median} for name in VARIANTS]
    fig = charts.variant_steps_figure(rows, {"measured": t("straggler.measured"), "model": t("straggler.model"),
                                             "variant": t("straggler.variant_axis"), "ms": "ms"}, lang=lang())
    slowed = v["slow"].allreduce_ms or s.allreduce_ms
    chart(fig, key=f"st_steps_{run.id}", caption=t("straggler.model_caption", ms=slowed.median, even=s.allreduce_ms.median,
                                                    period=s.period, steps=s.steps, seeds=s.seeds))
    st.markdown(t("straggler.model_error", error=s.model_error))
    st.markdown(f"**{t('straggler.timeline_title', rank=s.slow_rank)}**")
    st.markdown(":material/visibility: " + t("straggler.timeline_look", rank=s.slow_rank))
    shown = [(names[name], v[name].timeline) for name in VARIANTS]
    chart(lanes.timeline_figure(shown, lane_names(), lang=lang()), key=f"st_tl_{run.id}",
          caption=t("straggler.timeline_alt", period=s.period))
    st.dataframe([{t("labs.timeline.rank"): r, t("straggler.compute"): num(v["slow"].compute_ms[r], ".2f"),
                   t("straggler.own"): num(v["slow"].own_ms[r], ".2f"),
                   t("straggler.wait"): num(v["slow"].wait_ms[r], ".2f")} for r in range(s.world_size)],
                 hide_index=True)
    st.caption(t("straggler.wait_caption", rank=s.slow_rank))
    st.markdown(f"**{t('straggler.local_title', period=s.period)}**")
    c1, c2, c3 = st.columns(3)
    c1.metric(t("straggler.kept"), num(s.lost.median, ".0%"), help=t("straggler.kept_help"))
    c2.metric(t("straggler.recovered"), num(s.recovered.median, "+.0%"),
              help=t("straggler.recovered_help", lo=s.recovered.min, hi=s.recovered.max))
    c3.metric(t("straggler.loss_paid"), num(s.loss_paid.median, "+.4f"),
              help=t("straggler.loss_paid_help", lo=s.loss_paid.min, hi=s.loss_paid.max))
    st.dataframe([{t("straggler.variant_axis"): names[name], t("straggler.throughput"): _spread(v[name].throughput, ".0f"),
                   t("straggler.loss"): _spread(v[name].loss, ".4f")} for name in VARIANTS], hide_index=True)
    st.caption(t("straggler.local_caption", count=s.seeds, period=s.period))
    (st.success if s.same_weights else st.error)(t("straggler.same" if s.same_weights else "straggler.differ"))


def _work_labels() -> dict[str, str]:
    names = {k: t(f"failure.work.{k}") for k in charts.WORK}
    names.update({k: t(f"failure.{k}") for k in ("s", "rank", "step", "attempt", "kind")})
    names.update({"from": t("failure.start"), "to": t("failure.end")})  # the table's columns, not the kind "start"
    return names


def failure(run: LabRun, s: FailureSummary) -> None:
    """What the kill cost: every rank's work kept, lost and redone; the restart's parts; Young/Daly."""
    if s.restarts:
        st.success(t("failure.restarted", rank=s.kill_rank, steps=", ".join(map(str, s.kill_steps)),
                     count=s.restarts, max=s.max_restarts))
    else:
        st.info(t("failure.not_killed"))
    (st.success if s.same_weights else st.error)(
        t("failure.same" if s.same_weights else "failure.differ", diff=s.max_abs_diff, digest=s.digest))
    st.markdown(f"**{t('failure.timeline_title')}**")
    st.markdown(":material/visibility: " + t("failure.timeline_look"))
    labels = _work_labels()
    shown = [(f"{labels['rank']} {lane.rank}", [seg.model_dump() for seg in lane.segments]) for lane in s.lanes]
    chart(charts.work_figure(shown, labels, lang=lang()), key=f"fl_work_{run.id}", caption=t("failure.timeline_alt"))
    by_step(run, s, labels)
    rows = [{t("failure.part"): t("failure.part_checkpoints"), t("failure.s"): num(s.checkpoint_s, ".3f")},
            {t("failure.part"): t("failure.part_lost", count=s.lost_steps), t("failure.s"): num(s.lost_s, ".3f")}]
    for r in s.restart:
        rows += [{t("failure.part"): t(f"failure.part_{part}", attempt=r.attempt, step=r.step),
                  t("failure.s"): num(getattr(r, f"{part}_s"), ".2f")} for part in ("detect", "start", "resume")]
    rows.append({t("failure.part"): t("failure.part_wall"), t("failure.s"): num(s.wall_s, ".2f")})
    st.dataframe(rows, hide_index=True)
    st.caption(t("failure.parts_caption"))
    young_daly(run, s)


def by_step(run: LabRun, s: FailureSummary, labels: dict[str, str]) -> None:
    """Rank 0's work on the axis of steps, an attempt a lane: on the clock the restart dwarfs the
    steps, here the steps lost at the kill and done again stand side by side."""
    st.markdown(f"**{t('failure.steps_title')}**")
    lanes_by_attempt: dict[int, list[dict]] = {}
    for seg in s.lanes[0].segments:
        if seg.kind in ("kept", "lost", "redone"):
            at = {"start_s": seg.step, "end_s": (seg.step if seg.last_step is None else seg.last_step) + 1}
        elif seg.kind == "checkpoint":
            at = {"start_s": seg.step - 0.08, "end_s": seg.step + 0.08}
        else:
            continue
        lanes_by_attempt.setdefault(seg.attempt, []).append({**seg.model_dump(), **at})
    shown = [(t("failure.attempt_lane", attempt=a), segs) for a, segs in sorted(lanes_by_attempt.items())]
    chart(charts.work_figure(shown, {**labels, "s": t("failure.step_axis")}, lang=lang()), key=f"fl_steps_{run.id}",
          caption=t("failure.steps_alt"))


def young_daly(run: LabRun, s: FailureSummary) -> None:
    """The expected waste against the checkpoint interval for the chosen M, from this run's costs."""
    st.markdown(f"**{t('failure.yd_title', mtbf=s.mtbf_s)}**")
    step = s.step_s.median
    if s.save_s is None or s.tau_opt_s is None:
        st.info(t("failure.no_save"))
        return
    low, high = 1.0, max(4.0 * s.tau_opt_s / step, 4.0 * s.checkpoint_every, 10.0)
    intervals = [low * (high / low) ** (i / 60) for i in range(61)]
    costs = {"delta_s": s.delta_s, "mtbf_s": s.mtbf_s, "restart_s": s.restart_cost_s}
    waste = [waste_fraction(k * step, **costs) for k in intervals]
    optimum = s.tau_opt_s / step
    fig = charts.young_daly_figure(
        intervals, waste, optimum=optimum, run=s.checkpoint_every,
        run_waste=waste_fraction(s.tau_s, **costs),
        labels={"curve": t("failure.yd_curve"), "optimum": t("failure.yd_optimum", steps=round(optimum)),
                "run": t("failure.yd_run", steps=s.checkpoint_every), "interval": t("failure.yd_interval"),
                "waste": t("failure.yd_waste")}, lang=lang())
    chart(fig, key=f"fl_yd_{run.id}", caption=t("failure.yd_alt"))
    st.markdown(t("failure.yd_numbers", delta=s.delta_s * 1e3, lo=s.save_s.min * 1e3, hi=s.save_s.max * 1e3,
                  count=len([1 for seg in s.lanes[0].segments if seg.kind == "checkpoint"]),
                  step=step * 1e3, restart=s.restart_cost_s, mtbf=s.mtbf_s, tau=s.tau_opt_s,
                  steps=optimum, floor=s.restart_cost_s / s.mtbf_s,
                  best=math.sqrt(2 * s.delta_s / s.mtbf_s)))
    st.caption(t("failure.yd_lost", half=s.checkpoint_every / 2, lost=s.lost_steps, count=len(s.kill_steps)))
