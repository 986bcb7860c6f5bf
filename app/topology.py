"""The topology lab on the page: the link, both all-reduces, the simulated clock, FSDP against HSDP.

`show` draws a finished run (``labs.reports.TopologySummary``, the numbers the
processes measured and the replays ``labs.simclock`` made of their messages).
The figures are plain functions (data in, figure out, labels already
translated) in the palette of ``app.charts``: measured vermillion, a model's
prediction black and dotted, the flat ring and the hierarchical all-reduce told
apart by marker and dash as well as colour, the two hardware targets green
(one NVLink node) and indigo (nodes over InfiniBand).
"""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from academy.i18n import DEFAULT_LANG
from app import charts
from app.ui import t
from app.widgets import chart, lang, num
from labs.reports import MeshRow, TopologyRow, TopologySummary
from labs.simclock import TARGETS

ALGO_STYLE = {"flat": (charts.COMMUNICATION, "circle", "solid"), "hierarchical": ("#882255", "diamond", "dash")}
TARGET_STYLE = {"measured": (charts.MEASURED, "diamond", "solid"), "box": (charts.MODEL, "x", "dot"),
                "h100_node": (charts.REFERENCE, "square", "solid"), "h100_ib": ("#332288", "triangle-up", "dashdot")}
PARTS = {"params": "weights", "grads": "grads", "optimizer": "optimizer_state"}  # ledger part -> MEMORY colour
MB = 1e6


def size_text(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{num(n, '.4g')} {unit}"
        n /= 1024
    return f"{num(n)} B"


def rate_text(bps: float) -> str:
    """Bytes per second in MB/s, or GB/s from a thousand MB/s on."""
    return f"{num(bps / 1e9, '.3g')} GB/s" if bps >= 1e9 else f"{num(bps / 1e6, '.3g')} MB/s"


def time_figure(rows: list[TopologyRow], names: dict[str, str], language: str = DEFAULT_LANG) -> go.Figure:
    """Time per all-reduce (ms) against size (log-log): each algorithm measured (median, bars
    from the fastest to the slowest repeat) and the replay of its messages on this box."""
    fig = go.Figure()
    for algo, (colour, symbol, dash) in ALGO_STYLE.items():
        mine = [r for r in rows if r.algo == algo]
        if not mine:
            continue
        fig.add_scatter(x=[r.size for r in mine], y=[r.time.median * 1e3 for r in mine], mode="lines+markers",
                        name=names[f"measured_{algo}"], line={"color": colour, "dash": dash},
                        marker={"color": colour, "symbol": symbol, "size": 9},
                        error_y={"type": "data", "symmetric": False, "color": colour,
                                 "array": [(r.time.max - r.time.median) * 1e3 for r in mine],
                                 "arrayminus": [(r.time.median - r.time.min) * 1e3 for r in mine]})
        if all(r.predicted_s is not None for r in mine):
            fig.add_scatter(x=[r.size for r in mine], y=[r.predicted_s * 1e3 for r in mine], mode="lines+markers",
                            name=names[f"predicted_{algo}"], line={"color": charts.MODEL, "dash": "dot", "width": 2},
                            marker={"color": charts.MODEL, "symbol": f"{symbol}-open", "size": 9})
    fig.update_layout(height=380, xaxis=_size_axis(sorted({r.size for r in rows}), names),
                      yaxis={"type": "log", "title": names["ms"], "tickformat": "~g", "dtick": "D2"}, margin={"t": 10})
    return charts.with_marks(fig, language)


def _size_axis(sizes: list[int], names: dict[str, str]) -> dict:
    """A log axis of message sizes with a tick at each size the run measured, named in KiB/MiB."""
    return {"type": "log", "title": names["size"], "tickvals": list(sizes), "ticktext": [size_text(z) for z in sizes]}


def ratio_figure(sizes: list[int], series: dict[str, list[float | None]], names: dict[str, str],
                 language: str = DEFAULT_LANG) -> go.Figure:
    """Flat ring's time over the hierarchical one's, per size, on each clock: above 1 the
    hierarchical all-reduce wins by that factor. ``series``: "measured", "box", and the
    `labs.simclock.TARGETS` keys."""
    fig = go.Figure()
    for key, values in series.items():
        colour, symbol, dash = TARGET_STYLE[key]
        fig.add_scatter(x=list(sizes), y=values, mode="lines+markers", name=names[key],
                        line={"color": colour, "dash": dash, "width": 2},
                        marker={"color": colour, "symbol": symbol, "size": 9})
    fig.add_shape(type="line", xref="paper", x0=0, x1=1, y0=1, y1=1, line={"color": charts.INK, "width": 1})
    fig.update_layout(height=360, xaxis=_size_axis(list(sizes), names),
                      yaxis={"title": names["ratio"], "rangemode": "tozero"}, margin={"t": 10})
    return charts.with_marks(fig, language)


def link_figure(meshes: list[MeshRow], names: dict[str, str], language: str = DEFAULT_LANG) -> go.Figure:
    """MB per training step over the link, each way (bars), beside the prediction (black marks)."""
    fig = go.Figure()
    xs = [names[m.name] for m in meshes]
    for way in (0, 1):
        if all(m.payload_bytes for m in meshes):
            fig.add_bar(name=names[f"way_{way}"], x=xs, y=[m.payload_bytes[way] / MB for m in meshes],
                        marker={"color": charts.COMMUNICATION if way == 0 else "#E69F00",
                                "pattern": {"shape": "" if way == 0 else "/"}})
    fig.add_scatter(name=names["predicted"], x=xs, y=[m.predicted_link_bytes / MB for m in meshes], mode="markers",
                    marker={"color": charts.MODEL, "symbol": "line-ew", "size": 28,
                            "line": {"width": 3, "color": charts.MODEL}})
    fig.update_layout(barmode="group", height=320, yaxis_title=names["mb_step"], xaxis_title=names["mesh_axis"],
                      margin={"t": 10})
    return charts.with_marks(fig, language)


def memory_figure(meshes: list[MeshRow], names: dict[str, str], language: str = DEFAULT_LANG) -> go.Figure:
    """MB each rank holds (parameters, gradients, optimizer state) under FSDP and HSDP:
    measured (solid) beside predicted (hatched)."""
    xs = [f"{names['short_' + m.name]} · {names['rank']} {row.rank}" for m in meshes for row in m.memory]
    rows = [row for m in meshes for row in m.memory]
    fig = go.Figure()
    for kind, pattern in (("measured", ""), ("predicted", "/")):
        base = [0.0] * len(rows)
        for part, colour in PARTS.items():
            ys = [getattr(r, kind)[part] / MB for r in rows]
            fig.add_bar(name=f"{names[part]} ({names['held_measured' if kind == 'measured' else 'predicted']})", x=xs, y=ys,
                        base=list(base), offsetgroup=kind,
                        marker={"color": charts.MEMORY[colour], "pattern": {"shape": pattern},
                                "line": {"color": charts.PAPER, "width": 1}})
            base = [b + y for b, y in zip(base, ys, strict=True)]
    fig.update_layout(barmode="group", height=400, yaxis_title=names["mb_rank"], xaxis_title=names["rank"],
                      margin={"t": 10})
    return charts.with_marks(fig, language)


# --------------------------------------------------------------------------
# The page


def _names() -> dict[str, str]:
    keys = ("measured_flat", "measured_hierarchical", "predicted_flat", "predicted_hierarchical", "size", "ms",
            "ratio", "measured", "box", "way_0", "way_1", "predicted", "held_measured", "mb_step", "mb_rank", "rank", "fsdp",
            "hsdp", "short_fsdp", "short_hsdp", "mesh_axis", "params", "grads", "optimizer")
    return {k: t(f"topology.{k}") for k in keys} | {key: t(f"topology.target.{key}") for key in TARGETS}


def fabric(s: TopologySummary) -> None:
    """What the run ran on: the namespaces and the shaped link, or why not."""
    if s.fabric == "namespaces":
        if s.nodes > 1:
            st.success(t("topology.fabric_linked", nodes=s.nodes, count=s.per_node, rate=num(s.rate_mbit or 0, "g")),
                       icon=":material/lan:")
        else:
            st.success(t("topology.fabric_one", count=s.per_node), icon=":material/lan:")
        return
    reason = s.unavailable if s.unavailable in ("no_capability", "no_iproute2", "several_hosts") else "failed"
    st.warning(t(f"topology.unavailable.{reason}"), icon=":material/block:")
    if s.unavailable_detail:
        st.caption(t("topology.unavailable_detail"))
        st.text(s.unavailable_detail)


def links(s: TopologySummary) -> None:
    if not s.links:
        return
    rows = []
    for key, link in s.links.items():
        rows.append({t("topology.link_class"): t(f"topology.class.{key}" if s.fabric == "namespaces"
                                                 else "topology.class.loopback"),
                     "alpha (µs)": num(link.alpha_s * 1e6, ".1f"),
                     t("topology.link_measured"): rate_text(link.bandwidth_Bps),
                     t("topology.link_rate"): rate_text(link.rate_Bps) if link.rate_Bps else "—"})
    st.dataframe(rows, hide_index=True)
    st.caption(t("topology.links_caption", repeats=max(5, s.repeats)))


def bytes_table(s: TopologySummary) -> None:
    rows = []
    for r in s.rows:
        counted = " / ".join(num(b / MB, ".4f") for b in r.link_bytes) if r.link_bytes else "—"
        payload = " / ".join(num(b / MB, ".4f") for b in r.payload_bytes) if r.payload_bytes else "—"
        rows.append({t("topology.algo"): t(f"topology.algo_{r.algo}"), t("topology.size"): size_text(r.size),
                     t("topology.counted"): counted, t("topology.payload"): payload,
                     t("topology.logged"): " / ".join(num(b / MB, ".4f") for b in r.model_bytes),
                     t("topology.formula"): num(r.formula_bytes / MB, ".4f"),
                     t("topology.gap"): "—" if r.bytes_error is None else num(r.bytes_error, ".2%"),
                     t("topology.resent"): "—" if r.retransmitted is None else r.retransmitted,
                     t("topology.values"): "✓" if r.correct else "✗"})
    st.dataframe(rows, hide_index=True)
    if s.within_tolerance is not None:
        (st.success if s.within_tolerance else st.warning)(
            t("topology.bytes_ok" if s.within_tolerance else "topology.bytes_off", tol=num(s.tolerance * 100, "g")))
    st.caption(t("topology.bytes_caption", count=s.world_size, k=s.per_node, m=s.nodes))


def _by(rows: list[TopologyRow], algo: str) -> dict[int, TopologyRow]:
    return {r.size: r for r in rows if r.algo == algo}


def clock(run, s: TopologySummary, names: dict[str, str]) -> None:
    """The simulated clock: the run's own messages on real hardware, beside this machine's time."""
    st.markdown(f"**{t('topology.clock_title')}**")
    st.markdown(":material/visibility: " + t("topology.clock_look"))
    flat, hier = _by(s.rows, "flat"), _by(s.rows, "hierarchical")
    sizes = sorted(set(flat) & set(hier))
    if not sizes:
        return
    series: dict[str, list[float | None]] = {
        "measured": [flat[z].time.median / hier[z].time.median for z in sizes]}
    if all(flat[z].predicted_s and hier[z].predicted_s for z in sizes):
        series["box"] = [flat[z].predicted_s / hier[z].predicted_s for z in sizes]
    for key in TARGETS:
        if all(key in flat[z].projected and key in hier[z].projected for z in sizes):
            series[key] = [flat[z].projected[key] / hier[z].projected[key] for z in sizes]
    chart(ratio_figure(sizes, series, names, lang()), key=f"topo_ratio_{run.id}", caption=t("topology.ratio_alt"))
    rows = []
    for z in sizes:
        row = {t("topology.size"): size_text(z),
               t("topology.cpu_flat"): f"{num(flat[z].time.median * 1e3, '.2f')} ms",
               t("topology.cpu_hier"): f"{num(hier[z].time.median * 1e3, '.2f')} ms"}
        for key in TARGETS:
            if key in flat[z].projected:
                row[f"{names[key]}: {t('topology.algo_flat')}"] = f"{num(flat[z].projected[key] * 1e6, '.1f')} µs"
                row[f"{names[key]}: {t('topology.algo_hierarchical')}"] = \
                    f"{num(hier[z].projected[key] * 1e6, '.1f')} µs"
        rows.append(row)
    st.dataframe(rows, hide_index=True)
    biggest = sizes[-1]
    for key in TARGETS:
        f, h = flat[biggest].projected.get(key), hier[biggest].projected.get(key)
        if f and h:
            winner = "hierarchical" if h < f else "flat"
            st.markdown("- " + t(f"topology.verdict_{winner}", target=names[key], size=size_text(biggest),
                                  times=num(max(f, h) / min(f, h), ".2f"), flat=num(f * 1e6, ".1f"),
                                  hier=num(h * 1e6, ".1f")))
    st.caption(t("topology.clock_caption", count=s.world_size, k=s.per_node, m=s.nodes))
    if s.scale:
        st.markdown(f"**{t('topology.scale_title')}**")
        st.dataframe([{t("topology.size"): size_text(r.size), t("topology.algo"): t(f"topology.algo_{r.algo}"),
                       **{names[key]: f"{num(v * 1e6, '.1f')} µs" for key, v in r.projected.items() if key in names},
                       t("topology.inter_mb"): num(r.inter_bytes / MB, ".3f")} for r in s.scale], hide_index=True)
        st.caption(t("topology.scale_caption"))


def meshes(run, s: TopologySummary, names: dict[str, str]) -> None:
    st.markdown(f"**{t('topology.mesh_title', count=s.world_size, k=s.per_node, m=s.nodes)}**")
    st.markdown(":material/visibility: " + t("topology.mesh_look", m=s.nodes))
    chart(link_figure(s.sharding, names, lang()), key=f"topo_link_{run.id}", caption=t("topology.link_alt"))
    chart(memory_figure(s.sharding, names, lang()), key=f"topo_mem_{run.id}", caption=t("topology.memory_alt"))
    rows = []
    for m in s.sharding:
        held = max(sum(r.measured.values()) for r in m.memory)
        rows.append({"": names[m.name], t("topology.shard_over"): m.shard_size, t("topology.replicas"): m.replicas,
                     t("topology.held"): f"{num(held / MB, '.3f')} MB",
                     t("topology.step_ms"): f"{num(m.step_time.median * 1e3, '.1f')} ms "
                                            f"({num(m.step_time.min * 1e3, '.1f')}–{num(m.step_time.max * 1e3, '.1f')})",
                     t("topology.same_weights"): num(m.max_abs_diff, ".1e")})
    st.dataframe(rows, hide_index=True)
    st.caption(t("topology.mesh_caption"))


def show(run, s: TopologySummary) -> None:
    """A finished topology run, from the fabric it ran on to FSDP against HSDP."""
    names = _names()
    fabric(s)
    links(s)
    if s.rows:
        st.markdown(f"**{t('topology.time_title', count=s.repeats)}**")
        chart(time_figure(s.rows, names, lang()), key=f"topo_time_{run.id}", caption=t("topology.time_alt"))
        bytes_table(s)
        clock(run, s, names)
    if s.sharding:
        meshes(run, s, names)


def rows(summary: dict) -> list[dict]:
    """The download's table: one row per algorithm and size, as the run stored it."""
    return [{k: v for k, v in r.items() if not isinstance(v, dict | list)} | {
        "time_median_s": r["time"]["median"], "counted_0_to_1": (r.get("link_bytes") or [None])[0],
        "logged_0_to_1": r["model_bytes"][0] if r.get("model_bytes") else None,
        **{f"projected_{k}_s": v for k, v in r["projected"].items()}}
        for r in summary.get("rows", [])]


# --------------------------------------------------------------------------
# The exercise's report: the learner's messages on the simulated clock

CLOCK_STYLE = {"yours": (charts.COMMUNICATION, ""), "flat": ("#E69F00", "/"), "hierarchical": ("#882255", ".")}


def clock_figure(at: dict, names: dict[str, str], language: str = DEFAULT_LANG) -> go.Figure:
    """Projected µs per target (log scale): the learner's all-reduce beside a flat ring and the reference.
    ``at``: one entry of the trace's ``at`` (``{"size_bytes", "targets": {key: {name: seconds}}}``)."""
    fig = go.Figure()
    keys = [key for key in TARGETS if key in at["targets"]]
    for name, (colour, pattern) in CLOCK_STYLE.items():
        ys = [at["targets"][key].get(name) for key in keys]
        fig.add_bar(name=names[name], x=[names[key] for key in keys], y=[None if y is None else y * 1e6 for y in ys],
                    marker={"color": colour, "pattern": {"shape": pattern}, "line": {"color": charts.PAPER, "width": 1}})
    fig.update_layout(barmode="group", height=340, yaxis={"type": "log", "title": names["us"], "tickformat": "~g"},
                      xaxis_title=names["hardware"], margin={"t": 10})
    return charts.with_marks(fig, language)


def _seconds(value) -> float | None:
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value < 1e6:
        raise ValueError("not a time")
    return float(value)


def exercise_clock(trace: dict, run_id: int) -> None:
    """The hierarchical-allreduce report's simulated clock (``labs.exercises.hierarchical_allreduce.exercise.trace``):
    the learner's messages of one case replayed on both targets, as run and scaled up, beside a
    flat ring and the reference, and the time the router saw the case take here."""
    if trace.get("kind") != "clock":
        return
    try:
        sizes = []
        for at in trace["at"][:2]:
            targets = {key: {name: _seconds(at["targets"][key].get(name)) for name in CLOCK_STYLE}
                       for key in TARGETS if key in at["targets"]}
            sizes.append({"size_bytes": int(at["size_bytes"]), "targets": targets})
        cpu = _seconds(trace.get("cpu_s"))
        nodes = [[int(r) for r in ranks] for ranks in trace["nodes"]][:16]
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        st.caption(t("topology.ex_unavailable"))
        return
    names = {**{key: t(f"topology.target.{key}") for key in TARGETS},
             **{name: t(f"topology.ex_{name}") for name in CLOCK_STYLE}, "us": t("topology.ex_us"),
             "hardware": t("topology.ex_hardware")}
    st.markdown(f"**{t('topology.ex_title')}**")
    st.markdown(":material/visibility: " + t("topology.ex_look"))
    st.caption(t("topology.ex_map", nodes=" ".join(str(r) for r in nodes)))
    for i, at in enumerate(sizes):
        st.markdown(t("topology.ex_size_run" if i == 0 else "topology.ex_size_scaled", size=size_text(at["size_bytes"])))
        chart(clock_figure(at, names, lang()), key=f"ex_clock_{run_id}_{i}", caption=t("topology.ex_alt"))
        for key, row in at["targets"].items():
            yours, flat = row.get("yours"), row.get("flat")
            if yours and flat:
                st.markdown("- " + t("topology.ex_verdict", target=names[key], yours=num(yours * 1e6, ".1f"),
                                      flat=num(flat * 1e6, ".1f"), times=num(flat / yours, ".2f")))
    if cpu is not None:
        st.caption(t("topology.ex_cpu", ms=num(cpu * 1e3, ".2f")))
