"""The compression lab on the page: the checks, loss against bytes (Pareto), the table, the loss curves.

The figures are plain functions (data in, figure out; labels come in already
translated) in the palette of ``app.charts``: each strategy its colour, marker
and dash (``charts.STRATEGY_STYLES``), the spread of the seeds a pale band of
its colour. `show` draws a finished run from its summary
(``labs.reports.CompressionSummary``, built by ``labs.compression.lab.summarize``
from what the processes measured); `rows` is its CSV.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
import streamlit as st

from academy.i18n import DEFAULT_LANG
from app import charts
from app.ui import labeler, t
from app.widgets import chart, lang, num
from labs.compression.lab import REFERENCE, STRATEGIES
from labs.reports import CompressionSummary

KB = 1e3
DEFAULT_CURVES = ("fp32", "powersgd_r1", "topk", "topk_ef")  # the contrast the lesson draws


def strategy_names() -> dict[str, str]:
    return {s: t(f"compression.strategy.{s}") for s in STRATEGIES}


def _style(name: str) -> tuple[str, str, str]:
    return charts.STRATEGY_STYLES.get(name, (charts.INK, "circle", "solid"))


def pareto_figure(s: CompressionSummary, *, names: dict[str, str], language: str = DEFAULT_LANG) -> go.Figure:
    """The final loss (median of the seeds, whiskers to the lowest and highest) against the KB
    each rank sent per step on a ring (log x), a mark per strategy; a dashed line joins the front.

    ``names``: each strategy's label, "front", "x" and "y" (the axes)."""
    fig = go.Figure()
    rows = []
    for name, st_ in s.strategies.items():
        colour, symbol, _dash = _style(name)
        x, f = st_.sent_per_step / KB, st_.final
        fig.add_scatter(x=[x], y=[f.median], mode="markers", name=names[name],
                        marker={"color": colour, "symbol": symbol, "size": 13, "line": {"color": charts.INK, "width": 1}},
                        error_y={"type": "data", "symmetric": False, "array": [f.max - f.median],
                                 "arrayminus": [f.median - f.min], "color": colour, "thickness": 2},
                        hovertemplate=names[name] + ": %{x:.3g} KB, %{y:.4f}<extra></extra>")
        rows.append([names[name], x, f.median, f.min, f.max])
    front = [s.strategies[n] for n in s.pareto if n in s.strategies]
    if len(front) > 1:
        fig.add_scatter(x=[p.sent_per_step / KB for p in front], y=[p.final.median for p in front], mode="lines",
                        name=names["front"], line={"color": charts.INK, "dash": "dash", "width": 1},
                        hoverinfo="skip")
    fig.update_layout(height=480, xaxis={"type": "log", "title": names["x"], "tickvals": log_ticks(
        [st_.sent_per_step / KB for st_ in s.strategies.values()]), "tickformat": "~g"}, yaxis_title=names["y"],
                      margin={"t": 10}, legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0,
                                                "entrywidth": 200, "font": {"size": 12}})
    fig.update_layout(meta={"table": {"columns": ["", names["x"], names["y"], "min", "max"], "rows": rows}})
    return charts.with_marks(fig, language)


def log_ticks(values: list[float]) -> list[float]:
    """1, 2 and 5 times each power of ten from below the smallest value to above the largest:
    a log axis labelled with round numbers only."""
    positive = [v for v in values if v > 0] or [1.0]
    low, high = math.floor(math.log10(min(positive))), math.ceil(math.log10(max(positive)))
    ticks = [m * 10.0 ** e for e in range(low, high + 1) for m in (1, 2, 5)]
    inside = [x for x in ticks if min(positive) / 2 <= x <= max(positive) * 2]
    return inside or ticks


def curves_figure(s: CompressionSummary, chosen: list[str], *, names: dict[str, str],
                  language: str = DEFAULT_LANG) -> go.Figure:
    """The evaluation loss over the steps: a line per chosen strategy (the seeds' median) over a
    pale band from the lowest to the highest seed. ``names``: labels, "step" and "loss"."""
    fig = go.Figure()
    shown = [n for n in chosen if n in s.strategies]
    xs = list(s.curve_steps)
    for name in shown:
        colour, _symbol, dash = _style(name)
        curve = s.strategies[name].curve
        fig.add_scatter(x=xs, y=[b.max for b in curve], mode="lines", line={"width": 0, "color": colour},
                        showlegend=False, hoverinfo="skip")
        fig.add_scatter(x=xs, y=[b.min for b in curve], mode="lines", line={"width": 0, "color": colour},
                        fill="tonexty", fillcolor=charts.band(colour), showlegend=False, hoverinfo="skip")
        fig.add_scatter(x=xs, y=[b.median for b in curve], mode="lines", name=names[name],
                        line={"color": colour, "dash": dash, "width": 2.5},
                        hovertemplate=names[name] + ": %{y:.4f}<extra>%{x}</extra>")
    fig.update_layout(height=380, xaxis_title=names["step"], yaxis_title=names["loss"], margin={"t": 10},
                      legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0,
                              "traceorder": "normal"})  # plotly reverses it when traces fill
    rows = [[x, *(s.strategies[n].curve[i].median for n in shown)] for i, x in enumerate(xs)]
    fig.update_layout(meta={"table": {"columns": [names["step"], *(names[n] for n in shown)], "rows": rows}})
    return charts.with_marks(fig, language)


def _signed(value: float, digits: int) -> str:
    """A gap with its sign, in the learner's marks: "+0.012"; one that rounds to zero is "+0.000",
    never "-0.000"."""
    shown = round(value, digits) or 0.0  # -0.0 is falsy: plain zero
    return num(shown, f"+.{digits}f")


def _kb(value: float) -> str:
    return f"{num(value / KB, '.3g')} KB"


def compact(s: CompressionSummary, names: dict[str, str]) -> list[dict[str, str]]:
    """The table beside the plot, narrow enough for half the page: what each strategy sent per
    step, its final loss (median of the seeds) and its mean gap to fp32; `table` has the rest."""
    col = {k: t(f"compression.short.{k}") for k in ("strategy", "sent", "loss", "gap")}
    return [{col["strategy"]: names[name], col["sent"]: _kb(v.sent_per_step),
             col["loss"]: num(v.final.median, ".3f"),
             col["gap"]: t("compression.reference") if v.gap is None else _signed(v.gap.mean, 3)}
            for name, v in s.strategies.items()]


def table(s: CompressionSummary, names: dict[str, str]) -> list[dict[str, str]]:
    """Every figure of each strategy, a row each, in the learner's words and number marks."""
    col = {k: t(f"compression.col.{k}") for k in ("strategy", "measured", "formula", "ratio", "sent", "loss",
                                                   "gap", "time")}
    out = []
    for name, st_ in s.strategies.items():
        gap = t("compression.reference") if st_.gap is None else _signed(st_.gap.mean, 4) + (
            "" if st_.gap.half_width is None else f" ± {num(st_.gap.half_width, '.4f')}")
        time_ = st_.step_time
        out.append({col["strategy"]: names[name], col["measured"]: _kb(st_.bytes_per_step),
                    col["formula"]: _kb(st_.formula_bytes),
                    col["ratio"]: "—" if st_.ratio is None else num(st_.ratio, ".3g"),
                    col["sent"]: _kb(st_.sent_per_step),
                    col["loss"]: f"{num(st_.final.median, '.4f')} [{num(st_.final.min, '.4f')}, "
                                 f"{num(st_.final.max, '.4f')}]",
                    col["gap"]: gap,
                    col["time"]: f"{num(time_.median_ms, '.2f')} [{num(time_.q1_ms, '.2f')}, "
                                 f"{num(time_.q3_ms, '.2f')}]"})
    return out


def show(run, s: CompressionSummary) -> None:
    """A finished compression run: the two checks, loss against bytes with the table, the curves."""
    names = strategy_names()
    n, seeds = s.world_size, len(s.seeds)
    worst = max(v.formula_error for v in s.strategies.values())
    (st.success if s.within_formula else st.error)(t(
        "compression.check_formula" if s.within_formula else "compression.check_formula_bad",
        worst=worst * 100, tol=s.formula_tolerance * 100))
    equal = all(v.replicas_equal for v in s.strategies.values())
    (st.success if equal else st.error)(t("compression.check_replicas" if equal else "compression.check_replicas_bad"))
    st.markdown(f"**{t('compression.pareto_title', count=n, seeds=seeds)}**")
    left, right = st.columns(2)
    labels = {**names, "front": t("compression.front"), "x": t("compression.x_axis"), "y": t("compression.y_axis")}
    chart(pareto_figure(s, names=labels, language=lang()), key=f"pareto_{run.id}",
          caption=t("compression.pareto_caption"), where=left)
    right.markdown(f"**{t('compression.table_title')}**")
    rows = compact(s, names)
    right.dataframe(rows, hide_index=True, column_config={  # narrow: the strategy's name gets the room
        c: st.column_config.TextColumn(width="medium" if i == 0 else "small") for i, c in enumerate(rows[0])})
    right.caption(t("compression.short.caption"))
    st.markdown(f"**{t('compression.table_full')}**")
    st.dataframe(table(s, names), hide_index=True)
    st.caption(t("compression.table_caption", seeds=seeds))
    powersgd = [v for k, v in s.strategies.items() if k.startswith("powersgd")]
    if powersgd:
        dense = powersgd[0].dense_steps
        if dense:
            st.caption(t("compression.dense_steps", count=dense, kb=num(s.gradient_bytes / KB, ".3g")))
        if s.powersgd_chain == "serial":
            st.info(t("compression.gloo_serial", count=s.buckets), icon=":material/info:")
    st.markdown(f"**{t('compression.curves_title')}**")
    chosen = st.multiselect(t("compression.curves_choice"), list(s.strategies),
                            default=[k for k in DEFAULT_CURVES if k in s.strategies] or [REFERENCE],
                            # the language in the key: a multiselect keeps its choices by their labels
                            format_func=labeler("compression.strategy."), key=f"curves_{run.id}_{lang()}",
                            placeholder=t("labs.choose_options"))
    chart(curves_figure(s, chosen, names={**names, "step": t("compression.step_axis"),
                                          "loss": t("compression.loss_axis")}, language=lang()),
          key=f"curves_{run.id}_{'_'.join(chosen)}", caption=t("compression.curves_caption"))


def rows(summary: dict) -> list[dict]:
    """The table as CSV rows, from the summary as stored (the download's): one per strategy."""
    out = []
    for name, v in (summary.get("strategies") or {}).items():
        gap = v.get("gap") or {}
        out.append({"strategy": name, "bytes_per_step": v.get("bytes_per_step"),
                    "formula_bytes": v.get("formula_bytes"), "sent_per_step": v.get("sent_per_step"),
                    "final_loss_median": (v.get("final") or {}).get("median"),
                    "gap_mean": gap.get("mean"), "gap_ci95_half_width": gap.get("half_width"),
                    "step_ms_median": (v.get("step_time") or {}).get("median_ms")})
    return out
