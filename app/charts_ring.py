"""The ring animations for lessons, labs and exercises: who sent which chunk to whom, step by step.

Plain functions, data in, figure out, on the palette and template of
``app.charts`` (labels from the caller, in the learner's language). The sends
come from ``app.calculators.ring_schedule`` or from a run's own trace
(``labs.ring.ringtrace.trace_steps``); :func:`replay` and :func:`naive_replay` derive
what each rank holds after each step from the sends alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import plotly.graph_objects as go

from academy.i18n import DEFAULT_LANG, format_number
from app.charts import (
    COMMUNICATION,
    IDLE,
    INK,
    PAPER,
    RANKS,
    contribution_colours,
    text_on,
    with_marks,
)

if TYPE_CHECKING:  # a figure needs only the shape of a send
    from labs.ring.ringtrace import Send


def _steps_scale(colours: Sequence[str]) -> list[list]:
    """A stepped colorscale: value k (of 1..n) gets exactly colours[k-1]."""
    n = len(colours)
    scale = []
    for k, colour in enumerate(colours):
        scale += [[k / n, colour], [(k + 1) / n, colour]]
    return scale


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



# --- The ring --------------------------------------------------------------
# Everything that must not collide is placed in data units, and text (fixed
# in px) is checked against the smallest scale the figure is drawn at: a
# 390 px phone, where the plot is about MOBILE_PLOT_WIDTH wide. On a wider
# screen shapes grow while text does not, so nothing that clears there
# collides anywhere (tests/test_charts.py checks every world size 2-8).
MOBILE_PLOT_WIDTH = 340
RING_HEIGHT = 660
RING_MARGIN = {"l": 10, "r": 10, "t": 50, "b": 220}
SHORT_LABELS_FROM = 6  # ranks from which an arrow says "3", not "Chunk 3"


@dataclass(frozen=True)
class RingLayout:
    """Where ranks, their chunks and the arrows' labels go for ``n`` ranks (data units)."""

    n: int
    radius: float
    node: float  # radius of a rank's circle
    cell: float  # the slot of one chunk in a rank's row
    gap: float = 0.15

    def rank_xy(self, r: int) -> tuple[float, float]:
        angle = math.pi / 2 - 2 * math.pi * r / self.n
        return self.radius * math.cos(angle), self.radius * math.sin(angle)

    def upright(self, r: int) -> bool:
        """Whether rank r's chunks stand in a column (ranks at the sides: a row there would
        make the figure wide, and a phone is narrow) rather than lie in a row."""
        x, y = self.rank_xy(r)
        return abs(x) > abs(y) + 1e-9

    def strip_size(self, r: int) -> tuple[float, float]:
        """Width and height of rank r's chunks together."""
        long, short = self.n * self.cell, self.cell
        return (short, long) if self.upright(r) else (long, short)

    def strip_xy(self, r: int) -> tuple[float, float]:
        """Centre of rank r's chunks, just outside its circle."""
        x, y = self.rank_xy(r)
        ux, uy = x / self.radius, y / self.radius
        width, height = self.strip_size(r)
        return (ux * (self.radius + self.node + self.gap + width / 2),
                uy * (self.radius + self.node + self.gap + height / 2))

    def cell_xy(self, r: int, c: int) -> tuple[float, float]:
        """Chunk c of rank r: left to right in a row, top to bottom in a column."""
        cx, cy = self.strip_xy(r)
        offset = (c - (self.n - 1) / 2) * self.cell
        return (cx, cy - offset) if self.upright(r) else (cx + offset, cy)

    @property
    def extent(self) -> tuple[float, float]:
        xs = [abs(self.strip_xy(r)[0]) + self.strip_size(r)[0] / 2 for r in range(self.n)]
        ys = [abs(self.strip_xy(r)[1]) + self.strip_size(r)[1] / 2 for r in range(self.n)]
        return max(xs + [self.radius + self.node]) + 0.1, max(ys + [self.radius + self.node]) + 0.1

    @property
    def scale(self) -> float:
        """px per data unit at the narrowest: the plot on a phone, or the fixed height."""
        x, y = self.extent
        width = MOBILE_PLOT_WIDTH - RING_MARGIN["l"] - RING_MARGIN["r"]
        height = RING_HEIGHT - RING_MARGIN["t"] - RING_MARGIN["b"]
        return min(width / (2 * x), height / (2 * y))

    @property
    def cell_px(self) -> int:
        """A chunk's square: fills most of its slot at the smallest scale, never more."""
        return int(min(28, 0.8 * self.cell * self.scale))

    def segment(self, src: int, dst: int) -> tuple[tuple[float, float], tuple[float, float], tuple[float, float]]:
        """An arrow from rank src's circle to dst's, shifted to its right (so that the two
        directions between the same pair, n = 2, stay apart), and its right-hand normal."""
        (x0, y0), (x1, y1) = self.rank_xy(src), self.rank_xy(dst)
        length = math.hypot(x1 - x0, y1 - y0) or 1.0
        dx, dy = (x1 - x0) / length, (y1 - y0) / length
        qx, qy = dy, -dx
        shift, inset = 0.12 if self.n == 2 else 0.0, self.node + 0.05
        return ((x0 + dx * inset + qx * shift, y0 + dy * inset + qy * shift),
                (x1 - dx * inset + qx * shift, y1 - dy * inset + qy * shift), (qx, qy))

    def label_at(self, src: int, dst: int) -> tuple[float, float, str]:
        """Where an arrow's label goes: on its middle, or for n = 2 beside it, and its xanchor."""
        (x0, y0), (x1, y1), (qx, qy) = self.segment(src, dst)
        mx, my = (x0 + x1) / 2, (y0 + y1) / 2
        if self.n != 2:
            return mx, my, "center"
        return mx + qx * 0.06, my + qy * 0.06, "left" if qx > 0 else "right"


def ring_layout(n: int) -> RingLayout:
    return RingLayout(n=n, radius=1.5 if n <= 5 else 2.1, node=0.22, cell=min(0.28, 1.2 / max(n, 1)))


def _rank_shapes(lay: RingLayout) -> list[dict]:
    """Each rank's circle, outlined in the rank's colour (static: frames leave shapes alone)."""
    shapes = []
    for r in range(lay.n):
        x, y = lay.rank_xy(r)
        shapes.append({"type": "circle", "xref": "x", "yref": "y", "x0": x - lay.node, "x1": x + lay.node,
                       "y0": y - lay.node, "y1": y + lay.node, "fillcolor": PAPER,
                       "line": {"color": RANKS[r % len(RANKS)], "width": 3}, "layer": "below"})
    return shapes


def _node_trace(lay: RingLayout, labels: dict[str, str]) -> go.Scatter:
    """Each rank's number inside its circle; the hover names it."""
    ranks = [lay.rank_xy(r) for r in range(lay.n)]
    return go.Scatter(
        x=[x for x, _ in ranks], y=[y for _, y in ranks], mode="text", name="ranks",
        text=[str(r) for r in range(lay.n)], textposition="middle center",
        textfont={"size": 14, "color": INK, "weight": "bold"},
        hovertext=[f"{labels['rank']} {r}" for r in range(lay.n)], hoverinfo="text",
    )


def _links_trace(lay: RingLayout, sends: Sequence[tuple[int, int]]) -> go.Scatter:
    """The step's sends as arrows (communication colour); empty before the first step."""
    xs: list[float | None] = []
    ys: list[float | None] = []
    sizes: list[int] = []
    for src, dst in sends:
        (x0, y0), (x1, y1), _normal = lay.segment(src, dst)
        xs += [x0, x1, None]
        ys += [y0, y1, None]
        sizes += [0, 13, 0]
    return go.Scatter(x=xs, y=ys, mode="lines+markers", name="links", hoverinfo="skip",
                      line={"color": COMMUNICATION, "width": 2.5},
                      marker={"symbol": "arrow", "angleref": "previous", "size": sizes or [0],
                              "color": COMMUNICATION})


def _idle_trace(lay: RingLayout) -> go.Scatter:
    """The ring's links, thin and grey: idle unless a step's arrow runs over them."""
    xs: list[float | None] = []
    ys: list[float | None] = []
    for r in range(lay.n if lay.n > 2 else 1):
        (x0, y0), (x1, y1), _normal = lay.segment(r, (r + 1) % lay.n)
        xs += [x0, x1, None]
        ys += [y0, y1, None]
    return go.Scatter(x=xs, y=ys, mode="lines", name="idle", hoverinfo="skip",
                      line={"color": IDLE, "width": 1.5, "dash": "dot"})


def _label(lay: RingLayout, src: int, dst: int, text: str) -> dict:
    x, y, anchor = lay.label_at(src, dst)
    return {"x": x, "y": y, "xref": "x", "yref": "y", "showarrow": False, "text": text, "xanchor": anchor,
            "yanchor": "middle", "font": {"size": 12, "color": INK}, "bgcolor": PAPER,
            "bordercolor": COMMUNICATION, "borderwidth": 1, "borderpad": 2}


def _colourbar(title: str, n: int) -> dict:
    """Horizontal, under the ring: it takes no width from the ring on a phone."""
    return {"title": {"text": title, "side": "top", "font": {"color": INK}}, "orientation": "h",
            "x": 0.5, "xanchor": "center", "y": -0.02, "yanchor": "top", "lenmode": "pixels", "len": 280,
            "thickness": 12,
            "tickvals": list(range(1, n + 1)), "tickfont": {"color": INK}, "outlinecolor": INK}


def _step_title(k: int, steps: Sequence[Sequence[Send]], labels: dict[str, str],
                step_durations: Sequence[float] | None, lang: str) -> str:
    if k == 0:
        return labels["start"]
    phase = steps[k - 1][0][3] if steps[k - 1] else ""
    text = f"{labels['step']} {k}/{len(steps)} · {labels.get(phase, phase)}"
    if step_durations:
        text += f" · {format_number(step_durations[k - 1] * 1e3, lang, '.2f')} ms"
    return text


def _animated(frames: list[go.Frame], lay: RingLayout, *, labels: dict[str, str],
              step_durations: Sequence[float] | None) -> go.Figure:
    """Frame 0 shown first, a step slider and under it Play/Pause buttons; steps paced by their
    durations. The slider comes first on screen as it does in Plotly's SVG, so that Tab reaches
    them in reading order (app/static/page.js makes them focusable)."""
    steps = len(frames) - 1
    durations = [400] + [
        int(200 + 1800 * (d / (max(step_durations) or 1.0))) if step_durations else 900
        for d in (step_durations or [1.0] * steps)
    ]
    x, y = lay.extent
    fig = go.Figure(data=frames[0].data, frames=frames)
    fig.update_layout(
        title={"text": frames[0].layout.title.text, "x": 0, "xanchor": "left"},
        annotations=frames[0].layout.annotations, shapes=_rank_shapes(lay),
        height=RING_HEIGHT, showlegend=False, margin=RING_MARGIN,
        xaxis={"visible": False, "range": [-x, x]},
        yaxis={"visible": False, "range": [-y, y], "scaleanchor": "x"},
        updatemenus=[{  # from the slider's top, below its height (value, rail, ticks: about 75 px)
            "type": "buttons", "direction": "left", "x": 0.0, "y": -0.2, "xanchor": "left", "yanchor": "top",
            "pad": {"t": 88},
            "bgcolor": PAPER, "bordercolor": INK, "font": {"color": INK},
            "buttons": [
                {"label": labels["play"], "method": "animate",
                 "args": [None, {"frame": [{"duration": d, "redraw": True} for d in durations],
                                 "transition": {"duration": 150}, "fromcurrent": True}]},
                {"label": labels["pause"], "method": "animate",
                 "args": [[None], {"frame": {"duration": 0, "redraw": False}, "mode": "immediate"}]},
            ],
        }],
        sliders=[{
            "active": 0, "y": -0.2, "x": 0.0, "len": 1.0, "yanchor": "top", "name": labels["step"],
            "pad": {"t": 0, "b": 0},
            "font": {"color": INK}, "bordercolor": INK, "tickcolor": INK,
            "currentvalue": {"prefix": labels["step"] + " ", "font": {"color": INK}},
            "steps": [{"label": str(k), "method": "animate",
                       "args": [[str(k)], {"mode": "immediate", "frame": {"duration": 0, "redraw": True}}]}
                      for k in range(len(frames))],
        }],
    )
    return fig


def _arrow_text(lay: RingLayout, word: str, value: int) -> str:
    return str(value) if lay.n >= SHORT_LABELS_FROM else f"{word} {value}"


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

    Frame k (k >= 1) draws exactly the sends of step k as arrows, each
    labelled with the chunk it carries (one annotation per send), a trace
    named ``sends`` whose customdata lists them, and colours each chunk
    (trace ``chunks``, numbered squares beside each rank) by how many ranks'
    contributions it holds after the step. ``step_durations`` (seconds,
    measured) pace the animation; ``chunk_sizes`` (already formatted) go to
    the chunks' hover and the text alternative (``table``); ``labels`` needs
    the keys ``rank``, ``chunk``, ``holds``, ``start``, ``play``, ``pause``,
    ``step``, ``reduce-scatter``, ``all-gather``, and ``phase`` and ``sends``
    (the heads of the text alternative's columns).
    """
    n = world_size
    lay = ring_layout(n)
    states = replay(n, steps)
    colours = contribution_colours(n)
    sizes = list(chunk_sizes) if chunk_sizes else [""] * n
    cells = [(r, c, *lay.cell_xy(r, c)) for r in range(n) for c in range(n)]
    numbered = lay.cell_px >= 14  # room for the chunk's number inside its square

    def frame_data(k: int) -> list[go.Scatter]:
        counts = states[k].counts()
        sends = steps[k - 1] if k > 0 else []
        fills = [colours[counts[r][c] - 1] for r, c, _x, _y in cells]
        chunk_trace = go.Scatter(
            x=[x for _r, _c, x, _y in cells], y=[y for _r, _c, _x, y in cells],
            mode="markers+text" if numbered else "markers", name="chunks",
            text=[str(c) for _r, c, _x, _y in cells] if numbered else None, textposition="middle center",
            textfont={"size": 11, "color": [text_on(f) for f in fills]},
            marker={"symbol": "square", "size": lay.cell_px, "color": [counts[r][c] for r, c, _x, _y in cells],
                    "cmin": 0.5, "cmax": n + 0.5, "colorscale": _steps_scale(colours), "showscale": True,
                    "line": {"width": 1, "color": INK}, "colorbar": _colourbar(labels["holds"], n)},
            customdata=[[r, c, counts[r][c], sizes[c]] for r, c, _x, _y in cells],
            hovertemplate=labels["rank"] + " %{customdata[0]} · " + labels["chunk"]
            + " %{customdata[1]} %{customdata[3]}: %{customdata[2]}/" + str(n) + "<extra></extra>",
        )
        send_trace = go.Scatter(
            x=[lay.rank_xy(s[0])[0] for s in sends], y=[lay.rank_xy(s[0])[1] for s in sends], mode="markers",
            name="sends", marker={"size": 1, "opacity": 0, "color": INK}, hoverinfo="skip",
            customdata=[[s[0], s[1], s[2], s[3]] for s in sends],
        )
        return [_idle_trace(lay), _links_trace(lay, [(s[0], s[1]) for s in sends]), chunk_trace, send_trace]

    def arrows(k: int) -> list[dict]:
        if k == 0:
            return []
        return [_label(lay, src, dst, _arrow_text(lay, labels["chunk"], chunk))
                for src, dst, chunk, _phase in steps[k - 1]]

    node_trace = _node_trace(lay, labels)
    frames = [
        go.Frame(name=str(k), data=[*frame_data(k), node_trace],
                 layout={"annotations": arrows(k), "title": {"text": _step_title(k, steps, labels, step_durations, lang)}})
        for k in range(len(states))
    ]
    fig = _animated(frames, lay, labels=labels, step_durations=step_durations)
    fig.update_layout(meta={"table": _ring_table(steps, labels, step_durations, chunk_sizes=sizes)})
    return with_marks(fig, lang)


def _ring_table(steps: Sequence[Sequence[Send]], labels: dict[str, str],
                step_durations: Sequence[float] | None, *, chunk_sizes: Sequence[str] | None = None,
                carried: Sequence[Sequence[int]] | None = None) -> dict:
    """The animation as rows: each step's phase, time and every send with what it carried."""
    columns = [labels["step"], labels["phase"], "ms", labels["sends"]]
    rows = []
    for k, sends in enumerate(steps, start=1):
        phase = sends[0][3] if sends else ""
        what = []
        for i, (src, dst, chunk, _phase) in enumerate(sends):
            if carried is not None:
                thing = labels["carries"].format(rank=carried[k - 1][i])
            else:
                size = chunk_sizes[chunk] if chunk_sizes and chunk is not None and chunk_sizes[chunk] else ""
                thing = f"{labels['chunk']} {chunk}" + (f" ({size})" if size else "")
            what.append(f"{labels['rank']} {src} → {dst}: {thing}")
        rows.append([k, labels.get(phase, phase), step_durations[k - 1] * 1e3 if step_durations else None,
                     "; ".join(what)])
    return {"columns": columns, "rows": rows}


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

    Each rank's buffer is one bar, as wide as the ring's row of n chunks (the
    same data, unsplit), coloured by how many ranks' data it has added up;
    each arrow names the rank whose whole buffer travels on it. Frame k
    (k >= 1) has a ``sends`` trace whose customdata lists the step's sends as
    (src, dst, whose data) and a ``buffers`` trace with (rank, count) per
    rank. ``labels`` needs ``rank``, ``holds``, ``start``, ``play``,
    ``pause``, ``step``, ``pass-around``, ``phase``, ``sends``, ``buffer`` (hover text) and
    ``carries`` (a template with ``{rank}``, e.g. "rank {rank}'s whole
    buffer", for the text alternative).
    """
    n = world_size
    lay = ring_layout(n)
    states = naive_replay(n, steps)
    colours = contribution_colours(n)
    width = n * lay.cell
    bars = [lay.strip_xy(r) for r in range(n)]

    def frame_data(k: int) -> list[go.Scatter]:
        counts = [len(total) for total in states[k].totals]
        segment_x: list[float | None] = []
        segment_y: list[float | None] = []
        for r, (cx, cy) in enumerate(bars):
            if lay.upright(r):
                segment_x += [cx, cx, None]
                segment_y += [cy - width / 2, cy + width / 2, None]
            else:
                segment_x += [cx - width / 2, cx + width / 2, None]
                segment_y += [cy, cy, None]
        outline = go.Scatter(x=segment_x, y=segment_y, mode="lines", name="outline",
                             line={"width": lay.cell_px + 2, "color": INK}, hoverinfo="skip")
        bar_traces = [
            go.Scatter(x=segment_x[3 * r: 3 * r + 2], y=segment_y[3 * r: 3 * r + 2], mode="lines",
                       name=f"bar {r}", line={"width": lay.cell_px, "color": colours[counts[r] - 1]},
                       hoverinfo="skip")
            for r in range(n)
        ]
        buffer_trace = go.Scatter(
            x=[b[0] for b in bars], y=[b[1] for b in bars], mode="markers", name="buffers",
            marker={"symbol": "square", "size": lay.cell_px, "opacity": 0, "color": counts,
                    "cmin": 0.5, "cmax": n + 0.5, "colorscale": _steps_scale(colours), "showscale": True,
                    "colorbar": _colourbar(labels["holds"], n)},
            customdata=[[r, counts[r]] for r in range(n)],
            hovertemplate=labels["rank"] + " %{customdata[0]} · " + labels["buffer"]
            + (f" ({buffer_size})" if buffer_size else "") + ": %{customdata[1]}/" + str(n) + "<extra></extra>",
        )
        sends = steps[k - 1] if k > 0 else []
        before = states[k - 1].carrying if k > 0 else ()
        send_trace = go.Scatter(
            x=[lay.rank_xy(s[0])[0] for s in sends], y=[lay.rank_xy(s[0])[1] for s in sends], mode="markers",
            name="sends", marker={"size": 1, "opacity": 0, "color": INK}, hoverinfo="skip",
            customdata=[[s[0], s[1], before[s[0]]] for s in sends],
        )
        return [_idle_trace(lay), _links_trace(lay, [(s[0], s[1]) for s in sends]), outline, *bar_traces,
                buffer_trace, send_trace]

    def arrows(k: int) -> list[dict]:
        if k == 0:
            return []
        before = states[k - 1].carrying
        return [_label(lay, src, dst, _arrow_text(lay, labels["rank"], before[src]))
                for src, dst, _chunk, _phase in steps[k - 1]]

    node_trace = _node_trace(lay, labels)
    frames = [
        go.Frame(name=str(k), data=[*frame_data(k), node_trace],
                 layout={"annotations": arrows(k), "title": {"text": _step_title(k, steps, labels, step_durations, lang)}})
        for k in range(len(states))
    ]
    fig = _animated(frames, lay, labels=labels, step_durations=step_durations)
    carried = [[states[k].carrying[src] for src, _dst, _c, _p in steps[k]] for k in range(len(steps))]
    size = f" ({buffer_size})" if buffer_size else ""
    table = _ring_table(steps, {**labels, "carries": labels["carries"] + size}, step_durations,
                        carried=carried)
    fig.update_layout(meta={"table": table})
    return with_marks(fig, lang)


