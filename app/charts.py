"""Plotly figures for lessons and labs. Plain functions: data in, figure out.

Labels come in from the caller (already in the learner's language), so this
module holds no learner-visible text. Numbers are the learner's too: ``lang``
sets plotly's decimal and grouping marks (ticks, hover) and the marks of the
numbers we write into titles ourselves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from academy.i18n import DEFAULT_LANG, format_number, number_marks
from labs import model as ring_model

# (src, dst, chunk, phase) as in app.calculators.ring_schedule and lab traces;
# chunk is None for the naive ring, which sends the whole buffer.
Send = tuple[int, int, int | None, str]
PALETTE = "Viridis"


@dataclass(frozen=True)
class RingState:
    """Which ranks' contributions each chunk on each rank holds."""

    contributions: tuple[tuple[frozenset[int], ...], ...]

    def counts(self) -> list[list[int]]:
        return [[len(c) for c in rank] for rank in self.contributions]


def replay(world_size: int, steps: Sequence[Sequence[Send]]) -> list[RingState]:
    """States after each step, derived from the sends alone (state 0 = before any).

    Reduce-scatter adds the sender's contributions to the receiver's chunk;
    all-gather overwrites the receiver's chunk with the sender's.
    """
    n = world_size
    state = [[frozenset({r}) for _ in range(n)] for r in range(n)]
    states = [RingState(tuple(tuple(row) for row in state))]
    for sends in steps:
        snapshot = [row[:] for row in state]  # sends in one step happen at once
        for src, dst, chunk, phase in sends:
            if phase == "reduce-scatter":
                state[dst][chunk] = state[dst][chunk] | snapshot[src][chunk]
            else:
                state[dst][chunk] = snapshot[src][chunk]
        states.append(RingState(tuple(tuple(row) for row in state)))
    return states


def _marks(fig: go.Figure, lang: str) -> go.Figure:
    """Ticks and hover text in ``lang``'s marks ("0,5" in Dutch)."""
    decimal, group = number_marks(lang)
    fig.update_layout(separators=decimal + group)
    return fig


def _rank_xy(n: int) -> list[tuple[float, float]]:
    return [(math.cos(math.pi / 2 - 2 * math.pi * r / n), math.sin(math.pi / 2 - 2 * math.pi * r / n))
            for r in range(n)]


def _chunk_xy(n: int) -> list[tuple[float, float, int, int]]:
    """A small row of chunk squares outside each rank's node."""
    out = []
    width = 0.09
    for r, (x, y) in enumerate(_rank_xy(n)):
        # Outside the node: further out sideways, since the row is horizontal.
        cx, cy = x * (1.22 + n * width / 2), y * 1.32
        for c in range(n):
            out.append((cx + (c - (n - 1) / 2) * width, cy, r, c))
    return out


def _arrow(src_xy: tuple[float, float], dst_xy: tuple[float, float], text: str) -> dict:
    """An arrow from one rank to the next, labelled with what travels on it."""
    (x0, y0), (x1, y1) = src_xy, dst_xy
    # Shift each arrow a little to its right, so that the two directions
    # between the same pair of ranks (n = 2) do not cover each other.
    length = math.hypot(x1 - x0, y1 - y0) or 1.0
    ox, oy = 0.07 * (y1 - y0) / length, -0.07 * (x1 - x0) / length
    x0, y0, x1, y1 = x0 + ox, y0 + oy, x1 + ox, y1 + oy
    return {
        "x": x0 + 0.82 * (x1 - x0), "y": y0 + 0.82 * (y1 - y0),
        "ax": x0 + 0.18 * (x1 - x0), "ay": y0 + 0.18 * (y1 - y0),
        "xref": "x", "yref": "y", "axref": "x", "ayref": "y", "showarrow": True,
        "arrowhead": 3, "arrowwidth": 2.5, "arrowcolor": "#d62728",
        "text": text, "font": {"size": 11, "color": "#d62728"},
        # Legible where a label crosses the other arrow or a rank.
        "bgcolor": "rgba(255,255,255,0.85)", "borderpad": 1,
    }


def _node_trace(n: int, labels: dict[str, str]) -> go.Scatter:
    ranks = _rank_xy(n)
    return go.Scatter(
        x=[x for x, _ in ranks], y=[y for _, y in ranks], mode="markers+text", name="ranks",
        text=[f"{labels['rank']} {r}" for r in range(n)], textposition="middle center",
        marker={"size": 58, "color": "#e8eef7", "line": {"width": 2, "color": "#1f4e79"}},
        hoverinfo="skip",
    )


def _step_title(k: int, steps: Sequence[Sequence[Send]], labels: dict[str, str],
                step_durations: Sequence[float] | None, lang: str) -> str:
    if k == 0:
        return labels["start"]
    phase = steps[k - 1][0][3] if steps[k - 1] else ""
    text = f"{labels['step']} {k}/{len(steps)} · {labels.get(phase, phase)}"
    if step_durations:
        text += f" · {format_number(step_durations[k - 1] * 1e3, lang, '.2f')} ms"
    return text


def _animated(frames: list[go.Frame], *, labels: dict[str, str],
              step_durations: Sequence[float] | None) -> go.Figure:
    """Frame 0 shown first, Play/Pause buttons and a step slider; steps paced by their durations."""
    steps = len(frames) - 1
    durations = [400] + [
        int(200 + 1800 * (d / (max(step_durations) or 1.0))) if step_durations else 900
        for d in (step_durations or [1.0] * steps)
    ]
    fig = go.Figure(data=frames[0].data, frames=frames)
    fig.update_layout(
        title={"text": frames[0].layout.title.text}, height=560, showlegend=False,
        margin={"l": 10, "r": 10, "t": 60, "b": 10},
        xaxis={"visible": False, "range": [-2.1, 2.1]},
        yaxis={"visible": False, "range": [-1.6, 1.6], "scaleanchor": "x"},
        updatemenus=[{
            "type": "buttons", "direction": "left", "x": 0.0, "y": -0.02, "xanchor": "left",
            "buttons": [
                {"label": labels["play"], "method": "animate",
                 "args": [None, {"frame": [{"duration": d, "redraw": True} for d in durations],
                                 "transition": {"duration": 150}, "fromcurrent": True}]},
                {"label": labels["pause"], "method": "animate",
                 "args": [[None], {"frame": {"duration": 0, "redraw": False}, "mode": "immediate"}]},
            ],
        }],
        sliders=[{
            "active": 0, "y": -0.04, "x": 0.2, "len": 0.8,
            "currentvalue": {"prefix": labels["step"] + " "},
            "steps": [{"label": str(k), "method": "animate",
                       "args": [[str(k)], {"mode": "immediate", "frame": {"duration": 0, "redraw": True}}]}
                      for k in range(len(frames))],
        }],
    )
    return fig


def ring_figure(
    world_size: int,
    steps: Sequence[Sequence[Send]],
    *,
    labels: dict[str, str],
    step_durations: Sequence[float] | None = None,
    chunk_sizes: Sequence[str] | None = None,
    lang: str = DEFAULT_LANG,
) -> go.Figure:
    """An animated ring all-reduce: one frame per step plus the starting state.

    Frame k (k >= 1) draws exactly the sends of step k as arrows and a trace
    named ``sends`` whose customdata lists them, and colours each chunk by how
    many ranks' contributions it holds after the step. ``step_durations``
    (seconds, measured) pace the animation; ``chunk_sizes`` (already
    formatted) label the arrows; ``labels`` needs the keys ``rank``,
    ``chunk``, ``holds``, ``start``, ``play``, ``pause``, ``step``,
    ``reduce-scatter`` and ``all-gather``.
    """
    n = world_size
    states = replay(n, steps)
    ranks = _rank_xy(n)
    chunks = _chunk_xy(n)
    sizes = list(chunk_sizes) if chunk_sizes else [None] * n

    def frame_data(k: int) -> list[go.Scatter]:
        counts = states[k].counts()
        sends = steps[k - 1] if k > 0 else []
        chunk_trace = go.Scatter(
            x=[c[0] for c in chunks], y=[c[1] for c in chunks], mode="markers", name="chunks",
            marker={"symbol": "square", "size": max(10, 34 - 3 * n), "color": [counts[r][c] for _, _, r, c in chunks],
                    "cmin": 1, "cmax": n, "colorscale": PALETTE, "line": {"width": 1, "color": "#333"},
                    "colorbar": {"title": {"text": labels["holds"]}, "tickvals": list(range(1, n + 1))}},
            customdata=[[r, c, counts[r][c]] for _, _, r, c in chunks],
            hovertemplate=labels["rank"] + " %{customdata[0]} · " + labels["chunk"]
            + " %{customdata[1]}: %{customdata[2]}/" + str(n) + "<extra></extra>",
        )
        send_trace = go.Scatter(
            x=[ranks[s[0]][0] for s in sends], y=[ranks[s[0]][1] for s in sends], mode="markers",
            name="sends", marker={"size": 1, "opacity": 0}, hoverinfo="skip",
            customdata=[[s[0], s[1], s[2], s[3]] for s in sends],
        )
        return [chunk_trace, send_trace]

    def arrows(k: int) -> list[dict]:
        if k == 0:
            return []
        return [_arrow(ranks[src], ranks[dst], f"{labels['chunk']} {chunk}"
                       + (f" ({sizes[chunk]})" if sizes[chunk] else ""))
                for src, dst, chunk, _phase in steps[k - 1]]

    node_trace = _node_trace(n, labels)
    frames = [
        go.Frame(name=str(k), data=[node_trace, *frame_data(k)],
                 layout={"annotations": arrows(k), "title": {"text": _step_title(k, steps, labels, step_durations, lang)}})
        for k in range(len(states))
    ]
    return _marks(_animated(frames, labels=labels, step_durations=step_durations), lang)


@dataclass(frozen=True)
class NaiveState:
    """Whose data each rank has added up so far, and whose buffer it forwards next."""

    totals: tuple[frozenset[int], ...]
    carrying: tuple[int, ...]


def naive_replay(world_size: int, steps: Sequence[Sequence[Send]]) -> list[NaiveState]:
    """States of the naive ring after each step, derived from the sends alone (state 0 = before any).

    A naive send moves a whole buffer: the receiver adds it to its running
    total and forwards it in the next step, so rank r's own data goes first
    and, after n-1 steps, every rank has added every other rank's buffer.
    """
    n = world_size
    totals = [frozenset({r}) for r in range(n)]
    carrying = list(range(n))
    states = [NaiveState(tuple(totals), tuple(carrying))]
    for sends in steps:
        before = carrying[:]  # sends in one step happen at once
        for src, dst, _chunk, _phase in sends:
            totals[dst] = totals[dst] | {before[src]}
            carrying[dst] = before[src]
        states.append(NaiveState(tuple(totals), tuple(carrying)))
    return states


def naive_ring_figure(
    world_size: int,
    steps: Sequence[Sequence[Send]],
    *,
    labels: dict[str, str],
    step_durations: Sequence[float] | None = None,
    buffer_size: str | None = None,
    lang: str = DEFAULT_LANG,
) -> go.Figure:
    """The naive ring, animated: in every step each rank sends its whole buffer to the next.

    Each rank's buffer is one bar, not n chunks, coloured by how many ranks'
    data it has added up; each arrow says whose whole buffer travels
    (``carries``) and its size (``buffer_size``, already formatted). Frame k
    (k >= 1) has a ``sends`` trace whose customdata lists the step's sends as
    (src, dst, whose data) and a ``buffers`` trace with (rank, count) per rank.
    ``labels`` needs ``rank``, ``holds``, ``start``, ``play``, ``pause``,
    ``step``, ``pass-around``, ``buffer`` (hover text) and ``carries`` (a
    template with ``{rank}``, e.g. "rank {rank}'s whole buffer").
    """
    n = world_size
    states = naive_replay(n, steps)
    ranks = _rank_xy(n)
    width = 0.09 * n  # as wide as the ring's row of n chunks: the same data, unsplit
    bars = [(x * (1.22 + width / 2), y * 1.32) for x, y in ranks]
    thickness = max(10, 34 - 3 * n)

    def frame_data(k: int) -> list[go.Scatter]:
        counts = [len(total) for total in states[k].totals]
        colours = sample_colorscale(PALETTE, [(c - 1) / max(1, n - 1) for c in counts])
        # One thick segment per rank: the buffer, coloured by what it holds.
        segment_x: list[float | None] = []
        segment_y: list[float | None] = []
        for cx, cy in bars:
            segment_x += [cx - width / 2, cx + width / 2, None]
            segment_y += [cy, cy, None]
        outline = go.Scatter(x=segment_x, y=segment_y, mode="lines", name="outline",
                             line={"width": thickness + 2, "color": "#333"}, hoverinfo="skip")
        bar_traces = [
            go.Scatter(x=segment_x[3 * r: 3 * r + 2], y=segment_y[3 * r: 3 * r + 2], mode="lines",
                       name=f"bar {r}", line={"width": thickness, "color": colours[r]}, hoverinfo="skip")
            for r in range(n)
        ]
        buffer_trace = go.Scatter(
            x=[b[0] for b in bars], y=[b[1] for b in bars], mode="markers", name="buffers",
            marker={"symbol": "square", "size": thickness, "opacity": 0, "color": counts, "cmin": 1, "cmax": n,
                    "colorscale": PALETTE, "showscale": True,
                    "colorbar": {"title": {"text": labels["holds"]}, "tickvals": list(range(1, n + 1))}},
            customdata=[[r, counts[r]] for r in range(n)],
            hovertemplate=labels["rank"] + " %{customdata[0]} · " + labels["buffer"]
            + ": %{customdata[1]}/" + str(n) + "<extra></extra>",
        )
        sends = steps[k - 1] if k > 0 else []
        before = states[k - 1].carrying if k > 0 else ()
        send_trace = go.Scatter(
            x=[ranks[s[0]][0] for s in sends], y=[ranks[s[0]][1] for s in sends], mode="markers",
            name="sends", marker={"size": 1, "opacity": 0}, hoverinfo="skip",
            customdata=[[s[0], s[1], before[s[0]]] for s in sends],
        )
        return [outline, *bar_traces, buffer_trace, send_trace]

    def arrows(k: int) -> list[dict]:
        if k == 0:
            return []
        before = states[k - 1].carrying
        size = f" ({buffer_size})" if buffer_size else ""
        return [_arrow(ranks[src], ranks[dst], labels["carries"].format(rank=before[src]) + size)
                for src, dst, _chunk, _phase in steps[k - 1]]

    node_trace = _node_trace(n, labels)
    frames = [
        go.Frame(name=str(k), data=[node_trace, *frame_data(k)],
                 layout={"annotations": arrows(k), "title": {"text": _step_title(k, steps, labels, step_durations, lang)}})
        for k in range(len(states))
    ]
    return _marks(_animated(frames, labels=labels, step_durations=step_durations), lang)


def trace_steps(traces: Sequence[Sequence[dict]]) -> tuple[list[list[Send]], list[float]]:
    """Sends per step and each step's measured duration, from the ranks' own traces.

    ``traces[r]`` is rank r's list of step records (step, phase, send_chunk,
    send_to, t_start, t_end) on the shared clock. A step lasts from the first
    rank starting it to the last rank finishing it.
    """
    by_step: dict[int, list[dict]] = {}
    for rank, records in enumerate(traces):
        for rec in records:
            by_step.setdefault(int(rec["step"]), []).append({**rec, "rank": rank})
    steps, durations = [], []
    for k in sorted(by_step):
        recs = by_step[k]
        # The naive ring sends whole buffers: its records carry send_chunk None.
        steps.append([(r["rank"], int(r["send_to"]), None if r["send_chunk"] is None else int(r["send_chunk"]),
                       r["phase"]) for r in recs])
        durations.append(max(r["t_end"] for r in recs) - min(r["t_start"] for r in recs))
    return steps, durations


def step_time_figure(measured: Sequence[float], predicted: Sequence[float], labels: dict[str, str],
                     lang: str = DEFAULT_LANG, low: Sequence[float] | None = None,
                     high: Sequence[float] | None = None) -> go.Figure:
    """Measured step times beside the alpha-beta prediction (milliseconds);
    ``low``/``high`` (seconds) draw each step's spread over repeated runs."""
    xs = list(range(1, len(measured) + 1))
    fig = go.Figure()
    error = None
    if low is not None and high is not None:
        error = {"type": "data", "symmetric": False, "array": [(h - m) * 1e3 for h, m in zip(high, measured, strict=True)],
                 "arrayminus": [(m - lo) * 1e3 for lo, m in zip(low, measured, strict=True)]}
    fig.add_bar(x=xs, y=[m * 1e3 for m in measured], name=labels["measured"], error_y=error)
    fig.add_scatter(x=xs, y=[p * 1e3 for p in predicted], mode="lines+markers", name=labels["theory"])
    # The legend names the model line's source and how far off it is: below the
    # axis title, not over it.
    fig.update_layout(height=340, xaxis_title=labels["step"], yaxis_title="ms", margin={"t": 20},
                      legend={"orientation": "h", "y": -0.3, "x": 0})
    return _marks(fig, lang)


def busbw_figure(rows: Sequence[dict], *, world_size: int, fit: dict | None, labels: dict[str, str],
                 reference: tuple[float, float] | None = None, lang: str = DEFAULT_LANG) -> go.Figure:
    """busbw against message size (log x) per implementation, with the fitted model."""
    fig = go.Figure()
    impls = []
    for row in rows:
        if row["impl"] not in impls and row.get("collective", "all_reduce") == "all_reduce":
            impls.append(row["impl"])
    for impl in impls:
        mine = [r for r in rows if r["impl"] == impl]
        fig.add_scatter(x=[r["size"] for r in mine], y=[r["busbw"] for r in mine], mode="lines+markers",
                        name=labels.get(impl, impl))
    n = world_size
    if fit and fit.get("alpha_s") is not None and fit.get("bandwidth_Bps") and n > 1:
        sizes = sorted({r["size"] for r in rows})
        model = [ring_model.busbw(size, ring_model.ring_time(n, size, fit["alpha_s"], fit["bandwidth_Bps"]), n) / 1e9
                 for size in sizes]
        fig.add_scatter(x=sizes, y=model, mode="lines", line={"dash": "dot"}, name=labels["fit"])
    yaxis: dict = {}
    if reference:
        sizes = sorted({r["size"] for r in rows}) or [1, 2]
        fig.add_scatter(x=[sizes[0], sizes[-1], sizes[-1], sizes[0], sizes[0]],
                        y=[reference[0], reference[0], reference[1], reference[1], reference[0]],
                        fill="toself", mode="lines", line={"width": 0}, fillcolor="rgba(0,128,0,0.2)",
                        name=labels["reference"], hoverinfo="name")
        # Keep the reference band in view: the gap to it is the point of the plot.
        lowest = min((r["busbw"] for r in rows if r["busbw"] > 0), default=1e-3)
        yaxis = {"range": [math.log10(lowest / 2), math.log10(reference[1] * 2)]}
    fig.update_layout(height=460, xaxis_type="log", yaxis_type="log", xaxis_title=labels["size"],
                      yaxis_title="busbw (GB/s)", yaxis=yaxis, margin={"t": 20},
                      legend={"orientation": "h", "y": -0.25, "x": 0})
    return _marks(fig, lang)


def breakdown_figure(parts: dict[str, dict[str, float]], labels: dict[str, str],
                     lang: str = DEFAULT_LANG) -> go.Figure:
    """Stacked per-step time (ms): forward, backward, exposed communication, optimizer."""
    fig = go.Figure()
    names = list(parts)
    for part in ("forward", "backward", "exposed_comm", "optimizer"):
        fig.add_bar(x=[labels[n] for n in names], y=[parts[n].get(part, 0.0) for n in names], name=labels[part])
    fig.update_layout(barmode="stack", height=320, yaxis_title="ms", margin={"t": 20},
                      legend={"orientation": "h"})
    return _marks(fig, lang)


def lines_figure(series: dict[str, Sequence[float]], *, x_title: str, y_title: str,
                 xs: Sequence[float] | None = None, log_x: bool = False, lang: str = DEFAULT_LANG) -> go.Figure:
    fig = go.Figure()
    for name, ys in series.items():
        fig.add_scatter(x=list(xs) if xs is not None else list(range(1, len(ys) + 1)), y=list(ys),
                        mode="lines+markers", name=name)
    fig.update_layout(height=300, xaxis_title=x_title, yaxis_title=y_title, margin={"t": 20},
                      legend={"orientation": "h"}, xaxis_type="log" if log_x else None)
    return _marks(fig, lang)
