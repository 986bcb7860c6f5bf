"""Interactive lesson pieces: Streamlit widgets over ``app.calculators``."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from academy import i18n
from app import calculators as calc
from app.charts import ring_figure
from app.ui import labeler, t


def lang() -> str:
    """The page's language, as ``app.ui.t`` reads it."""
    return st.session_state.get("lang", i18n.DEFAULT_LANG)


def separators() -> str:
    """plotly's ``separators`` (decimal mark, then grouping mark) for the page's language."""
    decimal, group = i18n.number_marks(lang())
    return decimal + group


def num(value: float, spec: str = "") -> str:
    """A number we print outside a catalog string, with the learner's marks ("1,5" in Dutch)."""
    return i18n.format_number(value, lang(), spec)


def ring_labels() -> dict[str, str]:
    keys = ["rank", "chunk", "holds", "start", "play", "pause", "step", "reduce-scatter", "all-gather"]
    return {k: t(f"widgets.ring.{k}") for k in keys}


def memory_calculator() -> None:
    st.subheader(t("widgets.memory.title"))
    c1, c2, c3 = st.columns(3)
    billions = c1.number_input(t("widgets.memory.params"), 0.01, 2000.0, 7.0, step=0.5, key="mem_params")
    precision = c2.selectbox(t("widgets.memory.precision"), list(calc.PRECISIONS),
                             format_func=labeler("widgets.precision."), key="mem_prec")
    optimizer = c3.selectbox(t("widgets.memory.optimizer"), list(calc.OPTIMIZERS), index=2,
                             format_func=labeler("widgets.optimizer."), key="mem_opt")
    mem = calc.memory_per_device(billions * 1e9, precision, optimizer)
    fig = go.Figure()
    for part, value in (("weights", mem.weights), ("grads", mem.grads), ("optimizer_state", mem.optimizer)):
        fig.add_bar(name=t(f"widgets.memory.{part}"), x=[value / calc.GB], y=[""], orientation="h")
    for name, gb in calc.DEVICES.items():
        fig.add_vline(x=gb, line_dash="dash", annotation_text=name, annotation_position="top")
    fig.update_layout(separators=separators(), barmode="stack", height=260, xaxis_title=t("widgets.memory.gb"),
                      margin={"t": 40, "b": 40}, legend={"orientation": "h"})
    st.plotly_chart(fig, key="mem_chart")
    st.write(t("widgets.memory.total", total=mem.total / calc.GB))
    fitting = [name for name, gb in calc.DEVICES.items() if calc.fits(mem, gb)]
    if fitting:
        st.success(t("widgets.memory.fits", devices=", ".join(fitting)))
    else:
        st.error(t("widgets.memory.fits_none"))
    largest = max(calc.DEVICES, key=calc.DEVICES.get)
    st.caption(t("widgets.memory.max_params", device=largest,
                 billions=calc.max_params(calc.DEVICES[largest], precision, optimizer) / 1e9))


def ring_traffic() -> None:
    st.subheader(t("widgets.ring_traffic.title"))
    c1, c2 = st.columns(2)
    n = c1.slider(t("widgets.ring_traffic.world_size"), 2, 1024, 8, key="rt_n")
    mb = c2.number_input(t("widgets.ring_traffic.buffer"), 0.001, 1e6, 100.0, key="rt_mb")
    traffic = calc.ring_traffic(n, mb * 1e6)
    m1, m2, m3, m4 = st.columns(4)
    m1.metric(t("widgets.ring_traffic.steps"), traffic.steps)
    m2.metric(t("widgets.ring_traffic.chunk"), f"{num(traffic.chunk_bytes / 1e6, '.3g')} MB")
    m3.metric(t("widgets.ring_traffic.sent"), f"{num(traffic.sent_per_device / 1e6, '.4g')} MB")
    m4.metric(t("widgets.ring_traffic.total"), f"{num(traffic.total_on_links / 1e6, '.4g')} MB")
    xs = [k for k in (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if k <= max(n, 16)]
    fig = go.Figure(go.Scatter(x=xs, y=[calc.ring_traffic(k, mb * 1e6).sent_per_device / 1e6 for k in xs],
                               mode="lines+markers"))
    fig.add_hline(y=2 * mb, line_dash="dot", annotation_text="2S")
    fig.update_layout(separators=separators(), height=280, xaxis_type="log", xaxis_title=t("widgets.ring_traffic.devices_axis"),
                      yaxis_title=t("widgets.ring_traffic.per_device_axis"), margin={"t": 20})
    st.plotly_chart(fig, key="rt_chart")
    st.caption(t("widgets.ring_traffic.note"))


def scaling_explorer(measured: list[tuple[int, float]] | None = None) -> None:
    """``measured``: (world size, scaling efficiency) from the learner's own DDP runs."""
    st.subheader(t("widgets.scaling.title"))
    c1, c2, c3 = st.columns(3)
    millions = c1.number_input(t("widgets.scaling.params"), 0.1, 100000.0, 25.6, key="sc_params")
    link = c2.selectbox(t("widgets.scaling.link"), list(calc.LINKS), index=2,
                        format_func=labeler("widgets.links."), key="sc_link")
    bytes_per_grad = c3.selectbox(t("widgets.scaling.precision"), [4, 2],
                                  format_func=lambda b: "fp32" if b == 4 else "bf16", key="sc_prec")
    c4, c5, c6 = st.columns(3)
    compute_ms = c4.number_input(t("widgets.scaling.compute"), 1.0, 100000.0, 100.0, key="sc_compute")
    batch = c5.number_input(t("widgets.scaling.batch"), 1, 100000, 32, key="sc_batch")
    overlap = c6.slider(t("widgets.scaling.overlap"), 0.0, 1.0, 0.8, key="sc_overlap")
    sizes = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    points = calc.scaling(params=millions * 1e6, bytes_per_grad=bytes_per_grad, link=link,
                          compute_time=compute_ms / 1e3, batch_per_device=int(batch),
                          overlap=overlap, world_sizes=sizes)
    left, right = st.columns(2)
    tp = go.Figure(go.Scatter(x=sizes, y=[p.throughput for p in points], mode="lines+markers",
                              name=t("widgets.scaling.model")))
    tp.update_layout(separators=separators(), height=320, xaxis_type="log", xaxis_title=t("widgets.scaling.devices"),
                     yaxis_title=t("widgets.scaling.throughput"), margin={"t": 20})
    left.plotly_chart(tp, key="sc_tp")
    eff = go.Figure(go.Scatter(x=sizes, y=[p.efficiency for p in points], mode="lines+markers",
                               name=t("widgets.scaling.model")))
    if measured:
        eff.add_scatter(x=[m[0] for m in measured], y=[m[1] for m in measured], mode="markers",
                        marker={"size": 12, "symbol": "diamond"}, name=t("widgets.scaling.yours"))
    eff.update_layout(separators=separators(), height=320, xaxis_type="log", xaxis_title=t("widgets.scaling.devices"),
                      yaxis_title=t("widgets.scaling.efficiency"), yaxis_range=[0, 1.05], margin={"t": 20})
    right.plotly_chart(eff, key="sc_eff")
    if measured:
        st.caption(t("widgets.scaling.yours_note"))


def ring_diagram() -> None:
    st.subheader(t("widgets.ring.title"))
    n = st.slider(t("widgets.ring.world_size"), 2, 8, 4, key="rd_n")
    st.plotly_chart(ring_figure(n, calc.ring_schedule(n), labels=ring_labels(), lang=lang()), key="rd_chart")
