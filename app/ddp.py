"""The DDP lab's result on the page: the breakdown (what bucketing saves, what overlap hides,
and what it would hide where communication takes no compute), the swim lanes of the
timeline, "predict, then measure" beside the step model, and the other sections' figures.

Called by ``app.labviews.show_run`` for a finished DDP run; the lanes' words
(`lane_names`) serve the bucketed-overlap exercise's timeline too. The numbers
are the ones the ranks measured (``labs.report.DdpSummary``), the step model
``labs.timeline.step_model``'s with the fit ``academy.labruns.pages.step_model_fit``
chooses; every figure in the learner's marks (``num``).
"""

from __future__ import annotations

import json
import os

import streamlit as st

from academy.labruns import pages as labruns
from academy.models import LabRun
from app import charts
from app import timeline as lanes
from app.ui import t
from app.widgets import chart, lang, num
from labs import timeline as spans
from labs.ddp import report


def run_cpus(run: LabRun) -> int:
    """CPU cores of the machine the run reports (``LabRun.machine``), else this one's."""
    return (run.machine or {}).get("cpu_count") or os.cpu_count() or 1


# Overlap "hides little" below this share of the communication it could hide (the bucketed
# sync's): then the page says in one line why a CPU hides so little.
LITTLE_HIDDEN = 0.25


def breakdown(run: LabRun, bd: report.Breakdown, gpu: dict | None = None) -> None:
    """Per-step time of three ways to sync, and the two effects apart: what
    bucketing saves (fewer calls) and what overlap hides (behind backward).

    Where overlap hid little, one line says why (gloo computes on the cores backward
    needs); ``gpu``, the step model of the timeline's DDP at the breakdown's bucket size
    (`labs.timeline.step_model` with a fit), says what it would hide where communication
    takes no compute from backward, as on a GPU."""
    st.markdown(f"**{t('labs.ddp.breakdown', count=bd.steps)}**")
    names = {k: t(f"labs.ddp.{k}") for k in ("naive", "bucketed", "ddp", "forward", "backward",
                                             "exposed_comm", "optimizer", "sync")}
    chart(charts.breakdown_figure({"naive": bd.naive, "bucketed": bd.bucketed, "ddp": bd.ddp}, names, lang=lang()),
          key=f"bd_{run.id}")
    saving, hidden = bd.bucketing_saving, bd.overlap_hidden
    st.markdown(t("labs.ddp.bucketing", ms=saving.ms.median, q1=saving.ms.q1, q3=saving.ms.q3,
                  before=saving.calls_before, after=saving.calls_after, count=saving.ms.k,
                  per_call=saving.per_call_ms or 0.0))
    st.caption(t("labs.ddp.bucketing_why"))
    st.markdown(t("labs.ddp.overlap", ms=hidden.ms.median, q1=hidden.ms.q1, q3=hidden.ms.q3,
                  backward=hidden.backward_ms.median, count=hidden.buckets, cap=bd.bucket_cap_mb))
    if hidden.ms.median < LITTLE_HIDDEN * bd.bucketed.get("exposed_comm", 0.0):
        st.caption(t("labs.ddp.overlap_why", cpus=run_cpus(run)))
    if gpu is not None and gpu["hidden_ms"] is not None and bd.hidden is not None:  # one model in both
        st.markdown(t("labs.ddp.overlap_gpu", hidden=gpu["hidden_ms"], comm=gpu["comm_ms"],
                      cap=num(bd.bucket_cap_mb, "g")))


def lane_names() -> dict[str, str]:
    """The swim lanes' words (``app.timeline.timeline_figure``'s ``labels``) in the learner's language."""
    names = {k: t(f"labs.timeline.{k}") for k in ("rank", "compute", "comm", "ms", "span", "start", "end")}
    names.update({k: t(f"labs.ddp.{k}") for k in ("forward", "backward", "optimizer")}, comm=t("labs.timeline.comm"),
                 wait=t("labs.timeline.wait"))
    return names


def timeline(run: LabRun, s: report.DdpSummary, tl: report.Timeline, fit: dict | None) -> None:
    """Every rank's compute and communication on one clock: the naive sync above, DDP
    at the bucket cap the slider picks below, with the overlap and exposed figures, then
    "predict, then measure" with ``fit`` (`academy.labruns.step_model_fit`)."""
    st.markdown(f"**{t('labs.timeline.title', count=tl.steps)}**")
    st.markdown(":material/visibility: " + t("labs.timeline.look"))
    variants, caps = tl.variants, sorted(tl.caps, key=lambda c: c.bucket_cap_mb)
    default = next(c.bucket_cap_mb for c in tl.caps if c.variant == "ddp")
    cap = st.select_slider(t("labs.timeline.cap"), [c.bucket_cap_mb for c in caps], value=default,
                           format_func=lambda v: f"{num(v, 'g')} MiB", key=f"tl_cap_{run.id}")
    chosen = variants[next(c.variant for c in caps if c.bucket_cap_mb == cap)]
    shown = [(t("labs.timeline.naive"), variants["naive"]),
             (t("labs.timeline.ddp", cap=num(cap, "g")), chosen)]
    left, right = st.columns([3, 1])
    chart(lanes.timeline_figure(shown, lane_names(), lang=lang()), key=f"tl_{run.id}_{cap}",
          caption=t("labs.timeline.alt"), where=left)
    for title, var in shown:
        right.metric(t("labs.timeline.overlap", name=title), num(var.overlap, ".0%"),
                     help=t("labs.timeline.overlap_help"))
        right.metric(t("labs.timeline.exposed", name=title), f"{num(var.exposed_comm_ms, '.2f')} ms",
                     help=t("labs.timeline.exposed_help"))
    if chosen.overlap_steps:
        st.caption(t("labs.timeline.per_step", name=shown[1][0],
                     steps=", ".join(num(x, ".0%") for x in chosen.overlap_steps)))
    idle = ", ".join(f"{r.rank}: {num(r.idle_ms, '.2f')}" for r in chosen.ranks)
    st.caption(t("labs.timeline.idle", idle=idle, count=chosen.allreduce_calls, hidden=tl.hidden,
                 depth=tl.depth or (run.params or {}).get("depth") or 3, batch=tl.batch_per_rank,
                 cpus=run_cpus(run)))
    trace = spans.chrome_trace({name: var.plain() for name, var in variants.items()})
    st.download_button(t("labs.timeline.download"), json.dumps(trace),
                       file_name=f"lab-{run.id}-timeline.json", mime="application/json",
                       key=f"trace_{run.id}", on_click="ignore")
    predict(run, s, tl, cap, chosen, fit)


def _cell(value: float | None) -> str:
    """A figure in ms, or a dash where there is none (no prediction, no benchmark)."""
    return "—" if value is None else num(value, ".2f")


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{_cell(value)} ms"


def predict(run: LabRun, s: report.DdpSummary, tl: report.Timeline, cap: float,
            chosen: report.DdpVariant, fit: dict | None) -> None:
    """Predict, then measure: the step model (compute measured + exposed communication
    from ``fit``: the run's own timing of dist.all_reduce, or for an older run this
    machine's benchmark) beside the measured step and the learner's prediction, with
    the residuals; without a fit (an older run, no benchmark), how to get one."""
    n, backend = s.world_size, s.backend
    st.markdown(f"**{t('labs.predict.title', cap=num(cap, 'g'), count=n)}**")
    step = spans.step_model(chosen.plain(), world_size=n, fit=fit, gradient_bytes=tl.gradient_bytes)
    guess = (run.params or {}).get("predicted_step_ms")
    at_guess = chosen is tl.variants["ddp"]  # the prediction was for the breakdown's DDP cap
    c1, c2, c3 = st.columns(3)
    c1.metric(t("labs.predict.guess"), _ms(guess if at_guess else None), help=t("labs.predict.guess_help"))
    c2.metric(t("labs.predict.model"), _ms(step["model_ms"]), help=t("labs.predict.model_help"))
    c3.metric(t("labs.predict.measured"), _ms(step["measured_ms"]), help=t("labs.predict.measured_help"))
    st.dataframe([{t("labs.predict.term"): t(f"labs.predict.row_{key}"), t("labs.timeline.ms"): _cell(step[f"{key}_ms"])}
                  for key in ("compute", "comm", "exposed", "hidden", "model", "measured")], hide_index=True)
    if fit is None:
        st.info(t("labs.predict.no_fit", count=n, backend=backend), icon=":material/speed:")
    else:
        if fit["source"] == "run":
            st.caption(t("labs.predict.fit_run", alpha=fit["alpha_s"] * 1e6, bw=fit["bandwidth_Bps"] / 1e9,
                         count=n))
        else:
            st.caption(t("labs.predict.fit", run=fit["run_id"], alpha=fit["alpha_s"] * 1e6,
                         bw=fit["bandwidth_Bps"] / 1e9, count=n))
        st.markdown(t("labs.predict.residual_model", ms=step["residual_ms"],
                      share=step["residual_ms"] / step["model_ms"] if step["model_ms"] else 0.0))
    if guess is None:
        st.caption(t("labs.predict.no_guess"))
    elif not at_guess:
        st.caption(t("labs.predict.other_cap", ms=guess, cap=num(tl.variants["ddp"].bucket_cap_mb, "g")))
    else:
        st.markdown(t("labs.predict.residual_guess", ms=step["measured_ms"] - guess,
                      share=(step["measured_ms"] - guess) / guess if guess else 0.0))


def ddp(run: LabRun, s: report.DdpSummary) -> None:
    sec = s.sections
    eq = sec.equivalence
    if eq:
        n = s.world_size
        st.markdown(f"**{t('labs.ddp.equivalence', count=n, b=eq.batch_per_rank, nb=eq.global_batch)}**")
        if eq.equivalent:
            st.success(t("labs.ddp.equivalence_ok", diff=eq.max_abs_diff_vs_single_process,
                         tol=eq.tolerance, same="✓" if eq.ranks_identical else "✗"))
        else:
            st.error(t("labs.ddp.equivalence_bad", diff=eq.max_abs_diff_vs_single_process, tol=eq.tolerance))
        chart(charts.lines_figure(
            {t("labs.ddp.loss_ranks", count=n): eq.losses, t("labs.ddp.loss_single"): eq.single_process_losses},
            x_title=t("widgets.ring.step"), y_title=t("labs.ddp.loss"), lang=lang()), key=f"loss_{run.id}")
    tl = sec.timeline
    fit = labruns.step_model_fit(run) if tl else None
    gpu = None
    if tl and fit is not None and "ddp" in tl.variants:  # the breakdown's DDP: its bucket size, its model
        gpu = spans.step_model(tl.variants["ddp"].plain(), world_size=s.world_size, fit=fit,
                               gradient_bytes=tl.gradient_bytes)
    if sec.breakdown:  # None for older runs, which mixed the two effects up (labs.ddp.report.Sections)
        breakdown(run, sec.breakdown, gpu)
    if tl:
        timeline(run, s, tl, fit)
    buckets = sec.buckets
    if buckets:
        st.markdown(f"**{t('labs.ddp.buckets')}**")
        st.dataframe([{"bucket_cap_mb": num(r.bucket_cap_mb, "g"), t("labs.ddp.bucket_calls"): r.allreduce_calls_per_step,
                       t("labs.ddp.bucket_ms"): num(r.step_ms, ".2f")} for r in buckets.rows], hide_index=True)
        st.caption(t("labs.ddp.bucket_noise", count=run.params.get("steps") or 0))
    ns = sec.no_sync
    if ns:
        st.write(t("labs.ddp.no_sync", calls_ns=ns.no_sync.allreduce_calls_per_optimizer_step,
                   calls=ns.sync_every_micro_batch.allreduce_calls_per_optimizer_step,
                   bytes_ns=num(ns.no_sync.bytes_per_optimizer_step, ","),
                   bytes=num(ns.sync_every_micro_batch.bytes_per_optimizer_step, ",")))
    fp = sec.fp16
    if fp:
        st.write(t("labs.ddp.fp16", ratio=fp.bytes_ratio, loss16=fp.fp16.final_loss, loss32=fp.fp32.final_loss))
    sampler = sec.sampler
    if sampler:
        st.write(t("labs.ddp.sampler", same="✓" if sampler.same_order_next_epoch_without_set_epoch else "✗"))
    sc = sec.scaling
    if sc and sc.rows:
        st.markdown(f"**{t('labs.ddp.scaling')}**")
        st.dataframe([{t("labs.ddp.world"): r.world_size, t("labs.ddp.throughput"): round(r.samples_per_s),
                       t("labs.ddp.efficiency"): num(r.efficiency, ".0%")} for r in sc.rows], hide_index=True)
        st.caption(t("labs.ddp.scaling_note"))


