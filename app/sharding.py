"""Sharding on the page: the lab's ledger per rank and strategy, and the lessons' calculator.

The figures are plain functions (data in, figure out; labels come in already
translated) in the palette of ``app.charts``: one colour per part of the
model state (``charts.MEMORY``), communication vermillion, a model's
prediction black. `show` draws a finished sharding run (``LabRun.result``,
the numbers the processes measured); `calculator` is the lesson widget
``sharding_calculator``. Both read ``labs.model``'s one formula.
"""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from academy.i18n import DEFAULT_LANG, number_marks
from app import calculators as calc
from app import charts
from app.ui import labeler, t
from app.widgets import chart, lang, num
from labs.model import STRATEGIES

PARTS = {"params": "weights", "grads": "grads", "optimizer": "optimizer_state"}  # lab part -> MEMORY colour
MB = 1e6


def _marks(fig: go.Figure, language: str) -> go.Figure:
    decimal, group = number_marks(language)
    fig.update_layout(separators=decimal + group, template=charts.TEMPLATE)
    return fig


def _tick(names: dict[str, str], strategy: str, rank: int) -> str:
    """The x label of one (strategy, rank): two short lines, so that 16 bars still read."""
    return f"{names[strategy]}<br>{names['rank']} {rank}"


def _with_table(fig: go.Figure) -> go.Figure:
    """The figure's text alternative (``charts.table`` reads ``layout.meta``): the traces'
    numbers by bar, with each two-line tick label on one line."""
    traces = [tr for tr in fig.data if tr.name]
    keys = list(traces[0].x) if traces else []
    rows = [[x.replace("<br>", " · "), *(float(tr.y[i]) for tr in traces)] for i, x in enumerate(keys)]
    fig.update_layout(meta={"table": {"columns": ["", *(tr.name for tr in traces)], "rows": rows}})
    return fig


def ledger_figure(ledger: dict, *, names: dict[str, str], language: str = DEFAULT_LANG) -> go.Figure:
    """Stacked bars of MB per rank and strategy: measured (solid) beside predicted (hatched).

    ``ledger``: the summary's ``strategies`` (``{strategy: {"ranks": [...]}}``);
    ``names``: a label for each strategy, each part, "measured", "predicted",
    "rank", "mb" and "series" (``{part}`` and ``{kind}`` in one legend entry).
    Each bar is drawn from its own base, so measured and predicted stand side
    by side at every (strategy, rank).
    """
    xs = [_tick(names, s, r["rank"]) for s in STRATEGIES if s in ledger for r in ledger[s]["ranks"]]
    rows = [r for s in STRATEGIES if s in ledger for r in ledger[s]["ranks"]]
    fig = go.Figure()
    for kind, pattern in (("measured", ""), ("predicted", "/")):
        base = [0.0] * len(rows)
        for part, colour in PARTS.items():
            ys = [r[kind][part] / MB for r in rows]
            series = names["series"].format(part=names[part], kind=names[kind])
            fig.add_bar(name=series, x=xs, y=ys, base=list(base), offsetgroup=kind,
                        legendgroup=kind, marker={"color": charts.MEMORY[colour], "pattern": {"shape": pattern},
                                                  "line": {"color": charts.PAPER, "width": 1}},
                        hovertemplate="%{x}<br>" + series + ": %{y:.3f} MB<extra></extra>")
            base = [b + y for b, y in zip(base, ys, strict=True)]
    fig.update_layout(barmode="group", height=460, yaxis_title=names["mb"], margin={"t": 10},
                      legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
                      xaxis={"tickangle": 0})
    return _marks(_with_table(fig), language)


def wire_figure(ledger: dict, predicted: dict[str, float], *, names: dict[str, str],
                language: str = DEFAULT_LANG) -> go.Figure:
    """MB each rank sent per step (bars) beside the ring model's figure (black markers)."""
    xs, sent, model = [], [], []
    for s in STRATEGIES:
        for r in ledger.get(s, {}).get("ranks", []):
            xs.append(_tick(names, s, r["rank"]))
            sent.append(r["wire_bytes_per_step"] / MB)
            model.append(predicted[s] / MB)
    fig = go.Figure()
    fig.add_bar(name=names["sent"], x=xs, y=sent, marker={"color": charts.COMMUNICATION},
                hovertemplate="%{x}: %{y:.3f} MB<extra></extra>")
    fig.add_scatter(name=names["model"], x=xs, y=model, mode="markers",
                    marker={"color": charts.MODEL, "symbol": "line-ew", "size": 18, "line": {"width": 3,
                                                                                           "color": charts.MODEL}})
    fig.update_layout(height=320, yaxis_title=names["mb"], margin={"t": 10},
                      legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
                      xaxis={"tickangle": 0})
    return _marks(_with_table(fig), language)


def calculator_figure(totals: dict[str, calc.Memory], devices: dict[str, float], *, names: dict[str, str],
                      language: str = DEFAULT_LANG) -> go.Figure:
    """GB per device under each strategy, stacked by part, with a dashed line per device size."""
    xs = [names[s] for s in totals]
    fig = go.Figure()
    for part, field in (("weights", "weights"), ("grads", "grads"), ("optimizer_state", "optimizer")):
        fig.add_bar(name=names[part], x=xs, y=[getattr(m, field) / calc.GB for m in totals.values()],
                    marker={"color": charts.MEMORY[part], "line": {"color": charts.PAPER, "width": 1}},
                    hovertemplate="%{x}: %{y:.1f} GB<extra>" + names[part] + "</extra>")
    for name, capacity in devices.items():
        fig.add_shape(type="line", xref="paper", x0=0, x1=1, y0=capacity, y1=capacity,
                      line={"color": charts.INK, "dash": "dash", "width": 1.5})
        fig.add_annotation(xref="paper", x=1, y=capacity, text=name, showarrow=False, xanchor="right",
                           yanchor="bottom", font={"size": 12, "color": charts.INK}, bgcolor=charts.PAPER)
    top = max([*(m.total / calc.GB for m in totals.values()), *devices.values()]) * 1.08
    fig.update_layout(barmode="stack", height=360, yaxis={"title": names["gb"], "range": [0, top]},
                      xaxis_title=names["strategy"], margin={"t": 10}, legend={"traceorder": "normal"})
    return _marks(fig, language)


def strategy_names() -> dict[str, str]:
    return {s: t(f"sharding.strategy.{s}") for s in STRATEGIES}


def _names() -> dict[str, str]:
    return {**strategy_names(), **{p: t(f"sharding.part.{p}") for p in PARTS},
            **{k: t(f"sharding.{k}") for k in ("measured", "predicted", "rank", "mb", "sent", "model")},
            "series": t("sharding.series", part="{part}", kind="{kind}")}


def show(run) -> None:
    """A finished sharding run: the checks, the ledger, the wire bytes."""
    s = run.result["summary"]
    ledger, n = s["strategies"], s["world_size"]
    worst = max(s["ledger_error"].values())
    (st.success if s["within_ledger_tolerance"] else st.error)(
        t("sharding.check_ledger", worst=worst * 100, tol=s["ledger_tolerance"] * 100))
    if s.get("ordered") is not None:
        (st.success if s["ordered"] else st.warning)(t("sharding.check_order" if s["ordered"] else
                                                       "sharding.check_order_bad", count=n))
    diff = max(v["max_abs_diff_vs_ddp"] for v in ledger.values())
    (st.success if s["equal_weights"] else st.error)(
        t("sharding.check_weights", diff=diff, tol=s["tolerance"], moved=s.get("max_abs_update_ddp") or 0.0))
    names = _names()
    st.markdown(f"**{t('sharding.ledger_title', count=n)}**")
    chart(ledger_figure(ledger, names=names, language=lang()), key=f"ledger_{run.id}",
          caption=t("sharding.ledger_caption"))
    st.markdown(f"**{t('sharding.wire_title')}**")
    chart(wire_figure(ledger, s["predicted_wire_bytes_per_step"], names=names, language=lang()),
          key=f"wire_{run.id}", caption=t("sharding.wire_caption"))
    peaks = [r["peak"] for v in ledger.values() for r in v["ranks"] if r["peak"] is not None]
    st.caption(t("sharding.peak", mb=max(peaks) / MB) if peaks else t("sharding.no_peak"))


def rows(summary: dict) -> list[dict]:
    """The ledger as CSV rows: one per strategy and rank."""
    out = []
    for name, v in summary.get("strategies", {}).items():
        for r in v["ranks"]:
            out.append({"strategy": name, "rank": r["rank"],
                        **{f"measured_{k}": b for k, b in r["measured"].items()},
                        **{f"predicted_{k}": b for k, b in r["predicted"].items()},
                        "peak": r["peak"], "wire_bytes_per_step": r["wire_bytes_per_step"]})
    return out


def calculator() -> None:
    """The lesson widget: what each strategy leaves on one device, for a model and a device count."""
    st.subheader(t("sharding.calc.title"))
    c1, c2, c3, c4 = st.columns(4)
    billions = c1.number_input(t("widgets.memory.params"), 0.01, 2000.0, 7.0, step=0.5, key="shard_params")
    precision = c2.selectbox(t("widgets.memory.precision"), list(calc.PRECISIONS), index=1,
                             format_func=labeler("widgets.precision."), key="shard_prec")
    optimizer = c3.selectbox(t("widgets.memory.optimizer"), list(calc.OPTIMIZERS), index=2,
                             format_func=labeler("widgets.optimizer."), key="shard_opt")
    n = int(c4.number_input(t("sharding.calc.devices"), 1, 4096, 8, key="shard_n"))
    totals = {s: calc.memory_per_device(billions * 1e9, precision, optimizer, strategy=s, world_size=n)
              for s in STRATEGIES}
    names = {**strategy_names(), **{p: t(f"widgets.memory.{p}") for p in ("weights", "grads", "optimizer_state")},
             "gb": t("widgets.memory.gb"), "strategy": t("sharding.calc.strategy")}
    chart(calculator_figure(totals, calc.DEVICES, names=names, language=lang()), key="shard_chart",
          caption=t("sharding.calc.caption", count=n))
    for s, mem in totals.items():
        fitting = [name for name, gb in calc.DEVICES.items() if calc.fits(mem, gb)]
        st.write(t("sharding.calc.line", strategy=names[s], gb=num(mem.total / calc.GB, ",.1f"),
                   fits=", ".join(fitting) if fitting else t("sharding.calc.none")))
    st.caption(t("sharding.calc.note"))

