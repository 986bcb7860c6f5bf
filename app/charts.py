"""Plotly figures for lessons and labs. Plain functions: data in, figure out.

Labels come in from the caller (already in the learner's language), so this
module holds no learner-visible text. Numbers are the learner's too: ``lang``
sets plotly's decimal and grouping marks (ticks, hover) and the marks of the
numbers we write into titles ourselves.

Every colour a figure uses comes from the palette below, one colour per
concept on every chart (``tests/test_charts.py`` walks each builder's figure
and fails on any other colour, and on chart text under 4.5:1 contrast). The
pages draw figures with Streamlit's theme off (``app.widgets.chart``), so
what is set here is what the learner sees. Each figure also carries its own
text alternative: ``table`` turns it into rows of the same numbers. The ring
animations, on this palette, are in ``app.charts_ring``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go

from academy.i18n import DEFAULT_LANG, number_marks
from labs import model as ring_model

# --- Palette --------------------------------------------------------------
# Okabe-Ito and Paul Tol's colour-blind safe sets. One colour per concept,
# the same on every chart: blue is compute, vermillion communication, grey
# idle, black (dotted) a model's prediction, green a reference from elsewhere.
INK = "#1f2328"  # all chart text: 15.8:1 on white
PAPER = "#ffffff"
GRID = "#d0d7de"
WHITE_INK = "#ffffff"  # text on a dark fill (a chunk that holds few ranks' data)
COMPUTE = "#0072B2"
COMPUTE_PARTS = {"forward": "#56B4E9", "backward": COMPUTE, "optimizer": "#003D5C"}
COMMUNICATION = "#D55E00"
IDLE = "#BBBBBB"
MODEL = "#000000"
REFERENCE = "#009E73"
REFERENCE_FILL = "rgba(0,158,115,0.25)"
MEASURED = COMMUNICATION  # what the learner's own run measured (all of it communication)
# The collectives of the benchmark are all communication: warm colours, told
# apart by marker and dash as well (colour alone never carries a series).
IMPLEMENTATIONS = {
    "ring": (COMMUNICATION, "circle", "solid"),
    "ring_pipelined": ("#E69F00", "diamond", "dash"),
    "naive": ("#CC79A7", "square", "dashdot"),
    "all_reduce": ("#882255", "x", "longdash"),
}
MEMORY = {"weights": "#332288", "grads": "#88CCEE", "optimizer_state": "#AA4499"}
# The compression lab's strategies: a colour, a marker and a dash each (colour alone never
# carries a series), every colour at least 3:1 on white; a family shares a marker's shape
# (circles and squares: quantisation; triangles: PowerSGD; crosses: top-k). The spread
# of the seeds is a pale band of the strategy's colour.
STRATEGY_STYLES = {
    "fp32": ("#332288", "circle", "solid"),
    "fp16": ("#117733", "square", "dash"),
    "bf16": ("#009988", "diamond", "dot"),
    "powersgd_r1": ("#882255", "triangle-up", "solid"),
    "powersgd_r2": ("#AA4499", "triangle-down", "dash"),
    "powersgd_r4": ("#CC6677", "triangle-left", "dot"),
    "topk": ("#999933", "x", "dashdot"),
    "topk_ef": ("#CC3311", "cross", "solid"),
}


def band(colour: str, alpha: float = 0.15) -> str:
    """``colour`` (``#rrggbb``) as a pale fill: what a band of spread is drawn in."""
    value = colour.lstrip("#")
    return f"rgba({int(value[0:2], 16)},{int(value[2:4], 16)},{int(value[4:6], 16)},{alpha})"


# One colour per rank (Tol "muted"), cycled past nine ranks.
RANKS = ("#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#CC6677", "#882255", "#AA4499")
# How many ranks' data a chunk holds: Viridis, dark (1) to light (n).
CONTRIBUTIONS = ("#440154", "#482878", "#3e4989", "#31688e", "#26828e",
                 "#1f9e89", "#35b779", "#6ece58", "#b5de2b", "#fde725")
FONT = "Source Sans, Source Sans Pro, Noto Sans CJK SC, sans-serif"


def palette() -> frozenset[str]:
    """Every colour a chart may use, lower case."""
    colours = {INK, PAPER, GRID, WHITE_INK, COMPUTE, COMMUNICATION, IDLE, MODEL, REFERENCE, REFERENCE_FILL,
               *COMPUTE_PARTS.values(), *MEMORY.values(), *RANKS, *CONTRIBUTIONS,
               *(colour for colour, _symbol, _dash in IMPLEMENTATIONS.values()),
               *(c for colour, _symbol, _dash in STRATEGY_STYLES.values() for c in (colour, band(colour)))}
    return frozenset(c.lower() for c in colours)


def _luminance(colour: str) -> float:
    value = colour.lstrip("#")
    channels = [int(value[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(foreground: str, background: str) -> float:
    """WCAG 2 contrast ratio of two ``#rrggbb`` colours (1 to 21)."""
    high, low = sorted((_luminance(foreground), _luminance(background)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def text_on(fill: str) -> str:
    """INK or white, whichever reads better on ``fill``."""
    return max((INK, WHITE_INK), key=lambda ink: contrast(ink, fill))


def contribution_colours(n: int) -> list[str]:
    """The colour of "holds k ranks' data" for k = 1..n, spread over CONTRIBUTIONS."""
    last = len(CONTRIBUTIONS) - 1
    return [CONTRIBUTIONS[round(k * last / max(1, n - 1))] for k in range(n)]


TEMPLATE = go.layout.Template(layout={
    "font": {"family": FONT, "color": INK, "size": 13},
    "paper_bgcolor": PAPER, "plot_bgcolor": PAPER,
    "colorway": [COMMUNICATION, COMPUTE, MODEL, REFERENCE, *RANKS],
    "xaxis": {"gridcolor": GRID, "linecolor": INK, "zerolinecolor": GRID, "ticks": "outside",
              "tickcolor": INK, "automargin": True},
    "yaxis": {"gridcolor": GRID, "linecolor": INK, "zerolinecolor": GRID, "ticks": "outside",
              "tickcolor": INK, "automargin": True},
    "hoverlabel": {"bgcolor": PAPER, "bordercolor": INK, "font": {"color": INK}},
    # Legends sit above the plot, never over the axes or their labels.
    "legend": {"orientation": "h", "x": 0, "xanchor": "left", "y": 1.02, "yanchor": "bottom",
               "bgcolor": PAPER, "font": {"color": INK}},
})


def with_marks(fig: go.Figure, lang: str) -> go.Figure:
    """Ticks and hover text in ``lang``'s marks ("0,5" in Dutch), on our template."""
    decimal, group = number_marks(lang)
    fig.update_layout(separators=decimal + group, template=TEMPLATE)
    return fig


# --- Plots -----------------------------------------------------------------


def _integer_axis(count: int) -> dict:
    """Steps and device counts are whole numbers: no 0.5 ticks."""
    return {"tickmode": "linear", "tick0": 1, "dtick": max(1, math.ceil(count / 12)), "tickformat": "d"}


def _model_line(fig: go.Figure, xs: Sequence[float], ys: Sequence[float], name: str) -> None:
    fig.add_scatter(x=list(xs), y=list(ys), mode="lines", name=name, line={"color": MODEL, "dash": "dot", "width": 2})


def step_time_figure(measured: Sequence[float], predicted: Sequence[float], labels: dict[str, str],
                     lang: str = DEFAULT_LANG, low: Sequence[float] | None = None,
                     high: Sequence[float] | None = None) -> go.Figure:
    """Measured step times beside the alpha-beta prediction (milliseconds);
    ``low``/``high`` (seconds) draw each step's spread over repeated runs."""
    xs = list(range(1, len(measured) + 1))
    fig = go.Figure()
    error = None
    if low is not None and high is not None:
        error = {"type": "data", "symmetric": False, "color": MEASURED,
                 "array": [(h - m) * 1e3 for h, m in zip(high, measured, strict=True)],
                 "arrayminus": [(m - lo) * 1e3 for lo, m in zip(low, measured, strict=True)]}
    fig.add_bar(x=xs, y=[m * 1e3 for m in measured], name=labels["measured"], marker={"color": MEASURED},
                error_y=error)
    fig.add_scatter(x=xs, y=[p * 1e3 for p in predicted], mode="lines+markers", name=labels["theory"],
                    line={"color": MODEL, "dash": "dot", "width": 2}, marker={"color": MODEL, "symbol": "x"})
    fig.update_layout(height=340, xaxis_title=labels["step"], yaxis_title="ms", margin={"t": 10},
                      xaxis=_integer_axis(len(xs)))
    return with_marks(fig, lang)


def busbw_figure(rows: Sequence[dict], *, world_size: int, fit: dict | None, labels: dict[str, str],
                 reference: tuple[float, float] | None = None, lang: str = DEFAULT_LANG) -> go.Figure:
    """busbw against message size (log x) per implementation, with the fitted model."""
    fig = go.Figure()
    impls = []
    for row in rows:
        if row["impl"] not in impls and row.get("collective", "all_reduce") == "all_reduce":
            impls.append(row["impl"])
    for impl in impls:
        mine = [r for r in rows if r["impl"] == impl and r.get("collective", "all_reduce") == "all_reduce"]
        colour, symbol, dash = IMPLEMENTATIONS.get(impl, (COMMUNICATION, "circle", "solid"))
        fig.add_scatter(x=[r["size"] for r in mine], y=[r["busbw"] for r in mine], mode="lines+markers",
                        name=labels.get(impl, impl), line={"color": colour, "dash": dash},
                        marker={"color": colour, "symbol": symbol, "size": 8})
    n = world_size
    sizes = sorted({r["size"] for r in rows}) or [1, 2]
    if fit and fit.get("alpha_s") is not None and fit.get("bandwidth_Bps") and n > 1:
        model = [ring_model.busbw(size, ring_model.ring_time(n, size, fit["alpha_s"], fit["bandwidth_Bps"]), n) / 1e9
                 for size in sizes]
        _model_line(fig, sizes, model, labels["fit"])
    yaxis: dict = {"tickformat": "~g", "title": "busbw (GB/s)"}
    if reference:
        fig.add_scatter(x=[sizes[0], sizes[-1], sizes[-1], sizes[0], sizes[0]],
                        y=[reference[0], reference[0], reference[1], reference[1], reference[0]],
                        fill="toself", mode="lines", line={"width": 1, "color": REFERENCE}, fillcolor=REFERENCE_FILL,
                        name=labels["reference"], hoverinfo="name")
        # Keep the reference band well inside the axis: the gap to it is the point of the plot.
        lowest = min((r["busbw"] for r in rows if r["busbw"] > 0), default=1e-3)
        yaxis["range"] = [math.log10(lowest / 2), math.log10(reference[1] * 2.5)]
    fig.update_layout(height=480, xaxis_type="log", yaxis_type="log", xaxis_title=labels["size"],
                      yaxis=yaxis, margin={"t": 10})
    return with_marks(fig, lang)


def breakdown_figure(parts: dict[str, dict[str, float]], labels: dict[str, str],
                     lang: str = DEFAULT_LANG) -> go.Figure:
    """Stacked per-step time (ms): forward, backward, optimizer (compute, blues) and
    exposed communication (vermillion), one bar per way to sync (``labels["sync"]`` names them)."""
    fig = go.Figure()
    names = list(parts)
    colours = {**COMPUTE_PARTS, "exposed_comm": COMMUNICATION}
    for part in ("forward", "backward", "exposed_comm", "optimizer"):
        fig.add_bar(x=[labels[n] for n in names], y=[parts[n].get(part, 0.0) for n in names], name=labels[part],
                    marker={"color": colours[part], "line": {"color": PAPER, "width": 1}})
    fig.update_layout(barmode="stack", height=340, xaxis_title=labels["sync"], yaxis_title="ms", margin={"t": 10},
                      legend={"traceorder": "normal"})
    return with_marks(fig, lang)


def lines_figure(series: dict[str, Sequence[float]], *, x_title: str, y_title: str,
                 xs: Sequence[float] | None = None, log_x: bool = False, lang: str = DEFAULT_LANG) -> go.Figure:
    """Lines over whole-numbered steps. The first series is drawn wide and pale and the
    others dashed with markers on top of it, so lines that coincide stay visible."""
    fig = go.Figure()
    styles = [({"color": COMPUTE_PARTS["forward"], "width": 6}, {"size": 1, "color": COMPUTE_PARTS["forward"]}),
              ({"color": COMPUTE_PARTS["optimizer"], "width": 2, "dash": "dash"},
               {"size": 7, "color": COMPUTE_PARTS["optimizer"], "symbol": "circle-open"})]
    longest = 0
    for i, (name, ys) in enumerate(series.items()):
        line, marker = styles[min(i, len(styles) - 1)]
        x = list(xs) if xs is not None else list(range(1, len(ys) + 1))
        longest = max(longest, len(x))
        fig.add_scatter(x=x, y=list(ys), mode="lines+markers", name=name, line=line, marker=marker)
    fig.update_layout(height=320, xaxis_title=x_title, yaxis_title=y_title, margin={"t": 10},
                      xaxis_type="log" if log_x else None)
    if xs is None and not log_x:
        fig.update_layout(xaxis=_integer_axis(longest))
    return with_marks(fig, lang)


def memory_figure(parts: dict[str, float], devices: dict[str, float], *, names: dict[str, str], gb: str,
                  parts_title: str, lang: str = DEFAULT_LANG) -> go.Figure:
    """One stacked bar of model state (GB: weights, gradients, optimizer state) and a dashed
    line per device's memory, each device labelled on its own row above the bar, so that
    no two labels share a line however close the devices are on the axis. ``parts_title`` names
    what the parts are, the head of their column in the text alternative (``table``)."""
    fig = go.Figure()
    for part, value in parts.items():
        fig.add_bar(name=names[part], x=[value], y=[0], orientation="h", width=0.6,
                    marker={"color": MEMORY[part], "line": {"color": PAPER, "width": 1}},
                    hovertemplate=names[part] + ": %{x:.1f} " + gb + "<extra></extra>")
    total = sum(parts.values())
    top = max([total, *devices.values()]) * 1.05
    rows = len(devices)
    for i, (name, capacity) in enumerate(sorted(devices.items(), key=lambda item: item[1])):
        y = 0.45 + 0.5 * (rows - i)  # the largest device nearest the bar, the smallest on top
        fig.add_shape(type="line", x0=capacity, x1=capacity, y0=-0.4, y1=y, xref="x", yref="y",
                      line={"color": INK, "dash": "dash", "width": 1.5})
        right = capacity > top / 2  # the label runs away from the axis' end
        fig.add_annotation(x=capacity, y=y, xref="x", yref="y", text=name, showarrow=False,
                           xanchor="right" if right else "left", xshift=-4 if right else 4,
                           font={"size": 12, "color": INK}, bgcolor=PAPER)
    fig.update_layout(barmode="stack", height=200 + 28 * rows, xaxis={"title": gb, "range": [0, top]},
                      yaxis={"visible": False, "title": parts_title, "range": [-0.5, 0.7 + 0.5 * rows]},
                      margin={"t": 10, "l": 10},
                      legend={"traceorder": "normal"})
    return with_marks(fig, lang)


def ring_traffic_figure(xs: Sequence[int], sent: Sequence[float], *, buffer: float, labels: dict[str, str],
                        lang: str = DEFAULT_LANG) -> go.Figure:
    """MB each device sends against the device count (log x), approaching 2S."""
    fig = go.Figure()
    fig.add_scatter(x=list(xs), y=list(sent), mode="lines+markers", name=labels["sent"],
                    line={"color": COMMUNICATION}, marker={"color": COMMUNICATION})
    _model_line(fig, [xs[0], xs[-1]], [2 * buffer, 2 * buffer], "2S")
    fig.update_layout(height=300, xaxis={"type": "log", "title": labels["devices"], "tickvals": list(xs)},
                      yaxis_title=labels["per_device"], margin={"t": 10})
    return with_marks(fig, lang)


def scaling_figure(sizes: Sequence[int], values: Sequence[float], *, labels: dict[str, str],
                   measured: Sequence[tuple[int, float]] | None = None, y_range: Sequence[float] | None = None,
                   ideal: Sequence[float] | None = None, log_y: bool = False,
                   lang: str = DEFAULT_LANG) -> go.Figure:
    """The alpha-beta model's throughput or efficiency against the device count (log x),
    with the learner's own measurements as points; ``ideal``, linear scaling, as a thin line
    (``labels["ideal"]``). ``log_y``: a logarithmic y axis, on which linear scaling is a
    straight line (on a linear one, against a log x, it looks exponential)."""
    fig = go.Figure()
    if ideal is not None:
        fig.add_scatter(x=list(sizes), y=list(ideal), mode="lines", name=labels["ideal"],
                        line={"color": INK, "width": 1})
    fig.add_scatter(x=list(sizes), y=list(values), mode="lines+markers", name=labels["model"],
                    line={"color": MODEL, "dash": "dot", "width": 2}, marker={"color": MODEL, "size": 6})
    if measured:
        fig.add_scatter(x=[m[0] for m in measured], y=[m[1] for m in measured], mode="markers",
                        marker={"size": 12, "symbol": "diamond", "color": MEASURED, "line": {"color": INK, "width": 1}},
                        name=labels["yours"])
    fig.update_layout(height=320, xaxis={"type": "log", "title": labels["devices"], "tickvals": list(sizes)},
                      yaxis={"title": labels["y"], "range": list(y_range) if y_range else None,
                             "type": "log" if log_y else "linear"}, margin={"t": 10})
    return with_marks(fig, lang)


def table(fig: go.Figure) -> dict:
    """The figure's numbers as ``{"columns": [...], "rows": [[...], ...]}``: its text alternative.

    An animation carries its own table (the sends of each step, in
    ``layout.meta``); any other figure is read off its traces, one column per
    named trace beside the x axis' values, so the table shows exactly what
    the chart draws.
    """
    meta = fig.layout.meta
    if isinstance(meta, dict) and "table" in meta:
        return meta["table"]
    traces = [tr for tr in fig.data if tr.name and tr.x is not None and tr.y is not None
              and getattr(tr, "fill", None) is None]
    if all(getattr(tr, "orientation", None) == "h" for tr in traces):  # one stacked bar: a row per part
        return {"columns": [fig.layout.yaxis.title.text or "", fig.layout.xaxis.title.text or ""],
                "rows": [[tr.name, float(tr.x[0])] for tr in traces]}
    keys: list = []
    for tr in traces:
        keys += [x for x in tr.x if x not in keys]
    columns = [fig.layout.xaxis.title.text or "", *(tr.name for tr in traces)]
    values = [dict(zip(tr.x, tr.y, strict=True)) for tr in traces]
    return {"columns": columns, "rows": [[x, *(v.get(x) for v in values)] for x in keys]}


# --- When a rank is slow or dies (the straggler and failure labs) -----------

# The fate of a stretch of a rank's time in the failure lab: one colour each (all from the palette),
# and the lost work hatched too, so that it is told apart without colour.
WORK = {"kept": COMPUTE, "redone": "#88CCEE", "lost": "#CC6677", "checkpoint": "#DDCC77", "start": IDLE,
        "resume": "#AA4499"}


def variant_steps_figure(rows: Sequence[dict], labels: dict[str, str], lang: str = DEFAULT_LANG) -> go.Figure:
    """The measured step of each variant (bar at the median, whiskers at the quartiles) beside
    the model's step (a black cross on a dotted line), in ms. ``rows``: ``{"name", "median",
    "q1", "q3", "model"}`` each; ``labels``: measured, model, variant, ms."""
    names = [r["name"] for r in rows]
    fig = go.Figure()
    fig.add_bar(x=names, y=[r["median"] for r in rows], name=labels["measured"], marker={"color": MEASURED},
                error_y={"type": "data", "symmetric": False, "color": INK,
                         "array": [r["q3"] - r["median"] for r in rows],
                         "arrayminus": [r["median"] - r["q1"] for r in rows]})
    fig.add_scatter(x=names, y=[r["model"] for r in rows], mode="lines+markers", name=labels["model"],
                    line={"color": MODEL, "dash": "dot", "width": 2},
                    marker={"color": MODEL, "symbol": "x", "size": 11})
    fig.update_layout(height=320, xaxis_title=labels["variant"], yaxis_title=labels["ms"], margin={"t": 10})
    return with_marks(fig, lang)


def work_figure(lanes: Sequence[tuple[str, Sequence[dict]]], labels: dict[str, str],
                lang: str = DEFAULT_LANG) -> go.Figure:
    """One lane per rank on one time axis (s): each step kept, lost or redone, each checkpoint,
    each process start and resume, as a bar from its start to its end. ``lanes``: (lane label,
    segments ``{"kind", "start_s", "end_s", "step", "attempt"}``, a run of steps with its
    ``last_step``); ``labels``: the kinds'
    names, and s, rank, step, attempt, from, to and kind for the axis and the table's columns."""
    fig = go.Figure()
    rows = []
    for kind, colour in WORK.items():
        y, base, width, text = [], [], [], []
        for lane, segments in lanes:
            for seg in segments:
                if seg["kind"] != kind:
                    continue
                y.append(lane)
                base.append(seg["start_s"])
                width.append(max(seg["end_s"] - seg["start_s"], 1e-4))
                steps = seg["step"] if seg.get("last_step") is None else f"{seg['step']}–{seg['last_step']}"
                text.append(f"{labels['attempt']} {seg['attempt']} · {labels['step']} {steps}")
                rows.append([lane, labels[kind], seg["attempt"], steps, round(seg["start_s"], 4),
                             round(seg["end_s"], 4)])
        if not y:
            continue
        marker = {"color": colour, "line": {"color": PAPER, "width": 0.5}}
        if kind == "lost":
            marker["pattern"] = {"shape": "x", "fgcolor": INK, "size": 6}
        fig.add_bar(y=y, x=width, base=base, orientation="h", name=labels[kind], customdata=text, marker=marker,
                    hovertemplate="%{customdata}: %{base:.3f} – %{x:.3f} " + labels["s"] + "<extra></extra>")
    order = [lane for lane, _ in lanes]
    fig.update_layout(barmode="overlay", bargap=0.3, height=140 + 40 * len(order), margin={"t": 10, "l": 10, "r": 10},
                      xaxis={"title": labels["s"], "rangemode": "tozero"},
                      yaxis={"categoryorder": "array", "categoryarray": order, "autorange": "reversed",
                             "fixedrange": True},
                      legend={"traceorder": "normal"},
                      meta={"table": {"columns": [labels["rank"], labels["kind"], labels["attempt"], labels["step"],
                                                  labels["from"], labels["to"]],
                                      "rows": sorted(rows, key=lambda row: (row[4], str(row[0])))}})
    return with_marks(fig, lang)


def young_daly_figure(intervals: Sequence[float], waste: Sequence[float], *, optimum: float | None, run: float,
                      run_waste: float, labels: dict[str, str], lang: str = DEFAULT_LANG) -> go.Figure:
    """Expected share of a run wasted (checkpoints, lost work, restarts) against the
    checkpoint interval in steps (log x): the model's curve, the Young/Daly optimum and this
    run's interval. ``labels``: curve, optimum, run, interval, waste."""
    fig = go.Figure()
    fig.add_scatter(x=list(intervals), y=[w * 100 for w in waste], mode="lines", name=labels["curve"],
                    line={"color": MODEL, "dash": "dot", "width": 2})
    if optimum is not None:
        top = max(waste) * 100
        fig.add_scatter(x=[optimum, optimum], y=[0, top], mode="lines", name=labels["optimum"],
                        line={"color": REFERENCE, "width": 2})
    fig.add_scatter(x=[run], y=[run_waste * 100], mode="markers", name=labels["run"],
                    marker={"color": MEASURED, "size": 12, "symbol": "diamond", "line": {"color": INK, "width": 1}})
    fig.update_layout(height=320, xaxis={"type": "log", "title": labels["interval"]},
                      yaxis={"title": labels["waste"], "rangemode": "tozero"}, margin={"t": 10})
    return with_marks(fig, lang)
