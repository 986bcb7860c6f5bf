"""Sharding on the page: the lab's ledger per rank and strategy, a shard map, the lessons' calculator.

The figures are plain functions (data in, figure out; labels come in already
translated) in the palette of ``app.charts``: one colour per part of the
model state (``charts.MEMORY``), communication vermillion, a model's
prediction black. `show` draws a finished sharding run (its summary as
``labs.reports.ShardingSummary``, the numbers the processes measured) and `animation` replays one step of it
(where each shard lives, what moves): the collectives the run recorded
(``step_collectives``), in order, with the bytes it counted, or for a run
stored before that record, the fixed phases of `PHASES` with the ring
model's bytes. `calculator` is the lesson widget ``sharding_calculator``.
Both read ``labs.model``'s one formula.
"""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from academy.i18n import DEFAULT_LANG, number_marks
from app import calculators as calc
from app import charts
from app.ui import labeler, t
from app.widgets import chart, lang, num
from labs.model import PRECISIONS, SHARDED, STRATEGIES
from labs.reports import Collective, ShardingSummary, Strategy

PARTS = {"params": "weights", "grads": "grads", "optimizer": "optimizer_state"}  # lab part -> MEMORY colour
MB = 1e6


def _marks(fig: go.Figure, language: str) -> go.Figure:
    decimal, group = number_marks(language)
    fig.update_layout(separators=decimal + group, template=charts.TEMPLATE)
    return fig


def _tick(names: dict[str, str], strategy: str, rank: int) -> str:
    """The x label of one (strategy, rank): two short lines, so that 16 bars still read."""
    return f"{names[strategy]}<br>{names['rank']} {rank}"


def _with_table(fig: go.Figure, head: str) -> go.Figure:
    """The figure's text alternative (``charts.table`` reads ``layout.meta``): the traces'
    numbers by bar, with each two-line tick label on one line, under ``head``."""
    traces = [tr for tr in fig.data if tr.name]
    keys = list(traces[0].x) if traces else []
    rows = [[x.replace("<br>", " · "), *(float(tr.y[i]) for tr in traces)] for i, x in enumerate(keys)]
    fig.update_layout(meta={"table": {"columns": [head, *(tr.name for tr in traces)], "rows": rows}})
    return fig


def ledger_figure(ledger: dict[str, Strategy], *, names: dict[str, str], language: str = DEFAULT_LANG) -> go.Figure:
    """Stacked bars of MB per rank and strategy: measured (solid) beside predicted (hatched).

    ``ledger``: the summary's ``strategies`` (``labs.reports.Strategy`` by name);
    ``names``: a label for each strategy, each part, "measured", "predicted",
    "rank", "mb" and "series" (``{part}`` and ``{kind}`` in one legend entry).
    Each bar is drawn from its own base, so measured and predicted stand side
    by side at every (strategy, rank).
    """
    xs = [_tick(names, s, r.rank) for s in STRATEGIES if s in ledger for r in ledger[s].ranks]
    rows = [r for s in STRATEGIES if s in ledger for r in ledger[s].ranks]
    fig = go.Figure()
    for kind, pattern in (("measured", ""), ("predicted", "/")):
        base = [0.0] * len(rows)
        for part, colour in PARTS.items():
            ys = [getattr(r, kind)[part] / MB for r in rows]
            series = names["series"].format(part=names[part], kind=names[kind])
            fig.add_bar(name=series, x=xs, y=ys, base=list(base), offsetgroup=kind,
                        legendgroup=kind, marker={"color": charts.MEMORY[colour], "pattern": {"shape": pattern},
                                                  "line": {"color": charts.PAPER, "width": 1}},
                        hovertemplate="%{x}<br>" + series + ": %{y:.3f} MB<extra></extra>")
            base = [b + y for b, y in zip(base, ys, strict=True)]
    fig.update_layout(barmode="group", height=460, yaxis_title=names["mb"], margin={"t": 10},
                      legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
                      xaxis={"tickangle": 0})
    return _marks(_with_table(fig, names["rank"]), language)


def wire_figure(ledger: dict[str, Strategy], predicted: dict[str, float], *, names: dict[str, str],
                language: str = DEFAULT_LANG) -> go.Figure:
    """MB each rank sent per step (bars) beside the ring model's figure (black markers)."""
    xs, sent, model = [], [], []
    for s in STRATEGIES:
        for r in ledger[s].ranks if s in ledger else []:
            xs.append(_tick(names, s, r.rank))
            sent.append(r.wire_bytes_per_step / MB)
            model.append(predicted[s] / MB)
    fig = go.Figure()
    fig.add_bar(name=names["sent"], x=xs, y=sent, marker={"color": charts.COMMUNICATION},
                hovertemplate="%{x}: %{y:.3f} MB<extra></extra>")
    fig.add_scatter(name=names["model"], x=xs, y=model, mode="markers",
                    marker={"color": charts.MODEL, "symbol": "line-ew", "size": 18, "line": {"width": 3,
                                                                                           "color": charts.MODEL}})
    fig.update_layout(height=320, yaxis_title=names["mb"], margin={"t": 10},
                      legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
                      xaxis={"tickangle": 0})
    return _marks(_with_table(fig, names["rank"]), language)


def calculator_figure(totals: dict[str, calc.Memory], devices: dict[str, float], *, names: dict[str, str],
                      language: str = DEFAULT_LANG) -> go.Figure:
    """GB per device under each strategy, stacked by part, with a dashed line per device size."""
    xs = [names[s] for s in totals]
    fig = go.Figure()
    for part, field in (("weights", "weights"), ("grads", "grads"), ("optimizer_state", "optimizer")):
        fig.add_bar(name=names[part], x=xs, y=[getattr(m, field) / calc.GB for m in totals.values()],
                    marker={"color": charts.MEMORY[part], "line": {"color": charts.PAPER, "width": 1}},
                    hovertemplate="%{x}: %{y:.1f} GB<extra>" + names[part] + "</extra>")
    for name, capacity in devices.items():
        fig.add_shape(type="line", xref="paper", x0=0, x1=1, y0=capacity, y1=capacity,
                      line={"color": charts.INK, "dash": "dash", "width": 1.5})
        fig.add_annotation(xref="paper", x=1, y=capacity, text=name, showarrow=False, xanchor="right",
                           yanchor="bottom", font={"size": 12, "color": charts.INK}, bgcolor=charts.PAPER)
    top = max([*(m.total / calc.GB for m in totals.values()), *devices.values()]) * 1.08
    fig.update_layout(barmode="stack", height=360, yaxis={"title": names["gb"], "range": [0, top]},
                      xaxis_title=names["strategy"], margin={"t": 10}, legend={"traceorder": "normal"})
    return _marks(fig, language)


def strategy_names() -> dict[str, str]:
    return {s: t(f"sharding.strategy.{s}") for s in STRATEGIES}


def _names(precision: str = "fp32") -> dict[str, str]:
    """The figures' words; under mixed precision the optimizer part names the fp32
    master weights it holds (``labs.model`` counts them as optimizer state)."""
    parts = {p: t(f"sharding.part.{p}") for p in PARTS}
    if PRECISIONS.get(precision, {}).get("master"):
        parts["optimizer"] = t("sharding.part.optimizer_master")
    return {**strategy_names(), **parts,
            **{k: t(f"sharding.{k}") for k in ("measured", "predicted", "rank", "mb", "sent", "model")},
            "series": t("sharding.series", part="{part}", kind="{kind}")}


def show(run, s: ShardingSummary) -> None:
    """A finished sharding run: the checks, the ledger, the wire bytes."""
    ledger, n = s.strategies, s.world_size
    worst = max(s.ledger_error.values())
    (st.success if s.within_ledger_tolerance else st.error)(
        t("sharding.check_ledger", worst=worst * 100, tol=s.ledger_tolerance * 100))
    if s.ordered is not None:
        (st.success if s.ordered else st.warning)(t("sharding.check_order" if s.ordered else
                                                    "sharding.check_order_bad", count=n))
    diff = max(v.max_abs_diff_vs_ddp for v in ledger.values())
    if s.weight_check == "max":
        words = t("sharding.check_weights", diff=diff, tol=s.tolerance, moved=s.max_abs_update_ddp or 0.0)
    else:  # bf16: the mean distance, against the mean update (labs.sharding.lab.WEIGHT_TOLERANCE)
        words = t("sharding.check_weights_mean", diff=diff, tol=s.tolerance * 100,
                  mean=max(v.mean_abs_diff_vs_ddp for v in ledger.values()), moved=s.mean_abs_update_ddp)
    (st.success if s.equal_weights else st.error)(words)
    precision = s.precision
    if s.wire_dtypes:
        key = "sharding.precision_line" if "bfloat16" in s.wire_dtypes else "sharding.precision_line_fp32"
        st.caption(t(key, precision=t(f"widgets.precision.{precision}"), dtypes=", ".join(s.wire_dtypes)))
    names = _names(precision)
    st.markdown(f"**{t('sharding.ledger_title', count=n)}**")
    chart(ledger_figure(ledger, names=names, language=lang()), key=f"ledger_{run.id}",
          caption=t("sharding.ledger_caption"))
    st.markdown(f"**{t('sharding.wire_title')}**")
    chart(wire_figure(ledger, s.predicted_wire_bytes_per_step, names=names, language=lang()),
          key=f"wire_{run.id}", caption=t("sharding.wire_caption"))
    peaks = [r.peak for v in ledger.values() for r in v.ranks if r.peak is not None]
    st.caption(t("sharding.peak", mb=max(peaks) / MB) if peaks else t("sharding.no_peak"))
    animation(run, s)


def rows(summary: dict) -> list[dict]:
    """The ledger as CSV rows: one per strategy and rank, from the summary as stored (the download's)."""
    out = []
    for name, v in summary.get("strategies", {}).items():
        for r in v["ranks"]:
            out.append({"strategy": name, "rank": r["rank"],
                        **{f"measured_{k}": b for k, b in r["measured"].items()},
                        **{f"predicted_{k}": b for k, b in r["predicted"].items()},
                        "peak": r["peak"], "wire_bytes_per_step": r["wire_bytes_per_step"]})
    return out


def calculator() -> None:
    """The lesson widget: what each strategy leaves on one device, for a model and a device count."""
    st.subheader(t("sharding.calc.title"))
    c1, c2, c3, c4 = st.columns(4)
    billions = c1.number_input(t("widgets.memory.params"), 0.01, 2000.0, 7.0, step=0.5, key="shard_params")
    precision = c2.selectbox(t("widgets.memory.precision"), list(calc.PRECISIONS), index=1,
                             format_func=labeler("widgets.precision."), key="shard_prec")
    optimizer = c3.selectbox(t("widgets.memory.optimizer"), list(calc.OPTIMIZERS), index=2,
                             format_func=labeler("widgets.optimizer."), key="shard_opt")
    n = int(c4.number_input(t("sharding.calc.devices"), 1, 4096, 8, key="shard_n"))
    totals = {s: calc.memory_per_device(billions * 1e9, precision, optimizer, strategy=s, world_size=n)
              for s in STRATEGIES}
    names = {**strategy_names(), **{p: t(f"widgets.memory.{p}") for p in ("weights", "grads", "optimizer_state")},
             "gb": t("widgets.memory.gb"), "strategy": t("sharding.calc.strategy")}
    chart(calculator_figure(totals, calc.DEVICES, names=names, language=lang()), key="shard_chart",
          caption=t("sharding.calc.caption", count=n))
    for s, mem in totals.items():
        fitting = [name for name, gb in calc.DEVICES.items() if calc.fits(mem, gb)]
        st.write(t("sharding.calc.line", strategy=names[s], gb=num(mem.total / calc.GB, ",.1f"),
                   fits=", ".join(fitting) if fitting else t("sharding.calc.none")))
    st.caption(t("sharding.calc.note"))



# --- Where each shard lives, phase by phase --------------------------------
# For each strategy, the phases of one training step and what each rank holds
# after each: per part, per rank, per shard, 0 absent, 1 kept, 2 a transient
# full copy (gathered or computed for this phase, freed after it).
ABSENT, KEPT, TRANSIENT = 0, 1, 2
ANIMATED_PARTS = ("params", "grads", "optimizer")
PHASES = {
    "ddp": ("start", "backward", "all_reduce", "step_all"),
    "zero1": ("start", "backward", "all_reduce", "step_own", "broadcast"),
    "zero2": ("start", "backward", "reduce_scatter", "step_own", "all_gather"),
    "zero3": ("start", "gather_forward", "gather_backward", "reduce_scatter", "step_own"),
}
# The collective each phase runs, for its bytes (labs.model.bus_factor); None: no traffic.
PHASE_COLLECTIVE = {"all_reduce": "all_reduce", "reduce_scatter": "reduce_scatter", "all_gather": "all_gather",
                    "broadcast": "all_gather", "gather_forward": "all_gather", "gather_backward": "all_gather"}
# The phase that draws a collective the run recorded (``step_collectives``): by its
# kind, and an all-gather also by its stage (weights gathered for forward or for
# backward, or updated shards gathered after the step). "" matches any stage.
REPLAY = {("all_reduce", ""): "all_reduce", ("reduce_scatter", ""): "reduce_scatter", ("broadcast", ""): "broadcast",
          ("all_gather", "forward"): "gather_forward", ("all_gather", "backward"): "gather_backward",
          ("all_gather", "step"): "all_gather"}


def replayed_phases(strategy: str, record: list[Collective]) -> list[tuple[str, Collective | None]] | None:
    """The phases of the step the run recorded, each collective with its record entry.

    The record sees only the collectives; the computing between them is put
    where it must have run: backward before the first reduction (unless the
    weights were gathered for backward, which draws it), the optimizer step
    before parameters are sent out again (broadcast, all-gather after the
    step), or last. None when the record holds a collective the map cannot draw.
    """
    step = "step_own" if "optimizer" in SHARDED[strategy] else "step_all"
    out: list[tuple[str, Collective | None]] = [("start", None)]
    for entry in record:
        phase = REPLAY.get((entry.kind, entry.stage)) or REPLAY.get((entry.kind, ""))
        if phase is None:
            return None
        done = {p for p, _e in out}
        if phase in ("all_reduce", "reduce_scatter") and not done & {"backward", "gather_backward"}:
            out.append(("backward", None))
        if phase in ("broadcast", "all_gather") and step not in done:
            out.append((step, None))
        out.append((phase, entry))
    if step not in {p for p, _e in out}:
        out.append((step, None))
    return out


def shard_states(strategy: str, n: int, phases: list[str] | None = None) -> list[tuple[str, dict[str, list[list[int]]]]]:
    """Each phase of one step under ``strategy`` on ``n`` ranks (``PHASES[strategy]``
    unless ``phases`` are given), with what every rank holds after it."""
    every = [[KEPT] * n for _ in range(n)]
    own = [[KEPT if shard == rank else ABSENT for shard in range(n)] for rank in range(n)]
    none = [[ABSENT] * n for _ in range(n)]
    mixed = [[KEPT if shard == rank else TRANSIENT for shard in range(n)] for rank in range(n)]
    sharded = SHARDED[strategy]
    kept = {p: own if p in sharded else every for p in ANIMATED_PARTS}
    out = []
    for phase in PHASES[strategy] if phases is None else phases:
        state = dict(kept, grads=none)  # gradients exist from backward until zero_grad
        if phase == "gather_forward":
            state["params"] = mixed
        elif phase == "gather_backward":
            state.update(params=mixed, grads=[[TRANSIENT] * n for _ in range(n)])
        elif phase == "backward":
            state["grads"] = every if "grads" not in sharded else [[TRANSIENT] * n for _ in range(n)]
        elif phase != "start":  # the gradients are reduced: kept whole or as this rank's shard
            state["grads"] = kept["grads"]
        out.append((phase, state))
    return out


def shard_figure(strategy: str, n: int, *, parameter_bytes: float, names: dict[str, str],
                 record: list[Collective] | None = None, language: str = DEFAULT_LANG) -> go.Figure:
    """An animation of one step: a row per rank, for each part a square per shard, filled
    where the rank keeps that shard, outlined where it holds a passing full copy, faint
    where it holds nothing; each frame's title says what moved and how many bytes each
    rank sent for it. With the run's ``record`` (``step_collectives``) the frames are its
    collectives in the order called, titled with the bytes counted (``names["phase_measured"]``:
    ``{mb}``, ``{calls}``, ``{dtype}``); without one (or one `replayed_phases` cannot draw),
    the fixed `PHASES` with the ring model's bytes of ``labs.model`` for ``parameter_bytes``."""
    from labs.model import bus_factor

    replay = replayed_phases(strategy, record) if record else None
    steps = replay if replay is not None else [(phase, None) for phase in PHASES[strategy]]
    entries = [entry for _phase, entry in steps]
    states = shard_states(strategy, n, [phase for phase, _entry in steps])
    colour = {"params": charts.MEMORY["weights"], "grads": charts.MEMORY["grads"],
              "optimizer": charts.MEMORY["optimizer_state"]}

    def data(state: dict) -> list[go.Scatter]:
        traces = []
        for col, part in enumerate(ANIMATED_PARTS):
            xs, ys, symbols, colours = [], [], [], []
            for rank in range(n):
                for shard in range(n):
                    held = state[part][rank][shard]
                    xs.append(col * (n + 1) + shard)
                    ys.append(rank)
                    symbols.append({KEPT: "square", TRANSIENT: "square-open", ABSENT: "square-open"}[held])
                    colours.append(charts.GRID if held == ABSENT else colour[part])
            traces.append(go.Scatter(x=xs, y=ys, mode="markers", name=names[part], hoverinfo="skip",
                                     marker={"symbol": symbols, "color": colours, "size": 18,
                                             "line": {"width": 2, "color": colours}}))
        return traces

    def title(phase: str, entry: Collective | None) -> str:
        kind = PHASE_COLLECTIVE.get(phase)
        text = names[f"phase_{phase}"]
        if entry is not None:  # as the run counted it
            text += "<br>" + names["phase_measured"].format(mb=f"{entry.bytes / MB:.2f}", calls=entry.calls,
                                                            dtype=entry.dtype)
        elif kind is not None and replay is None:  # as the ring model has it
            sent = parameter_bytes * bus_factor(kind, n) / MB
            text += "<br>" + names["phase_bytes"].format(mb=f"{sent:.2f}")
        return text

    titles = [title(phase, entry) for (phase, _state), entry in zip(states, entries, strict=True)]
    frames = [go.Frame(name=str(k), data=data(state), layout={"title": {"text": titles[k]}})
              for k, (_phase, state) in enumerate(states)]
    fig = go.Figure(data=frames[0].data, frames=frames)
    ticks = [col * (n + 1) + (n - 1) / 2 for col in range(len(ANIMATED_PARTS))]
    fig.update_layout(
        # A title of two lines (what moves; the bytes) stays clear of the parts' names below it
        title={"text": frames[0].layout.title.text, "x": 0, "xanchor": "left"}, height=240 + 40 * n,
        showlegend=False, margin={"t": 110, "b": 110, "l": 70},
        xaxis={"tickvals": ticks, "ticktext": [names[p] for p in ANIMATED_PARTS], "side": "top",
               "range": [-1, len(ANIMATED_PARTS) * (n + 1) - 1], "showgrid": False, "zeroline": False},
        yaxis={"tickvals": list(range(n)), "ticktext": [f"{names['rank']} {r}" for r in range(n)],
               "autorange": "reversed", "showgrid": False, "zeroline": False},
        # The slider, and under it the buttons: the order of Plotly's SVG, which Tab follows (side
        # by side, a phone's narrow plot had them overlap). Both hang from the plot's bottom edge,
        # in px, so that they keep their places for any number of ranks.
        updatemenus=[{"type": "buttons", "direction": "left", "x": 0.0, "y": 0.0, "xanchor": "left",
                      "pad": {"t": 62},
                      "yanchor": "top", "bgcolor": charts.PAPER, "bordercolor": charts.INK,
                      "font": {"color": charts.INK},
                      "buttons": [{"label": names["play"], "method": "animate",
                                   "args": [None, {"frame": {"duration": 1600, "redraw": True},
                                                   "fromcurrent": True}]},
                                  {"label": names["pause"], "method": "animate",
                                   "args": [[None], {"frame": {"duration": 0, "redraw": False},
                                                     "mode": "immediate"}]}]}],
        sliders=[{"active": 0, "y": 0.0, "x": 0.0, "len": 1.0, "yanchor": "top", "name": names["step"],
                  "pad": {"t": 12, "b": 0},
                  "font": {"color": charts.INK}, "bordercolor": charts.INK, "tickcolor": charts.INK,
                  "currentvalue": {"visible": False},
                  "steps": [{"label": str(k + 1), "method": "animate",
                             "args": [[str(k)], {"mode": "immediate", "frame": {"duration": 0, "redraw": True}}]}
                            for k in range(len(frames))]}],
        meta={"table": {"columns": [names["step"], names["what_moves"]],
                        "rows": [[k + 1, text.replace("<br>", " ")] for k, text in enumerate(titles)]}},
    )
    return _marks(fig, language)


def animation(run, s: ShardingSummary) -> None:
    """The shard map of the run's world size, one strategy at a time."""
    n = s.world_size
    if n < 2:
        return
    names = {**_names(s.precision),
             **{f"phase_{p}": t(f"sharding.phase.{p}") for ps in PHASES.values() for p in ps},
             "phase_bytes": t("sharding.phase.bytes", mb="{mb}"),
             "phase_measured": t("sharding.phase.measured", mb="{mb}", calls="{calls}", dtype="{dtype}"),
             "play": t("widgets.ring.play"), "pause": t("widgets.ring.pause"), "step": t("widgets.ring.step"),
             "what_moves": t("sharding.what_moves")}
    st.markdown(f"**{t('sharding.animation', count=n)}**")
    strategy = st.radio(t("sharding.strategy_choice"), STRATEGIES, horizontal=True, key=f"shard_anim_{run.id}",
                        format_func=labeler("sharding.strategy."))
    record = s.strategies[strategy].step_collectives  # None for runs stored before it
    replayed = bool(record) and replayed_phases(strategy, record) is not None
    chart(shard_figure(strategy, n, parameter_bytes=s.model.bytes, names=names, record=record,
                       language=lang()),
          key=f"shard_map_{run.id}_{strategy}",
          caption=t("sharding.animation_caption_replayed" if replayed else "sharding.animation_caption"))
