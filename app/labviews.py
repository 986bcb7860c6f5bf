"""Results of a lab run on the page: metrics, plots and the ring animation.

Figures come from ``app.charts`` and ``app.charts_ring``; the numbers are the ones the processes
measured (``LabRun.result``, typed by ``labs.reports.read``: a result that
is not its lab's report shows as a failure, with why), never recomputed or canned, and are written
with the learner's decimal marks (``num``). The DDP lab's readouts are in ``app.ddp``,
the sharding lab's in ``app.sharding``. The form's widgets are built here
too, from the parameters' schema in ``labs.params``; and the bucketed-overlap
exercise's timeline, drawn with the DDP lab's lanes.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC
from typing import Any

import streamlit as st

from academy.labruns import pages as labruns
from academy.labruns import queue as labqueue
from academy.models import LabRun, utcnow
from app import calculators as calc
from app import charts, charts_ring, compression, resilience, sharding, topology
from app import ddp as ddp_views
from app import timeline as lanes
from app.ui import labeler, t
from app.widgets import chart, lang, num, ring_labels
from labs import model as ring_model
from labs import params as lab_params
from labs import reports
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
    the bar at that step, and what the rank is doing where it said (the ring lab's
    "warm-up: untimed run 1/1"); the launcher's "done" or "error": the ranks have ended and
    the worker is collecting what they left.
    """
    event = event or {}
    step, steps = event.get("step"), event.get("total_steps")
    if event.get("kind") == "status" and event.get("phase") in ("done", "error"):
        return 1.0, t("labs.collecting")
    if event.get("kind") == "status" or not event:
        return 0.0, t("labs.starting")
    if isinstance(step, int) and isinstance(steps, int) and steps > 0:
        said = event.get("message")
        return min(max(step / steps, 0.0), 1.0), t("labs.running_detail" if said else "labs.running",
                                                    phase=event.get("phase", ""), step=step, steps=steps,
                                                    message=said)
    return 0.0, t("labs.running_plain", message=event.get("message") or event.get("phase", ""))


ETA_FROM = 0.05  # the share of a run done before its pace says how long the rest takes
ETA_AFTER_S = 2.0  # ...and the seconds it has run


def how_long(run: LabRun, fraction: float) -> str | None:
    """How long a queued or running lab should still take, in words, or None: from its own
    pace once it is `ETA_FROM` done, else, for a run expected to take
    ``labruns.ESTIMATE_SHOWN_S`` or longer, from this machine's recent runs of the lab
    (``labruns.estimate_s``, looked up once per run and session)."""
    if run.status == "running" and run.started_at is not None and fraction >= ETA_FROM:
        started = run.started_at if run.started_at.tzinfo else run.started_at.replace(tzinfo=UTC)  # SQLite: naive
        elapsed = (utcnow() - started).total_seconds()
        if elapsed >= ETA_AFTER_S:
            return t("labs.eta", seconds=round(elapsed * (1 - fraction) / fraction))
    key = f"lab_estimate_{run.id}"
    if key not in st.session_state:
        st.session_state[key] = labruns.estimate_s(run.lab, {**(run.params or {})})
    estimate = st.session_state[key]
    if estimate is not None and estimate >= labruns.ESTIMATE_SHOWN_S:
        return t("labs.estimate", seconds=round(estimate), cpus=_cpus(run))
    return None


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
    low, high = lab_params.bounds(cls, name, limits, page=True)
    helptext = t(page.help) if page.help else None
    widget = page.widget or ("select" if spec.choices else "sizes" if spec.unit == "bytes" else "slider")
    if widget == "multiselect":  # a list of choices: the learner trims it (empty: the lab says what it runs)
        return where.multiselect(t(spec.key), list(spec.choices), default=list(value), help=helptext,
                                 format_func=labeler(spec.labels) if spec.labels else str,
                                 placeholder=t("labs.choose_options"))
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


_cpus = ddp_views.run_cpus  # the machine's cores, as the DDP readouts say them too


def look_for(run: LabRun, s: reports.Summary) -> None:
    """The one line that opens every lab result: what to look for in it."""
    n = s.world_size
    if isinstance(s, reports.RingSummary) and n < 2:  # no ring: no steps to compare (journey review m5)
        text = t("labs.look.ring_one")
    elif isinstance(s, reports.RingSummary):
        naive = s.algo == "naive"
        text = t("labs.look.ring_naive" if naive else "labs.look.ring", count=n,
                 steps=(n - 1) if naive else 2 * (n - 1))
    elif run.lab == "bench":
        text = t({1: "labs.look.bench_one", 2: "labs.look.bench_two"}.get(n, "labs.look.bench"), count=n)
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
    # Bandwidths to 3 significant figures, in the learner's marks: a 1 KiB row's 0.00012 GB/s
    # read "0" at 4 decimals (journey review m6).
    st.dataframe([{"size": r.size, "count": r.count, "type": r.dtype, "impl": r.impl,
                   "collective": r.collective or "", "time (us)": round(r.time_us, 1),
                   "min..max (us)": f"{num(_or(r.min_us, r.time_us), '.1f')}..{num(_or(r.max_us, r.time_us), '.1f')}",
                   "algbw (GB/s)": num(r.algbw, ".3g"), "busbw (GB/s)": num(r.busbw, ".3g"),
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
    rising = still_rising(rows)
    if rising is not None:
        st.info(t("labs.bench.still_rising", size=_fmt_bytes(rising[0]), before=num(rising[1], ".3g"),
                  last=num(rising[2], ".3g")), icon=":material/trending_up:")
    ratios = s.ring_vs_all_reduce
    if ratios and ratios[-1].ratio is not None:
        st.write(t("labs.bench.ratio", ratio=ratios[-1].ratio, size=_fmt_bytes(ratios[-1].size)))
    mine = max((r.busbw for r in rows if r.impl == "all_reduce"), default=0.0)
    if mine > 0:
        st.info(t("labs.bench.gap", mine=mine, times=sum(NVLINK_REFERENCE) / 2 / mine))


# busbw "still rising" at the sweep's largest size: more than this much above the size before.
STILL_RISING = 1.1


def still_rising(rows: list) -> tuple[int, float, float] | None:
    """(largest size, busbw at the size before, busbw at it) of the built-in all-reduce when the
    sweep ended while its busbw still rose by more than `STILL_RISING`, else None: then
    "levels off" is not what this run shows (journey review m6)."""
    mine = sorted((r.size, r.busbw) for r in rows if r.impl == "all_reduce" and r.size > 0)
    if len(mine) < 2 or mine[-2][1] <= 0 or mine[-1][1] <= STILL_RISING * mine[-2][1]:
        return None
    return mine[-1][0], mine[-2][1], mine[-1][1]


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
    if run.lab == "compression":
        return compression.rows(s)
    if run.lab == "topology":
        return topology.rows(s)
    if run.lab == "straggler":  # each variant's step, model, throughput and loss (medians)
        return [{"variant": name, "step_ms": v["step_ms"]["median"], "model_ms": v["model_ms"]["median"],
                 "samples_per_s": v["throughput"]["median"], "loss": v["loss"]["median"]}
                for name, v in (s.get("variants") or {}).items()]
    if run.lab == "failure":  # every rank's segments of work
        return [{"rank": lane["rank"], **seg} for lane in s.get("lanes", []) for seg in lane["segments"]]
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
    {"ring": ring, "bench": bench, "ddp": ddp_views.ddp, "sharding": sharding.show,
     "compression": compression.show, "straggler": resilience.straggler, "failure": resilience.failure,
     "topology": topology.show}[run.lab](run, report.summary)
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
        fig = lanes.timeline_figure(shown, ddp_views.lane_names(), lang=lang())
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
