"""The figures' look, checked without a browser (issue #22, "figures a learner wants to look at").

* One palette: every colour any chart builder emits is one of ``app.charts``' palette, and
  each concept has its colour (communication vermillion, compute blue, models black).
* Contrast: every text a figure draws is at least 4.5:1 against what it sits on.
* No collisions in the ring: for 2 to 8 ranks, in every frame, the ranks, their chunks and
  the arrows' labels do not overlap at the smallest scale the ring is drawn at (a 390 px
  phone), measured in px with text widths estimated from the characters.
* A text alternative: ``charts.table`` gives each figure's numbers, and no page calls
  ``st.plotly_chart`` except through ``app.widgets.chart``, which shows that table.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from app import calculators as calc
from app import charts, charts_ring

if TYPE_CHECKING:
    from labs.ring.ringtrace import Send

ROOT = Path(__file__).resolve().parent.parent
LABELS = {k: k for k in ["rank", "chunk", "holds", "start", "play", "pause", "step", "reduce-scatter",
                         "all-gather", "pass-around", "buffer", "phase", "sends"]} | {"carries": "rank {rank}'s whole buffer"}
ZH = LABELS | {"rank": "rank", "chunk": "块"}


def naive_steps(n: int) -> list[list[Send]]:
    return [[(r, (r + 1) % n, None, "pass-around") for r in range(n)] for _ in range(n - 1)]


@functools.cache
def every_figure():
    """One of each figure the app draws, with made-up numbers: made once per process (the
    tests read them, none changes one), not once per test (0.15-1.8 s each time)."""
    rows = [{"impl": impl, "size": size, "busbw": bw * k, "collective": "all_reduce"}
            for k, impl in enumerate(("ring", "ring_pipelined", "naive", "all_reduce"), start=1)
            for size, bw in ((1024, 0.01), (65536, 0.2), (4 << 20, 1.1))]
    fit = {"alpha_s": 5e-5, "bandwidth_Bps": 1.2e9}
    parts = {"forward": 0.2, "backward": 0.4, "exposed_comm": 3.0, "optimizer": 0.1}
    sizes = [1, 2, 4, 8]
    return {
        "ring": charts_ring.ring_figure(4, calc.ring_schedule(4), labels=LABELS, step_durations=[0.01] * 6,
                                   chunk_sizes=["1 KiB"] * 4),
        "naive": charts_ring.naive_ring_figure(3, naive_steps(3), labels=LABELS, step_durations=[0.01] * 2,
                                          buffer_size="4 KiB"),
        "steps": charts.step_time_figure([0.01, 0.012], [0.0002, 0.0002],
                                         {"measured": "measured", "theory": "theory", "step": "step"}),
        "busbw": charts.busbw_figure(rows, world_size=4, fit=fit, labels=LABELS | {
            "ring": "ring", "fit": "fit", "reference": "NCCL", "size": "size"}, reference=(360.0, 480.0)),
        "breakdown": charts.breakdown_figure({"naive": parts, "ddp": parts}, {
            "naive": "naive", "ddp": "ddp", "forward": "f", "backward": "b", "exposed_comm": "c", "optimizer": "o",
            "sync": "sync"}),
        "loss": charts.lines_figure({"ddp": [1.0, 0.8, 0.7], "single": [1.0, 0.8, 0.7]}, x_title="step",
                                    y_title="loss"),
        "memory": charts.memory_figure({"weights": 420.0, "grads": 140.0, "optimizer_state": 560.0}, calc.DEVICES,
                                       names={"weights": "w", "grads": "g", "optimizer_state": "o"}, gb="GB",
                                       parts_title="part"),
        "traffic": charts.ring_traffic_figure([2, 4, 8, 16], [100.0, 150.0, 175.0, 187.5], buffer=100.0,
                                              labels={"sent": "sent", "devices": "n", "per_device": "MB"}),
        "scaling": charts.scaling_figure(sizes, [0.9, 0.8, 0.7, 0.6], measured=[(2, 0.5)], y_range=[0, 1.05],
                                         labels={"model": "model", "yours": "yours", "devices": "n", "y": "eff"}),
        "variants": charts.variant_steps_figure(
            [{"name": n, "median": 10.0 * k, "q1": 9.0 * k, "q3": 11.0 * k, "model": 9.5 * k}
             for k, n in enumerate(("even", "slow", "local"), start=1)],
            {"measured": "measured", "model": "model", "variant": "variant", "ms": "ms"}),
        "work": charts.work_figure(
            [(f"rank {r}", [{"kind": kind, "start_s": float(i), "end_s": i + 0.5, "step": i, "attempt": 0}
                            for i, kind in enumerate(charts.WORK)]) for r in range(2)],
            {**{k: k for k in charts.WORK}, "s": "s", "rank": "rank", "step": "step", "attempt": "attempt",
             "from": "from", "to": "to", "kind": "kind"}),
        "young_daly": charts.young_daly_figure([1, 2, 4, 8, 16], [0.5, 0.3, 0.2, 0.25, 0.4], optimum=5.0, run=10,
                                               run_waste=0.3, labels={"curve": "c", "optimum": "o", "run": "r",
                                                                      "interval": "i", "waste": "w"}),
        **topology_figures(),
    }


def topology_figures() -> dict:
    """The topology lab's and the hierarchical exercise's figures (``app.topology``), made-up numbers."""
    from app import topology
    from labs.reports import MeshCollective, MeshMemory, MeshRow, Spread, TopologyRow

    names = {k: k for k in ("measured_flat", "measured_hierarchical", "predicted_flat", "predicted_hierarchical",
                            "size", "ms", "ratio", "measured", "box", "way_0", "way_1", "predicted", "held_measured",
                            "mb_step", "mb_rank", "rank", "fsdp", "hsdp", "short_fsdp", "short_hsdp", "mesh_axis", "params",
                            "grads", "optimizer", "h100_node", "h100_ib", "yours", "flat", "hierarchical", "us", "hardware")}
    rows = [TopologyRow(algo=a, size=z, time=Spread(median=t, min=t * 0.9, max=t * 1.2), model_bytes=[1.0, 1.0],
                        formula_bytes=1.0, predicted_s=t * 0.8, projected={"h100_node": 1e-5, "h100_ib": 3e-5},
                        messages=6, correct=True, max_abs_err=0.0)
            for a in ("flat", "hierarchical") for z, t in ((1 << 18, 0.02), (1 << 20, 0.06))]
    memory = [MeshMemory(rank=r, measured={"params": 1e5, "grads": 1e5, "optimizer": 2e5},
                         predicted={"params": 1e5, "grads": 1e5, "optimizer": 2e5}) for r in range(2)]
    meshes = [MeshRow(name=n, shard_size=2, replicas=1, parameters=1000, payload_bytes=[3e6, 3e6],
                      predicted_link_bytes=3e6, memory=memory, step_time=Spread(median=0.1, min=0.1, max=0.1),
                      max_abs_diff=0.0, collectives=[MeshCollective(kind="all_gather", group_size=2, spans_nodes=True,
                                                                    bytes=1e6, calls=2, predicted_link_bytes=1e6)])
              for n in ("fsdp", "hsdp")]
    at = {"size_bytes": 4096, "targets": {"h100_node": {"yours": 1.4e-5, "flat": 2e-5, "hierarchical": 1.4e-5},
                                          "h100_ib": {"yours": 3.5e-5, "flat": 8.4e-5, "hierarchical": 3.5e-5}}}
    return {"topology_time": topology.time_figure(rows, names),
            "topology_ratio": topology.ratio_figure([1 << 18, 1 << 20], {"measured": [1.4, 1.3], "box": [1.3, 1.4],
                                                                         "h100_node": [1.4, 1.2], "h100_ib": [2.4, 2.4]},
                                                    names),
            "topology_link": topology.link_figure(meshes, names),
            "topology_memory": topology.memory_figure(meshes, names),
            "topology_clock": topology.clock_figure(at, names)}


def colours(node, path=""):
    """(path, colour) for every colour setting in a figure's JSON."""
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}.{key}"
            if key == "colorscale" and isinstance(value, list):
                yield from ((here, stop[1]) for stop in value)
            elif key == "colorway":
                yield from ((here, c) for c in value)
            elif "color" in key.lower() and isinstance(value, str):
                yield here, value
            elif "color" in key.lower() and isinstance(value, list) and value and isinstance(value[0], str):
                yield from ((here, c) for c in value)
            else:
                yield from colours(value, here)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from colours(item, f"{path}[{i}]")


@pytest.mark.parametrize("name", list(every_figure()))
def test_every_colour_comes_from_the_palette(name):
    fig = every_figure()[name]
    found = list(colours(fig.to_plotly_json()))
    assert found
    stray = [(where, c) for where, c in found if c.lower() not in charts.palette()]
    assert not stray, stray


def test_each_concept_has_its_colour_on_every_chart():
    figs = every_figure()
    bars = {tr.name: tr.marker.color for tr in figs["breakdown"].data}
    assert bars["c"] == charts.COMMUNICATION
    assert {bars["f"], bars["b"], bars["o"]} <= set(charts.COMPUTE_PARTS.values())
    for name in ("ring", "naive"):
        links = [tr for fr in figs[name].frames for tr in fr.data if tr.name == "links"]
        assert links and all(tr.line.color == charts.COMMUNICATION for tr in links)
    assert figs["steps"].data[0].marker.color == charts.MEASURED == charts.COMMUNICATION
    model_lines = [figs["steps"].data[1], figs["busbw"].data[4], figs["traffic"].data[1], figs["scaling"].data[0]]
    assert all(tr.line.color == charts.MODEL and tr.line.dash == "dot" for tr in model_lines)
    assert figs["traffic"].data[0].line.color == charts.COMMUNICATION
    ring_outlines = [shape.line.color for shape in figs["ring"].layout.shapes]
    assert ring_outlines == list(charts.RANKS[:4]), "each rank its own colour"
    idle = [tr for fr in figs["ring"].frames for tr in fr.data if tr.name == "idle"]
    assert idle and all(tr.line.color == charts.IDLE for tr in idle), "a link with nothing on it is idle"


def test_series_differ_by_more_than_colour():
    """The benchmark's four implementations: colour-blind readers tell them apart by marker and dash."""
    lines = every_figure()["busbw"].data[:4]
    assert len({tr.marker.symbol for tr in lines}) == 4 and len({tr.line.dash for tr in lines}) == 4


def font_colours(node, background, path=""):
    """(path, text colour, background) for every font in a figure's JSON; a box with
    ``bgcolor`` is the background of its own text, else the paper."""
    if isinstance(node, dict) and node.get("name") == "chunks":  # a number on each chunk's own fill
        scale = node["marker"]["colorscale"]
        for count, ink in zip(node["marker"]["color"], node["textfont"]["color"], strict=True):
            yield f"{path}.chunks", ink, scale[2 * (count - 1)][1]
        return
    if isinstance(node, dict):
        background = node.get("bgcolor", background) if isinstance(node.get("bgcolor"), str) else background
        for key, value in node.items():
            if key in ("font", "textfont", "tickfont") and isinstance(value, dict) and "color" in value:
                for c in value["color"] if isinstance(value["color"], list) else [value["color"]]:
                    yield f"{path}.{key}", c, background
            yield from font_colours(value, background, f"{path}.{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from font_colours(item, background, f"{path}[{i}]")


@pytest.mark.parametrize("name", list(every_figure()))
def test_chart_text_has_at_least_4_5_to_1(name):
    fig = every_figure()[name]
    texts = list(font_colours(fig.to_plotly_json(), charts.PAPER))
    assert texts
    low = [(where, c, bg, round(charts.contrast(c, bg), 2)) for where, c, bg in texts
           if not c.startswith("rgba") and charts.contrast(c, bg) < 4.5]
    assert not low, low


@pytest.mark.parametrize("n", range(2, 11))
def test_chunk_numbers_read_on_every_fill(n):
    for fill in charts.contribution_colours(n):
        assert charts.contrast(charts.text_on(fill), fill) >= 4.5, fill


def test_contrast_matches_wcag():
    assert charts.contrast("#000000", "#ffffff") == pytest.approx(21.0)
    assert charts.contrast("#767676", "#ffffff") == pytest.approx(4.54, abs=0.01)


# --- collisions -------------------------------------------------------------


def text_box(text: str, size: float) -> tuple[float, float]:
    """A generous estimate of a label's box in px: CJK characters are square, Latin ~0.62 em."""
    width = sum(size if ord(ch) >= 0x2E80 else 0.62 * size for ch in text)
    return width + 8, size * 1.3 + 6  # + borderpad and border on both sides


def boxes(fig, frame, scale: float) -> list[tuple[str, float, float, float, float]]:
    """(what, x0, y0, x1, y1) in px for each rank, chunk, rank number and arrow label of a frame."""
    out = []
    for r, shape in enumerate(fig.layout.shapes):
        out.append((f"rank {r}", shape.x0 * scale, shape.y0 * scale, shape.x1 * scale, shape.y1 * scale))
    for tr in frame.data:
        if tr.name == "chunks":
            half = tr.marker.size / 2 + 0.5  # + the outline
            for (r, c, *_rest), x, y in zip(tr.customdata, tr.x, tr.y, strict=True):
                out.append((f"chunk {r}.{c}", x * scale - half, y * scale - half, x * scale + half, y * scale + half))
        elif tr.name.startswith("bar "):
            half = tr.line.width / 2 + 1  # the outline's; a line has no caps, so only across it
            (x0, x1), (y0, y1) = sorted(tr.x), sorted(tr.y)
            hx, hy = (half, 0) if x0 == x1 else (0, half)
            out.append((tr.name, x0 * scale - hx, y0 * scale - hy, x1 * scale + hx, y1 * scale + hy))
    for i, note in enumerate(frame.layout.annotations or ()):
        w, h = text_box(note.text, note.font.size)
        x, y = note.x * scale, note.y * scale
        left = {"left": x, "right": x - w, "center": x - w / 2}[note.xanchor]
        out.append((f"label {i} {note.text!r}", left, y - h / 2, left + w, y + h / 2))
    return out


def overlap(a, b) -> bool:
    return a[1] < b[3] and b[1] < a[3] and a[2] < b[4] and b[2] < a[4]


def smallest_scale(fig) -> float:
    """px per data unit on a phone: the plot's width there, or the figure's fixed height."""
    width = charts_ring.MOBILE_PLOT_WIDTH - fig.layout.margin.l - fig.layout.margin.r
    height = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    (x0, x1), (y0, y1) = fig.layout.xaxis.range, fig.layout.yaxis.range
    return min(width / (x1 - x0), height / (y1 - y0))


@pytest.mark.parametrize("n", range(2, 9))
@pytest.mark.parametrize("kind", ["ring", "naive", "ring-zh"])
def test_nothing_in_the_ring_collides_on_a_phone(kind, n):
    if kind == "naive":
        fig = charts_ring.naive_ring_figure(n, naive_steps(n), labels=LABELS, buffer_size="4 KiB")
    else:
        fig = charts_ring.ring_figure(n, calc.ring_schedule(n), labels=ZH if kind == "ring-zh" else LABELS)
    scale = smallest_scale(fig)
    (x0, x1), (y0, y1) = fig.layout.xaxis.range, fig.layout.yaxis.range
    for k, frame in enumerate(fig.frames):
        found = boxes(fig, frame, scale)
        clashes = [(a[0], b[0]) for i, a in enumerate(found) for b in found[i + 1:] if overlap(a, b)]
        assert not clashes, (k, clashes)
        outside = [b[0] for b in found if b[1] < x0 * scale or b[3] > x1 * scale or b[2] < y0 * scale
                   or b[4] > y1 * scale]
        assert not outside, (k, outside)
    numbers = next(tr for tr in fig.data if tr.name == "ranks")
    w, h = text_box(str(n - 1), numbers.textfont.size)
    assert w <= 2 * charts_ring.ring_layout(n).node * scale + 6, "a rank's number fits in its circle"


def test_the_colour_bar_lies_under_the_ring():
    """A vertical bar took 40 % of a phone's width (review m2): it is horizontal, below the plot."""
    for fig in (every_figure()["ring"], every_figure()["naive"]):
        bars = [tr.marker.colorbar for tr in fig.data if tr.marker and tr.marker.showscale]
        assert bars and all(b.orientation == "h" and b.y <= 0 and b.thickness <= 14 for b in bars)


def test_legends_sit_outside_the_plot():
    for name, fig in every_figure().items():
        full = fig.layout.template.layout.legend.to_plotly_json() | (fig.layout.legend.to_plotly_json() or {})
        assert full["y"] >= 1 and full["yanchor"] == "bottom", name


def test_memory_device_labels_each_have_their_own_row():
    fig = every_figure()["memory"]
    ys = [note.y for note in fig.layout.annotations]
    assert len(ys) == len(calc.DEVICES) and len(set(ys)) == len(ys)
    assert [tr.name for tr in fig.data] == ["w", "g", "o"] and fig.layout.legend.traceorder == "normal"


# --- text alternatives --------------------------------------------------------


def test_a_figure_s_table_has_its_numbers():
    figs = every_figure()
    steps = charts.table(figs["steps"])
    assert steps["columns"] == ["step", "measured", "theory"]
    assert steps["rows"][1] == [2, pytest.approx(12.0), pytest.approx(0.2)]
    memory = charts.table(figs["memory"])
    assert memory["columns"] == ["part", "GB"]
    assert memory["rows"] == [["w", 420.0], ["g", 140.0], ["o", 560.0]]
    ring = charts.table(figs["ring"])
    assert len(ring["rows"]) == 6 and "chunk 0 (1 KiB)" in ring["rows"][0][3]
    assert ring["rows"][0][2] == pytest.approx(10.0)
    naive = charts.table(figs["naive"])
    assert naive["rows"][1][3].startswith("rank 0 → 1: rank 2's whole buffer (4 KiB)")
    busbw = charts.table(figs["busbw"])
    assert busbw["rows"][0][:2] == [1024, 0.01] and len(busbw["columns"]) == 6


def test_no_page_draws_a_chart_without_its_text_alternative():
    bare = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if re.search(r"\.plotly_chart\(", line) and not line.strip().startswith("#"):
                bare.append(f"{path.relative_to(ROOT)}:{i}")
    assert len(bare) == 1 and bare[0].startswith("app/widgets.py:"), bare


def test_every_column_of_a_text_alternative_has_a_name():
    """An empty <th> says nothing to a screen reader (axe empty-table-header)."""
    for name, fig in every_figure().items():
        assert all(str(c).strip() for c in charts.table(fig)["columns"]), (name, charts.table(fig)["columns"])
