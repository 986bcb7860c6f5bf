"""Interactive lesson pieces: Streamlit widgets over ``app.calculators``."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from academy import i18n
from app import calculators as calc
from app import charts, charts_ring
from app.ui import labeler, t

# No modebar: its tooltips are English on every page and it covered the charts' titles
# (journey review m2, m10); dragging still zooms and a double click resets.
CHART_CONFIG = {"displayModeBar": False}


def lang() -> str:
    """The page's language, as ``app.ui.t`` reads it."""
    return st.session_state.get("lang", i18n.DEFAULT_LANG)


def num(value: float, spec: str = "") -> str:
    """A number we print outside a catalog string, with the learner's marks ("1,5" in Dutch)."""
    return i18n.format_number(value, lang(), spec)


def ring_labels() -> dict[str, str]:
    keys = ["rank", "chunk", "holds", "start", "play", "pause", "step", "reduce-scatter", "all-gather",
            "phase", "sends"]
    return {k: t(f"widgets.ring.{k}") for k in keys}


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return num(value, ".4g")
    return str(value)


def chart(fig, *, key: str, caption: str | None = None, where=None) -> None:
    """The one way a page draws a figure: with Streamlit's theme off (our palette and
    contrast hold as ``app.charts`` set them), then its text alternative: ``caption``
    (what the chart shows, in words) and the same numbers as a table (``charts.table``),
    a real HTML table a screen reader can walk."""
    where = where or st
    where.plotly_chart(fig, key=key, theme=None, config=CHART_CONFIG)
    if caption:
        where.caption(caption)
    data = charts.table(fig)
    with where.expander(t("widgets.chart.table")):
        columns = data["columns"]  # every one named: a header a screen reader can read (axe empty-table-header)
        st.table(pd.DataFrame([[_cell(v) for v in row] for row in data["rows"]], columns=columns))


def memory_calculator() -> None:
    st.subheader(t("widgets.memory.title"))
    c1, c2, c3 = st.columns(3)
    billions = c1.number_input(t("widgets.memory.params"), 0.01, 2000.0, 7.0, step=0.5, key="mem_params")
    precision = c2.selectbox(t("widgets.memory.precision"), list(calc.PRECISIONS),
                             format_func=labeler("widgets.precision."), key="mem_prec")
    optimizer = c3.selectbox(t("widgets.memory.optimizer"), list(calc.OPTIMIZERS), index=2,
                             format_func=labeler("widgets.optimizer."), key="mem_opt")
    mem = calc.memory_per_device(billions * 1e9, precision, optimizer)
    parts = {"weights": mem.weights / calc.GB, "grads": mem.grads / calc.GB, "optimizer_state": mem.optimizer / calc.GB}
    fig = charts.memory_figure(parts, calc.DEVICES, names={p: t(f"widgets.memory.{p}") for p in parts},
                               gb=t("widgets.memory.gb"), parts_title=t("widgets.memory.part"), lang=lang())
    chart(fig, key="mem_chart")
    st.write(t("widgets.memory.total", total=mem.total / calc.GB))
    fitting = [name for name, gb in calc.DEVICES.items() if calc.fits(mem, gb)]
    if fitting:
        st.success(t("widgets.memory.fits", devices=", ".join(fitting)))
    else:
        st.error(t("widgets.memory.fits_none"))
    largest = max(calc.DEVICES, key=calc.DEVICES.get)
    st.caption(t("widgets.memory.max_params", device=largest,
                 billions=calc.max_params(calc.DEVICES[largest], precision, optimizer) / 1e9))


# The ring calculator's device counts: every one up to 8, then steps that double every two
# (a linear slider from 2 to 1024 could not be dragged to 3, 4 or 5; journey review m4).
RING_SIZES = (2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)


def ring_traffic() -> None:
    st.subheader(t("widgets.ring_traffic.title"))
    c1, c2 = st.columns(2)
    n = c1.select_slider(t("widgets.ring_traffic.world_size"), RING_SIZES, value=8, key="rt_n")
    mb = c2.number_input(t("widgets.ring_traffic.buffer"), 0.001, 1e6, 100.0, key="rt_mb")
    traffic = calc.ring_traffic(n, mb * 1e6)
    m1, m2, m3, m4 = st.columns(4)
    m1.metric(t("widgets.ring_traffic.steps"), traffic.steps)
    m2.metric(t("widgets.ring_traffic.chunk"), f"{num(traffic.chunk_bytes / 1e6, '.3g')} MB")
    m3.metric(t("widgets.ring_traffic.sent"), f"{num(traffic.sent_per_device / 1e6, '.4g')} MB")
    m4.metric(t("widgets.ring_traffic.total"), f"{num(traffic.total_on_links / 1e6, '.4g')} MB")
    xs = [k for k in (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if k <= max(n, 16)]
    fig = charts.ring_traffic_figure(xs, [calc.ring_traffic(k, mb * 1e6).sent_per_device / 1e6 for k in xs],
                                     buffer=mb, labels={"sent": t("widgets.ring_traffic.sent"),
                                                        "devices": t("widgets.ring_traffic.devices_axis"),
                                                        "per_device": t("widgets.ring_traffic.per_device_axis")},
                                     lang=lang())
    chart(fig, key="rt_chart")
    st.caption(t("widgets.ring_traffic.note"))


def scaling_explorer(measured: list[tuple[int, float]] | None = None) -> None:
    """``measured``: (world size, scaling efficiency) from the learner's own DDP runs.

    The defaults show something (journey review m3): a 1.3-billion-parameter model with bf16
    gradients on NVLink scales perfectly within a node and loses about 40 % once the ring
    crosses nodes (`calculators.link_for`); throughput is drawn on log-log axes beside linear
    scaling, on which linear scaling is a straight line, not an exponential curve."""
    st.subheader(t("widgets.scaling.title"))
    c1, c2, c3 = st.columns(3)
    millions = c1.number_input(t("widgets.scaling.params"), 0.1, 100000.0, 1300.0, key="sc_params")
    link = c2.selectbox(t("widgets.scaling.link"), list(calc.LINKS), index=2,
                        format_func=labeler("widgets.links."), key="sc_link")
    bytes_per_grad = c3.selectbox(t("widgets.scaling.precision"), [2, 4],
                                  format_func=lambda b: "fp32" if b == 4 else "bf16", key="sc_prec")
    c4, c5, c6 = st.columns(3)
    compute_ms = c4.number_input(t("widgets.scaling.compute"), 1.0, 100000.0, 100.0, key="sc_compute")
    batch = c5.number_input(t("widgets.scaling.batch"), 1, 100000, 8, key="sc_batch")
    overlap = c6.slider(t("widgets.scaling.overlap"), 0.0, 1.0, 0.5, key="sc_overlap")
    sizes = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    points = calc.scaling(params=millions * 1e6, bytes_per_grad=bytes_per_grad, link=link,
                          compute_time=compute_ms / 1e3, batch_per_device=int(batch),
                          overlap=overlap, world_sizes=sizes)
    if link in calc.WITHIN_NODE:
        st.caption(t("widgets.scaling.nodes", link=t(f"widgets.links.{link}"), count=calc.NODE_SIZE,
                     network=t(f"widgets.links.{calc.BETWEEN_NODES}")))
    left, right = st.columns(2)
    names = {"model": t("widgets.scaling.model"), "yours": t("widgets.scaling.yours"),
             "devices": t("widgets.scaling.devices")}
    tp = charts.scaling_figure(sizes, [p.throughput for p in points], lang=lang(), log_y=True,
                               ideal=[points[0].throughput * n for n in sizes],
                               labels={**names, "y": t("widgets.scaling.throughput"),
                                       "ideal": t("widgets.scaling.ideal")})
    chart(tp, key="sc_tp", where=left)
    eff = charts.scaling_figure(sizes, [p.efficiency for p in points], measured=measured, y_range=[0, 1.05],
                                lang=lang(), labels={**names, "y": t("widgets.scaling.efficiency")})
    chart(eff, key="sc_eff", where=right)
    if measured:
        st.caption(t("widgets.scaling.yours_note"))


def ring_diagram() -> None:
    st.subheader(t("widgets.ring.title"))
    n = st.slider(t("widgets.ring.world_size"), 2, 8, 4, key="rd_n")
    chart(charts_ring.ring_figure(n, calc.ring_schedule(n), labels=ring_labels(), lang=lang()), key="rd_chart",
          caption=t("widgets.ring.alt"))
