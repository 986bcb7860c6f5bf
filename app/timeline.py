"""Swim lanes of the DDP lab's timeline: each rank's compute and communication, span by span.

Plain functions, data in, figure out, like ``app.charts`` (whose palette and
template they use: blues for compute by part, vermillion for communication).
The spans are the ones the ranks recorded (``labs.ddp.timeline``), typed by
``labs.reports``; the figures beside them come from ``labs.timeline``. Labels come in already in
the learner's language.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from academy.i18n import DEFAULT_LANG, number_marks
from app.charts import COMMUNICATION, COMPUTE_PARTS, IDLE, INK, PAPER, TEMPLATE
from labs.reports import Span, Variant

LANE_PX = 34  # one lane's height
PARTS = ("forward", "backward", "optimizer", "wait", "comm")
# "wait": an all-reduce this rank has started and another not yet (``labs.timeline.started_together``)
COLOURS = {**COMPUTE_PARTS, "wait": IDLE, "comm": COMMUNICATION}


def lanes(variants: Sequence[tuple[str, Variant]], labels: dict[str, str]) -> list[tuple[str, int, str, str]]:
    """(lane label, rank, thread, variant title) top to bottom: per variant, per rank, compute then comm."""
    out = []
    for title, var in variants:
        for r in var.ranks:
            for thread in ("compute", "comm"):
                out.append((f"{title} · {labels['rank']} {r.rank} · {labels[thread]}", r.rank, thread, title))
    return out


def _part(span: Span) -> str:
    return "comm" if span.kind == "comm" else span.name if span.name in COMPUTE_PARTS else "backward"


def _pieces(span: Span) -> list[tuple[str, float, float]]:
    """(part, start, end) to draw: a comm span in two where it waited for another rank to start
    the collective (grey, to its ``ready_ms``), then moved data (vermillion)."""
    part = _part(span)
    ready = span.ready_ms
    if part == "comm" and ready is not None and span.start_ms < ready < span.end_ms:
        return [("wait", span.start_ms, ready), ("comm", ready, span.end_ms)]
    return [(part, span.start_ms, span.end_ms)]


def timeline_figure(variants: Sequence[tuple[str, Variant]], labels: dict[str, str],
                    lang: str = DEFAULT_LANG) -> go.Figure:
    """One lane per variant, rank and thread on one time axis (ms), each span a bar
    from its start to its end; a line between variants. ``variants``: (title, the
    variant ``labs.timeline.variant`` returned, as ``labs.reports.Variant``), drawn top to bottom.
    ``labels``: rank, compute, comm, ms and the four parts' names (forward,
    backward, optimizer, comm) and ``wait`` (an all-reduce started here and not yet on
    another rank, drawn grey before the data moves). Dragging zooms; a double click resets."""
    order = lanes(variants, labels)
    lane_of = {(title, rank, thread): lane for lane, rank, thread, title in order}
    fig = go.Figure()
    rows = []
    for part in PARTS:
        y, base, width, text = [], [], [], []
        for title, var in variants:
            for r in var.ranks:
                for s in r.spans:
                    for piece, start, end in _pieces(s):
                        if piece != part:
                            continue
                        thread = "comm" if s.kind == "comm" else "compute"
                        y.append(lane_of[(title, r.rank, thread)])
                        base.append(start)
                        width.append(max(end - start, 1e-4))
                        text.append([s.name, end])
                        if piece != "wait":  # the table: one row per span, launch to completion
                            rows.append([y[-1], s.name, s.start_ms, s.end_ms])
        if not y:
            continue
        fig.add_bar(y=y, x=width, base=base, orientation="h", name=labels[part], customdata=text,
                    marker={"color": COLOURS[part], "line": {"color": PAPER, "width": 0.5}},
                    # start – end (x is the bar's length, which read as its end before)
                    hovertemplate="%{customdata[0]}: %{base:.3f} – %{customdata[1]:.3f} " + labels["ms"]
                    + "<extra></extra>")
    # A rule between variants: naive above, DDP below, the same clock.
    per_variant = [sum(1 for lane in order if lane[3] == title) for title, _v in variants]
    edge = 0
    for count in per_variant[:-1]:
        edge += count
        fig.add_shape(type="line", xref="paper", x0=0, x1=1, yref="y", y0=edge - 0.5, y1=edge - 0.5,
                      line={"color": INK, "width": 1.5})
    decimal, group = number_marks(lang)
    fig.update_layout(
        template=TEMPLATE, separators=decimal + group, barmode="overlay", bargap=0.25,
        height=120 + LANE_PX * len(order), margin={"t": 10, "l": 10, "r": 10},
        xaxis={"title": labels["ms"], "rangemode": "tozero"},
        yaxis={"categoryorder": "array", "categoryarray": [lane for lane, *_ in order],
               "autorange": "reversed", "fixedrange": True},
        legend={"traceorder": "normal"},
        meta={"table": {"columns": [labels["rank"], labels["span"], labels["start"], labels["end"]],
                        "rows": sorted(rows, key=lambda row: (row[2], row[0]))}},
    )
    return fig

