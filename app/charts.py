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
text alternative: ``table`` turns it into rows of the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import plotly.graph_objects as go

from academy.i18n import DEFAULT_LANG, format_number, number_marks
from labs import model as ring_model

if TYPE_CHECKING:  # labs.ring imports torch; a figure needs only the shape of a send
    from labs.ring import Send


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
               *(colour for colour, _symbol, _dash in IMPLEMENTATIONS.values())}
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


def _steps_scale(colours: Sequence[str]) -> list[list]:
    """A stepped colorscale: value k (of 1..n) gets exactly colours[k-1]."""
    n = len(colours)
    scale = []
    for k, colour in enumerate(colours):
        scale += [[k / n, colour], [(k + 1) / n, colour]]
    return scale


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
    """Ticks and hover text in ``lang``'s marks ("0,5" in Dutch), on our template."""
    decimal, group = number_marks(lang)
    fig.update_layout(separators=decimal + group, template=TEMPLATE)
    return fig


# --- The ring --------------------------------------------------------------
# Everything that must not collide is placed in data units, and text (fixed
# in px) is checked against the smallest scale the figure is drawn at: a
# 390 px phone, where the plot is about MOBILE_PLOT_WIDTH wide. On a wider
# screen shapes grow while text does not, so nothing that clears there
# collides anywhere (tests/test_charts.py checks every world size 2-8).
MOBILE_PLOT_WIDTH = 340
RING_HEIGHT = 640
RING_MARGIN = {"l": 10, "r": 10, "t": 50, "b": 190}
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
    """Frame 0 shown first, Play/Pause buttons and a step slider; steps paced by their durations."""
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
        updatemenus=[{
            "type": "buttons", "direction": "left", "x": 0.0, "y": -0.2, "xanchor": "left", "yanchor": "top",
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
            "active": 0, "y": -0.3, "x": 0.0, "len": 1.0, "yanchor": "top",
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
    ``step``, ``reduce-scatter`` and ``all-gather``.
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
    return _marks(fig, lang)


def _ring_table(steps: Sequence[Sequence[Send]], labels: dict[str, str],
                step_durations: Sequence[float] | None, *, chunk_sizes: Sequence[str] | None = None,
                carried: Sequence[Sequence[int]] | None = None) -> dict:
    """The animation as rows: each step's phase, time and every send with what it carried."""
    columns = [labels["step"], labels.get("phase", ""), "ms", labels.get("sends", "→")]
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
    ``pause``, ``step``, ``pass-around``, ``buffer`` (hover text) and
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
    return _marks(fig, lang)


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
    return _marks(fig, lang)


def breakdown_figure(parts: dict[str, dict[str, float]], labels: dict[str, str],
                     lang: str = DEFAULT_LANG) -> go.Figure:
    """Stacked per-step time (ms): forward, backward, optimizer (compute, blues) and
    exposed communication (vermillion)."""
    fig = go.Figure()
    names = list(parts)
    colours = {**COMPUTE_PARTS, "exposed_comm": COMMUNICATION}
    for part in ("forward", "backward", "exposed_comm", "optimizer"):
        fig.add_bar(x=[labels[n] for n in names], y=[parts[n].get(part, 0.0) for n in names], name=labels[part],
                    marker={"color": colours[part], "line": {"color": PAPER, "width": 1}})
    fig.update_layout(barmode="stack", height=340, yaxis_title="ms", margin={"t": 10},
                      legend={"traceorder": "normal"})
    return _marks(fig, lang)


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
    return _marks(fig, lang)


def memory_figure(parts: dict[str, float], devices: dict[str, float], *, names: dict[str, str], gb: str,
                  lang: str = DEFAULT_LANG) -> go.Figure:
    """One stacked bar of model state (GB: weights, gradients, optimizer state) and a dashed
    line per device's memory, each device labelled on its own row above the bar, so that
    no two labels share a line however close the devices are on the axis."""
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
                      yaxis={"visible": False, "range": [-0.5, 0.7 + 0.5 * rows]}, margin={"t": 10, "l": 10},
                      legend={"traceorder": "normal"})
    return _marks(fig, lang)


def ring_traffic_figure(xs: Sequence[int], sent: Sequence[float], *, buffer: float, labels: dict[str, str],
                        lang: str = DEFAULT_LANG) -> go.Figure:
    """MB each device sends against the device count (log x), approaching 2S."""
    fig = go.Figure()
    fig.add_scatter(x=list(xs), y=list(sent), mode="lines+markers", name=labels["sent"],
                    line={"color": COMMUNICATION}, marker={"color": COMMUNICATION})
    _model_line(fig, [xs[0], xs[-1]], [2 * buffer, 2 * buffer], "2S")
    fig.update_layout(height=300, xaxis={"type": "log", "title": labels["devices"], "tickvals": list(xs)},
                      yaxis_title=labels["per_device"], margin={"t": 10})
    return _marks(fig, lang)


def scaling_figure(sizes: Sequence[int], values: Sequence[float], *, labels: dict[str, str],
                   measured: Sequence[tuple[int, float]] | None = None, y_range: Sequence[float] | None = None,
                   lang: str = DEFAULT_LANG) -> go.Figure:
    """The alpha-beta model's throughput or efficiency against the device count (log x),
    with the learner's own measurements as points."""
    fig = go.Figure()
    fig.add_scatter(x=list(sizes), y=list(values), mode="lines+markers", name=labels["model"],
                    line={"color": MODEL, "dash": "dot", "width": 2}, marker={"color": MODEL, "size": 6})
    if measured:
        fig.add_scatter(x=[m[0] for m in measured], y=[m[1] for m in measured], mode="markers",
                        marker={"size": 12, "symbol": "diamond", "color": MEASURED, "line": {"color": INK, "width": 1}},
                        name=labels["yours"])
    fig.update_layout(height=320, xaxis={"type": "log", "title": labels["devices"], "tickvals": list(sizes)},
                      yaxis={"title": labels["y"], "range": list(y_range) if y_range else None}, margin={"t": 10})
    return _marks(fig, lang)


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
        return {"columns": ["", fig.layout.xaxis.title.text or ""],
                "rows": [[tr.name, float(tr.x[0])] for tr in traces]}
    keys: list = []
    for tr in traces:
        keys += [x for x in tr.x if x not in keys]
    columns = [fig.layout.xaxis.title.text or "", *(tr.name for tr in traces)]
    values = [dict(zip(tr.x, tr.y, strict=True)) for tr in traces]
    return {"columns": columns, "rows": [[x, *(v.get(x) for v in values)] for x in keys]}
