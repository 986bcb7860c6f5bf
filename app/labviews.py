"""Results of a lab run on the page: metrics, plots and the ring animation.

Figures come from ``app.charts`` and ``app.charts_ring``; the numbers are the ones the processes
measured (``LabRun.result``, typed by ``labs.reports.read``: a result that
is not its lab's report shows as a failure, with why), never recomputed or canned, and are written
with the learner's decimal marks (``num``). The form's widgets are built here
too, from the parameters' schema in ``labs.params``; and the bucketed-overlap
exercise's timeline, drawn with the DDP lab's lanes.
"""

from __future__ import annotations

import csv
import io
import json
import os
from typing import Any

import streamlit as st

from academy.labruns import pages as labruns
from academy.labruns import queue as labqueue
from academy.models import LabRun
from app import calculators as calc
from app import charts, charts_ring, sharding
from app import timeline as lanes
from app.ui import labeler, t
from app.widgets import chart, lang, num, ring_labels
from labs import model as ring_model
from labs import params as lab_params
from labs import reports
from labs import timeline as spans
from labs.ring.ringtrace import trace_steps
from labs.settings import Limits

NVLINK_REFERENCE = (360.0, 480.0)  # GB/s busbw, NCCL all-reduce on 8 x H100/H200


LIVE_EVERY = 0.1  # s: a live run's newest event reaches the page within 0.2 s of the worker storing it
IDLE_EVERY = 1.0  # s: a run waiting behind others: its place changes seldom, and each look asks the queue


def cadence(status: str, wait: float | None = None) -> float:
    """How often the page looks at a run: fast while it runs or is next to start
    (``wait``: the queue's expected wait, 0 when a slot is free), slow while it waits its turn."""
    return LIVE_EVERY if status == "running" or wait == 0 else IDLE_EVERY


def lab_progress(event: dict[str, Any] | None) -> tuple[float, str]:
    """The bar and its words for a running lab's newest event (``labs.context.event``).

    "Starting the processes" until a rank reports a step (the launcher's "launch" and
    each rank's "ready" are still the start), then the phase and step of the total with
    the bar at that step; the launcher's "done" or "error": the ranks have ended and
    the worker is collecting what they left.
    """
    event = event or {}
    step, steps = event.get("step"), event.get("total_steps")
    if event.get("kind") == "status" and event.get("phase") in ("done", "error"):
        return 1.0, t("labs.collecting")
    if event.get("kind") == "status" or not event:
        return 0.0, t("labs.starting")
    if isinstance(step, int) and isinstance(steps, int) and steps > 0:
        return min(max(step / steps, 0.0), 1.0), t("labs.running", phase=event.get("phase", ""), step=step,
                                                    steps=steps)
    return 0.0, t("labs.running_plain", message=event.get("message") or event.get("phase", ""))


def waiting(run_id: int, section: str) -> float | None:
    """Where a queued run (a lab, or an exercise submission) stands, in ``section``'s words:
    its place and how many run at once, or that no worker is up. Returns the expected wait."""
    position, slots, wait = labqueue.queue_info(run_id)
    if slots:
        st.info(t(f"{section}.queued", position=position or 1, count=slots))
    else:
        st.warning(t(f"{section}.no_worker", position=position or 1))
    return wait


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{num(n, '.0f')} {unit}" if unit == "B" else f"{num(n, '.4g')} {unit}"
        n /= 1024
    return f"{num(n)} B"


def param_widget(where, cls, name: str, limits: Limits, *, none: bool = False,
                 default: Any = None) -> Any:
    """The form widget of one parameter, as its field describes it (label,
    choices or range, default); ``none`` puts a "none" choice first and picks it;
    ``default`` replaces the field's (a lab's own world size)."""
    info, spec = lab_params.specs(cls)[name]
    page = spec.page
    value = lab_params.default(info, spec, limits, page=True) if default is None else default
    low, high = lab_params.bounds(spec, limits, page=True)
    helptext = t(page.help) if page.help else None
    widget = page.widget or ("select" if spec.choices else "sizes" if spec.unit == "bytes" else "slider")
    if widget == "prediction":  # optional: empty unless the learner writes a number
        return where.number_input(t(spec.key), min_value=0.0, value=None, step=1.0, format="%.1f",
                                  placeholder=t("labs.predict.placeholder"), help=helptext)
    if widget == "select":
        options = (["none"] if none else []) + list(spec.choices)
        return where.selectbox(t(spec.key), options, index=0 if none else options.index(value),
                               format_func=labeler(spec.labels) if spec.labels else str, help=helptext)
    if widget == "sizes":  # powers of four from low to high
        sizes = [int(low)]
        while sizes[-1] * 4 <= high:
            sizes.append(sizes[-1] * 4)
        value = min(sizes, key=lambda size: abs(size - value))  # a default the limits left out
        return where.select_slider(t(spec.key), sizes, value=value, format_func=_fmt_bytes, help=helptext)
    low, high = int(low), int(high)
    value = min(max(int(value), low), high)  # e.g. fail rank 1 when the limit is one rank
    if widget == "number":
        return int(where.number_input(t(spec.key), low, high, value, help=helptext))
    return where.slider(t(spec.key), low, high, value, help=helptext)


# The ring lab's algorithms and the benchmark rows whose fit models their steps.
BENCH_IMPL = {"ring": "ring", "pipelined": "ring_pipelined", "naive": "naive"}


def _cpus(run: LabRun) -> int:
    """CPU cores of the machine the run reports (``LabRun.machine``), else this one's."""
    return (run.machine or {}).get("cpu_count") or os.cpu_count() or 1


def look_for(run: LabRun, s: reports.Summary) -> None:
    """The one line that opens every lab result: what to look for in it."""
    n = s.world_size
    if isinstance(s, reports.RingSummary):
        naive = s.algo == "naive"
        text = t("labs.look.ring_naive" if naive else "labs.look.ring", count=n,
                 steps=(n - 1) if naive else 2 * (n - 1))
    elif run.lab == "bench":
        text = t("labs.look.bench_two" if n == 2 else "labs.look.bench", count=n)
    else:
        text = t(f"labs.look.{run.lab}")
    st.info(text, icon=":material/visibility:")


def same_bytes_on_two(n: int) -> None:
    """On 2 ranks the naive and the chunked ring move the same bytes: say so."""
    if n == 2:
        st.warning(t("labs.two_ranks_same_bytes"), icon=":material/info:")


def model_line(s: reports.RingSummary, measured: list[float], fit: dict | None, cpus: int) -> dict:
    """The alpha-beta line under the ring lab's measured steps, and its label.

    From ``fit`` (this machine's benchmark of the same algorithm at the same
    world size) when there is one, else from the default loopback values
    (``app.calculators.LINKS``). A line more than ``labs.model.GAP_LIMIT``
    times off carries the factor, in its legend name and in a caption with
    why (``note``).
    """
    n, steps = s.world_size, len(measured)
    step_bytes = s.step_bytes or (s.size_bytes if s.algo == "naive" else max(s.chunk_numels) * s.element_size)
    if fit is not None:
        predicted = ring_model.step_times(n, s.size_bytes, step_bytes, steps, fit=fit)
        name = t("labs.ring.model_fit", run=fit["run_id"], count=n)
    else:
        alpha, bandwidth = calc.LINKS["loopback-gloo"]
        predicted = ring_model.step_times(n, s.size_bytes, step_bytes, steps, link=(alpha, bandwidth))
        name = t("labs.ring.model_default")
    factor = ring_model.gap(measured, predicted)
    note = None
    if ring_model.off_by_more_than_limit(factor):
        below = factor > 1
        times = factor if below else 1 / factor
        name += " · " + t("labs.ring.model_below" if below else "labs.ring.model_above", times=times)
        source = "fit" if fit is not None else "default"
        alpha, bandwidth = calc.LINKS["loopback-gloo"]
        note = t(f"labs.ring.gap_{source}", times=times, count=n, cpus=cpus, alpha=alpha * 1e6, bw=bandwidth / 1e9,
                 direction=t("labs.ring.slower" if below else "labs.ring.faster"))
    return {"predicted": predicted, "name": name, "factor": factor, "note": note}


def ring(run: LabRun, s: reports.RingSummary) -> None:
    n = s.world_size
    naive = s.algo == "naive"
    k = s.repeats
    total = s.total_time or reports.Spread(median=s.total_time_s, min=s.total_time_s, max=s.total_time_s)
    builtin = s.builtin_time or reports.Spread(median=s.builtin_time_s, min=s.builtin_time_s, max=s.builtin_time_s)
    c1, c2, c3 = st.columns(3)
    c1.metric(t("labs.ring.total"), f"{num(s.total_time_s * 1e3, '.2f')} ms")
    c2.metric(t("labs.ring.builtin"), f"{num(s.builtin_time_s * 1e3, '.2f')} ms")
    c3.metric(t("labs.ring.busbw"), f"{num(s.busbw_GBps, '.4f')} GB/s")
    st.caption(t("labs.ring.noise", count=k, lo=total.min * 1e3, hi=total.max * 1e3,
                 blo=builtin.min * 1e3, bhi=builtin.max * 1e3))
    (st.success if s.correct else st.error)(
        t("labs.ring.correct", ok="✓" if s.correct else "✗", err=s.max_abs_err or 0.0))
    if n < 2:
        st.info(t("labs.ring.one_rank"))
        return
    same_bytes_on_two(n)
    steps, durations = trace_steps(s.traces)
    st.markdown(f"**{t('labs_naive.animation') if naive else t('labs.ring.animation')}**")
    speed = st.select_slider(t("labs.ring.speed"), [0.25, 0.5, 1.0, 2.0, 4.0], value=1.0,
                             format_func=lambda v: f"{num(v, 'g')}×", key=f"speed_{run.id}")
    paced = [d / speed for d in durations]
    if naive:
        # Whole buffers go round the ring: one bar per rank, not n chunks.
        labels = {**ring_labels(), "pass-around": t("labs_naive.pass_around"), "buffer": t("labs_naive.whole_buffer"),
                  "carries": t("labs_naive.carries", rank="{rank}")}
        fig = charts_ring.naive_ring_figure(n, steps, labels=labels, step_durations=paced,
                                       buffer_size=_fmt_bytes(s.size_bytes), lang=lang())
    else:
        fig = charts_ring.ring_figure(n, steps, labels=ring_labels(), step_durations=paced,
                                 chunk_sizes=[_fmt_bytes(c * s.element_size) for c in s.chunk_numels],
                                 lang=lang())
    chart(fig, key=f"ring_{run.id}", caption=t("labs_naive.alt") if naive else t("widgets.ring.alt"))
    # Each step's median over the runs, with its min and max (older runs: the one trace).
    spread = s.step_times or [reports.Spread(median=d, min=d, max=d) for d in durations]
    measured = [x.median for x in spread]
    line = model_line(s, measured, labruns.run_machine_fit(run, BENCH_IMPL.get(s.algo, "ring")),
                      cpus=_cpus(run))
    st.markdown(f"**{t('labs.ring.theory', count=k)}**")
    chart(charts.step_time_figure(measured, line["predicted"], {
        "measured": t("labs.ring.measured", count=k), "theory": line["name"],
        "step": t("widgets.ring.step")}, lang=lang(), low=[x.min for x in spread],
        high=[x.max for x in spread]), key=f"steps_{run.id}", caption=line["note"] or None)
    with st.expander(t("labs.ring.trace")):
        st.dataframe([{"rank": r, **rec} for r, recs in enumerate(s.traces) for rec in recs],
                     hide_index=True)


def _or(value: float | None, otherwise: float) -> float:
    return otherwise if value is None else value


def bench(run: LabRun, s: reports.BenchSummary) -> None:
    rows = s.rows
    same_bytes_on_two(s.world_size)
    st.markdown(f"**{t('labs.bench.table')}**")
    st.caption(t("labs.bench.noise", count=s.iters))
    st.dataframe([{"size": r.size, "count": r.count, "type": r.dtype, "impl": r.impl,
                   "collective": r.collective or "", "time (us)": round(r.time_us, 1),
                   "min..max (us)": f"{num(_or(r.min_us, r.time_us), '.1f')}..{num(_or(r.max_us, r.time_us), '.1f')}",
                   "algbw (GB/s)": round(r.algbw, 4), "busbw (GB/s)": round(r.busbw, 4),
                   "#wrong": r.wrong} for r in rows], hide_index=True)
    labels = {"ring": t("labs.bench.ring"), "naive": t("labs.bench.naive"),
              "ring_pipelined": t("labs.bench.ring_pipelined"),
              "all_reduce": t("labs.bench.all_reduce"), "fit": t("labs.bench.fit_line"),
              "reference": t("labs.bench.reference"), "size": t("labs.bench.size_axis")}
    fit = s.fit.get("all_reduce")
    st.markdown(f"**{t('labs.bench.plot')}**")
    chart(charts.busbw_figure([r.model_dump(exclude_none=True) for r in rows], world_size=s.world_size,
                              fit=fit.model_dump() if fit else None, labels=labels,
                              reference=NVLINK_REFERENCE, lang=lang()), key=f"busbw_{run.id}")
    if fit and fit.alpha_s is not None and fit.bandwidth_GBps:
        st.caption(t("labs.bench.fit", alpha=fit.alpha_s * 1e6, bw=fit.bandwidth_GBps))
    ratios = s.ring_vs_all_reduce
    if ratios and ratios[-1].ratio is not None:
        st.write(t("labs.bench.ratio", ratio=ratios[-1].ratio, size=_fmt_bytes(ratios[-1].size)))
    mine = max((r.busbw for r in rows if r.impl == "all_reduce"), default=0.0)
    if mine > 0:
        st.info(t("labs.bench.gap", mine=mine, times=sum(NVLINK_REFERENCE) / 2 / mine))


def breakdown(run: LabRun, bd: reports.Breakdown) -> None:
    """Per-step time of three ways to sync, and the two effects apart: what
    bucketing saves (fewer calls) and what overlap hides (behind backward)."""
    st.markdown(f"**{t('labs.ddp.breakdown', count=bd.steps)}**")
    names = {k: t(f"labs.ddp.{k}") for k in ("naive", "bucketed", "ddp", "forward", "backward",
                                             "exposed_comm", "optimizer")}
    chart(charts.breakdown_figure({"naive": bd.naive, "bucketed": bd.bucketed, "ddp": bd.ddp}, names, lang=lang()),
          key=f"bd_{run.id}")
    saving, hidden = bd.bucketing_saving, bd.overlap_hidden
    st.markdown(t("labs.ddp.bucketing", ms=saving.ms.median, q1=saving.ms.q1, q3=saving.ms.q3,
                  before=saving.calls_before, after=saving.calls_after, count=saving.ms.k,
                  per_call=saving.per_call_ms or 0.0))
    st.caption(t("labs.ddp.bucketing_why"))
    st.markdown(t("labs.ddp.overlap", ms=hidden.ms.median, q1=hidden.ms.q1, q3=hidden.ms.q3,
                  backward=hidden.backward_ms.median, count=hidden.buckets, cap=bd.bucket_cap_mb))
    st.caption(t("labs.ddp.overlap_why", cpus=_cpus(run)))


def lane_names() -> dict[str, str]:
    """The swim lanes' words (``app.timeline.timeline_figure``'s ``labels``) in the learner's language."""
    names = {k: t(f"labs.timeline.{k}") for k in ("rank", "compute", "comm", "ms", "span", "start", "end")}
    names.update({k: t(f"labs.ddp.{k}") for k in ("forward", "backward", "optimizer")}, comm=t("labs.timeline.comm"))
    return names


def timeline(run: LabRun, s: reports.DdpSummary, tl: reports.Timeline) -> None:
    """Every rank's compute and communication on one clock: the naive sync above, DDP
    at the bucket cap the slider picks below, with the overlap and exposed figures."""
    st.markdown(f"**{t('labs.timeline.title', count=tl.steps)}**")
    st.markdown(":material/visibility: " + t("labs.timeline.look"))
    variants, caps = tl.variants, sorted(tl.caps, key=lambda c: c.bucket_cap_mb)
    default = next(c.bucket_cap_mb for c in tl.caps if c.variant == "ddp")
    cap = st.select_slider(t("labs.timeline.cap"), [c.bucket_cap_mb for c in caps], value=default,
                           format_func=lambda v: f"{num(v, 'g')} MB", key=f"tl_cap_{run.id}")
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
    idle = ", ".join(f"{r.rank}: {num(r.idle_ms, '.2f')}" for r in chosen.ranks)
    st.caption(t("labs.timeline.idle", idle=idle, count=chosen.allreduce_calls,
                 hidden=tl.hidden, batch=tl.batch_per_rank, cpus=_cpus(run)))
    trace = spans.chrome_trace({name: var.plain() for name, var in variants.items()})
    st.download_button(t("labs.timeline.download"), json.dumps(trace),
                       file_name=f"lab-{run.id}-timeline.json", mime="application/json",
                       key=f"trace_{run.id}", on_click="ignore")
    predict(run, s, tl, cap, chosen)


def _cell(value: float | None) -> str:
    """A figure in ms, or a dash where there is none (no prediction, no benchmark)."""
    return "—" if value is None else num(value, ".2f")


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{_cell(value)} ms"


def predict(run: LabRun, s: reports.DdpSummary, tl: reports.Timeline, cap: float,
            chosen: reports.Variant) -> None:
    """Predict, then measure: the step model (compute measured + exposed communication
    from this machine's benchmark fit) beside the measured step and the learner's
    prediction, with the residuals; without a benchmark, how to get one."""
    n, backend = s.world_size, s.backend
    st.markdown(f"**{t('labs.predict.title', cap=num(cap, 'g'), count=n)}**")
    fit = labruns.run_machine_fit(run, "all_reduce")
    step = spans.step_model(chosen.plain(), world_size=n, fit=fit, gradient_bytes=tl.gradient_bytes)
    guess = (run.params or {}).get("predicted_step_ms")
    at_guess = chosen is tl.variants["ddp"]  # the prediction was for the breakdown's DDP cap
    c1, c2, c3 = st.columns(3)
    c1.metric(t("labs.predict.guess"), _ms(guess if at_guess else None), help=t("labs.predict.guess_help"))
    c2.metric(t("labs.predict.model"), _ms(step["model_ms"]), help=t("labs.predict.model_help"))
    c3.metric(t("labs.predict.measured"), _ms(step["measured_ms"]), help=t("labs.predict.measured_help"))
    st.dataframe([{t("labs.predict.term"): t(f"labs.predict.row_{key}"), t("labs.timeline.ms"): _cell(step[f"{key}_ms"])}
                  for key in ("compute", "comm", "exposed", "model", "measured")], hide_index=True)
    if fit is None:
        st.info(t("labs.predict.no_fit", count=n, backend=backend), icon=":material/speed:")
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


def ddp(run: LabRun, s: reports.DdpSummary) -> None:
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
    if sec.breakdown:  # None for older runs, which mixed the two effects up (labs.reports.Sections)
        breakdown(run, sec.breakdown)
    if sec.timeline:
        timeline(run, s, sec.timeline)
    buckets = sec.buckets
    if buckets:
        st.markdown(f"**{t('labs.ddp.buckets')}**")
        st.dataframe([{"bucket_cap_mb": r.bucket_cap_mb, t("labs.ddp.bucket_calls"): r.allreduce_calls_per_step,
                       t("labs.ddp.bucket_ms"): round(r.step_ms, 3)} for r in buckets.rows], hide_index=True)
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


def downloads(run: LabRun) -> None:
    """The run as JSON, and its main table as CSV."""
    payload = {"id": run.id, "lab": run.lab, "params": run.params, "machine": run.machine,
               "status": run.status, "result": run.result, "error": run.error,
               "created_at": run.created_at.isoformat()}
    c1, c2 = st.columns(2)
    c1.download_button(t("labs.download_json"), json.dumps(payload, indent=1, default=str),
                       file_name=f"lab-{run.id}-{run.lab}.json", mime="application/json",
                       key=f"json_{run.id}", on_click="ignore")
    rows = _csv_rows(run)
    if rows:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        c2.download_button(t("labs.download_csv"), buf.getvalue(), file_name=f"lab-{run.id}-{run.lab}.csv",
                           mime="text/csv", key=f"csv_{run.id}", on_click="ignore")


def _csv_rows(run: LabRun) -> list[dict]:
    """The main table as the run stored it (every key the lab wrote, in its order, like the JSON)."""
    s = (run.result or {}).get("summary") or {}
    if run.lab == "bench":
        return list(s.get("rows", []))
    if run.lab == "ring":
        return [{"rank": r, **rec} for r, recs in enumerate(s.get("traces", [])) for rec in recs]
    if run.lab == "ddp":
        return list(((s.get("sections") or {}).get("scaling") or {}).get("rows", []))
    if run.lab == "sharding":
        return sharding.rows(s)
    return []


def failure(run: LabRun) -> None:
    """A clear message naming the rank and what happened, and why the others hang."""
    err = run.error or {}
    kind = err.get("kind", "crash")
    if kind == "cancelled":
        st.warning(t("labs.cancelled"))
        return
    if kind in ("restart", "worker_lost", "worker_stopped"):  # the machine, not the lab
        st.warning(t(f"labs.{kind}"))
        return
    if kind == "report_too_large":  # the worker kept a note instead of the report (review N-6)
        st.error(t("labs.report_too_large", size=err.get("size", "?"), limit=err.get("limit", "?")))
        return
    st.error(t("labs.failed"))
    rank = err.get("rank")
    if rank is not None:
        info = next((r for r in err.get("ranks", []) if r.get("rank") == rank), {})
        st.error(t("labs.failed_rank", rank=rank, what=t(f"labs.failed_kind.{kind}"),
                   step=info.get("step", "?"), phase=info.get("phase") or "?"))
    if kind in ("crash", "hang", "timeout"):
        st.info(t("labs.why_hang"))
    with st.expander(t("labs.technical")):
        st.code(err.get("message", ""), language=None)


def show_run(run: LabRun) -> None:
    """A finished run: first what to look for, then the machine, the outcome and the lab's readouts."""
    report = error = None
    if run.status == "done":
        try:
            report = reports.read(run.lab, run.result)
        except reports.ReportError as err:
            error = err
        else:
            look_for(run, report.summary)
    machine = run.machine or {}
    if machine.get("torch"):  # where the lab ran (a run that ended before its result says nothing)
        st.caption(t("labs.machine", cpus=machine.get("cpu_count", "?"), torch=machine["torch"],
                     backend=(run.result or {}).get("backend") or machine.get("default_backend", "?")))
    if error is not None:
        unreadable(error)
        return
    if report is None:
        failure(run)
        return
    st.success(t("labs.done", seconds=report.wall_s, overhead=report.overhead_s))
    {"ring": ring, "bench": bench, "ddp": ddp, "sharding": sharding.show}[run.lab](run, report.summary)
    downloads(run)


def unreadable(err: reports.ReportError) -> None:
    """A finished run whose stored result is not its lab's report: what a failed run shows, with why."""
    st.error(t("labs.failed"))
    with st.expander(t("labs.technical")):
        st.code(str(err), language=None)


# The most spans a stored exercise timeline may have to be drawn: the grader keeps
# 3 steps of 3 compute spans and 32 all-reduces per rank; a forged report is not drawn.
MAX_EXERCISE_SPANS = 4 * 3 * (3 + 32)


def bucket_timeline(trace: dict, run_id: int) -> None:
    """The bucketed-overlap report's timeline: the learner's Bucketer as the grader saw it and,
    below it on the same time axis, torch DDP on the same model, ranks and cap, as the grading
    machine ran it (``labs.exercises.ddp_lanes``), with each overlap."""
    mine, ddp = trace.get("learner"), trace.get("ddp")
    if trace.get("kind") != "timeline" or not isinstance(mine, dict):
        return
    try:
        stored = [(t("exercises.timeline.yours"), mine)]
        if isinstance(ddp, dict):
            stored.append((t("exercises.timeline.ddp"), ddp))
        if any(sum(len(r["spans"]) for r in var["ranks"]) > MAX_EXERCISE_SPANS for _, var in stored):
            raise ValueError("more spans than the grader keeps")
        shown = [(title, reports.Variant.model_validate(var)) for title, var in stored]  # a ValueError if not one
        n, cap = int(trace["world_size"]), int(trace["cap_bytes"])
        fig = lanes.timeline_figure(shown, lane_names(), lang=lang())
        if isinstance(ddp, dict):
            made = {"steps": int(ddp["steps"]), "torch": str(ddp["key"]["torch"])[:40],
                    "calls": int(ddp["allreduce_calls"]), "yours": int(mine["allreduce_calls"])}
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        st.caption(t("exercises.timeline.unavailable"))
        return
    st.markdown(f"**{t('exercises.timeline.title', count=n, cap=cap)}**")
    st.markdown(":material/visibility: " + t("exercises.timeline.look"))
    # The overlaps side by side above the lanes: their names ("torch DDP, same model and cap") need the width.
    for where, (title, var) in zip(st.columns(2), shown, strict=False):
        where.metric(t("labs.timeline.overlap", name=title), num(var.overlap, ".0%"),
                     help=t("labs.timeline.overlap_help"))
    chart(fig, key=f"ex_tl_{run_id}", caption=t("exercises.timeline.alt"))
    st.caption(t("exercises.timeline.source", count=n, cap=cap, hidden=trace.get("hidden", "?")))
    if isinstance(ddp, dict):
        st.caption(t("exercises.timeline.ddp_source", count=n, cap=cap, hidden=trace.get("hidden", "?"), **made))
    else:  # None: the grading machine could not run it; absent: a report from before it did
        st.info(t("exercises.timeline.ddp_failed" if "ddp" in trace else "exercises.timeline.ddp_older"),
                icon=":material/science:")
