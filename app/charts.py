"""Plotly figures for lessons and labs. Plain functions: data in, figure out.

Labels come in from the caller (already in the learner's language), so this
module holds no learner-visible text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

# (src, dst, chunk, phase) as in app.calculators.ring_schedule and lab traces.
Send = tuple[int, int, int, str]
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


def _rank_xy(n: int) -> list[tuple[float, float]]:
    return [(math.cos(math.pi / 2 - 2 * math.pi * r / n), math.sin(math.pi / 2 - 2 * math.pi * r / n))
            for r in range(n)]


def _chunk_xy(n: int) -> list[tuple[float, float, int, int]]:
    """A small row of chunk squares outside each rank's node."""
    out = []
    for r, (x, y) in enumerate(_rank_xy(n)):
        radial = 1.32
        cx, cy = x * radial, y * radial
        width = 0.09
        for c in range(n):
            out.append((cx + (c - (n - 1) / 2) * width, cy, r, c))
    return out


def ring_figure(
    world_size: int,
    steps: Sequence[Sequence[Send]],
    *,
    labels: dict[str, str],
    step_durations: Sequence[float] | None = None,
    chunk_sizes: Sequence[int] | None = None,
) -> go.Figure:
    """An animated ring all-reduce: one frame per step plus the starting state.

    Frame k (k >= 1) draws exactly the sends of step k as arrows and a trace
    named ``sends`` whose customdata lists them, and colours each chunk by how
    many ranks' contributions it holds after the step. ``step_durations``
    (seconds, measured) pace the animation; ``labels`` needs the keys
    ``rank``, ``chunk``, ``holds``, ``start``, ``play``, ``pause``, ``step``,
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
        notes = []
        for src, dst, chunk, _phase in steps[k - 1]:
            (x0, y0), (x1, y1) = ranks[src], ranks[dst]
            notes.append({
                "x": x0 + 0.82 * (x1 - x0), "y": y0 + 0.82 * (y1 - y0),
                "ax": x0 + 0.18 * (x1 - x0), "ay": y0 + 0.18 * (y1 - y0),
                "xref": "x", "yref": "y", "axref": "x", "ayref": "y", "showarrow": True,
                "arrowhead": 3, "arrowwidth": 2.5, "arrowcolor": "#d62728",
                "text": f"{labels['chunk']} {chunk}" + (f" ({sizes[chunk]})" if sizes[chunk] else ""),
                "font": {"size": 11, "color": "#d62728"},
            })
        return notes

    def title(k: int) -> str:
        if k == 0:
            return labels["start"]
        phase = steps[k - 1][0][3] if steps[k - 1] else ""
        text = f"{labels['step']} {k}/{len(steps)} · {labels.get(phase, phase)}"
        if step_durations:
            text += f" · {step_durations[k - 1] * 1e3:.2f} ms"
        return text

    node_trace = go.Scatter(
        x=[x for x, _ in ranks], y=[y for _, y in ranks], mode="markers+text", name="ranks",
        text=[f"{labels['rank']} {r}" for r in range(n)], textposition="middle center",
        marker={"size": 58, "color": "#e8eef7", "line": {"width": 2, "color": "#1f4e79"}},
        hoverinfo="skip",
    )
    frames = [
        go.Frame(name=str(k), data=[node_trace, *frame_data(k)],
                 layout={"annotations": arrows(k), "title": {"text": title(k)}})
        for k in range(len(states))
    ]
    durations = [400] + [
        int(200 + 1800 * (d / max(step_durations))) if step_durations else 900
        for d in (step_durations or [1.0] * len(steps))
    ]
    fig = go.Figure(data=frames[0].data, frames=frames)
    fig.update_layout(
        title={"text": title(0)}, height=560, showlegend=False, margin={"l": 10, "r": 10, "t": 60, "b": 10},
        xaxis={"visible": False, "range": [-1.8, 1.8]},
        yaxis={"visible": False, "range": [-1.6, 1.6], "scaleanchor": "x"},
        updatemenus=[{
            "type": "buttons", "direction": "left", "x": 0.0, "y": -0.02, "xanchor": "left",
            "buttons": [
                {"label": f"▶ {labels['play']}", "method": "animate",
                 "args": [None, {"frame": [{"duration": d, "redraw": True} for d in durations],
                                 "transition": {"duration": 150}, "fromcurrent": True}]},
                {"label": f"⏸ {labels['pause']}", "method": "animate",
                 "args": [[None], {"frame": {"duration": 0, "redraw": False}, "mode": "immediate"}]},
            ],
        }],
        sliders=[{
            "active": 0, "y": -0.04, "x": 0.2, "len": 0.8,
            "currentvalue": {"prefix": labels["step"] + " "},
            "steps": [{"label": str(k), "method": "animate",
                       "args": [[str(k)], {"mode": "immediate", "frame": {"duration": 0, "redraw": True}}]}
                      for k in range(len(states))],
        }],
    )
    return fig
