"""The compression lab on the Labs page, in every language: checks, loss against bytes, the table, the curves."""

from __future__ import annotations

import json

import pytest

from academy import i18n
from academy.db import session_scope
from academy.models import LabRun
from app import charts
from app import compression as page
from labs import reports
from labs.compression import lab as compression
from labs.launch import run_lab
from labs.params import Run
from tests.apptest import open_page
from tests.factories import finished_run
from tests.runquestions import asks_its_questions
from tests.test_charts import colours, font_colours

LANGS = sorted(i18n.languages())
NAMES = {s: s for s in compression.STRATEGIES} | {"front": "front", "x": "KB", "y": "loss", "step": "step",
                                                  "loss": "loss"}


@pytest.fixture(scope="module")
def result() -> dict:
    """One real 2-rank run of every strategy (2 seeds, 20 steps), as the worker stores it (JSON)."""
    outcome = run_lab(Run(world_size=2, timeout=300, hang_timeout=120), compression.Params(steps=20, seeds=2))
    assert outcome.ok, outcome
    return json.loads(json.dumps(outcome.to_dict()))


def summary(result: dict) -> reports.CompressionSummary:
    return reports.read("compression", result).summary


def test_the_figures_draw_the_run_in_the_palette_with_their_numbers(result):
    s = summary(result)
    pareto = page.pareto_figure(s, names=NAMES)
    curves = page.curves_figure(s, ["fp32", "topk", "topk_ef"], names=NAMES)
    for fig in (pareto, curves):
        stray = [(where, c) for where, c in colours(fig.to_plotly_json()) if c.lower() not in charts.palette()]
        assert not stray, stray
        low = [c for _w, c, bg in font_colours(fig.to_plotly_json(), charts.PAPER) if charts.contrast(c, bg) < 4.5]
        assert not low, low
    marks = [tr for tr in pareto.data if tr.mode == "markers"]
    assert len(marks) == 8 and len({tr.marker.symbol for tr in marks}) == 8  # not by colour alone
    front = next(tr for tr in pareto.data if tr.name == "front")
    assert len(front.x) == len(s.pareto)
    table = charts.table(pareto)  # the text alternative: a row per strategy, the plotted numbers
    row = next(r for r in table["rows"] if r[0] == "topk_ef")
    assert row[1] == pytest.approx(s.strategies["topk_ef"].sent_per_step / 1e3)
    assert row[2:] == [s.strategies["topk_ef"].final.median, s.strategies["topk_ef"].final.min,
                       s.strategies["topk_ef"].final.max]
    bands = [tr for tr in curves.data if tr.fill == "tonexty"]
    assert len(bands) == 3 and bands[0].fillcolor == charts.band(charts.STRATEGY_STYLES["fp32"][0])
    lines = charts.table(curves)
    assert lines["columns"] == ["step", "fp32", "topk", "topk_ef"] and len(lines["rows"]) == len(s.curve_steps)


def test_the_run_gives_questions_built_from_its_own_figures(result):
    asks_its_questions("compression", result)  # the recorded run of tests/fixtures/runs is still what the lab writes


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.usefixtures("app_db")
def test_the_labs_page_draws_a_finished_run(result, lang):
    run_id = finished_run("compression", result, params={"world_size": 2, **result["params"]},
                          machine=result["machine"])
    at = open_page("labs", lang, state={"lab_run_id": run_id}, lab="compression")
    assert not at.exception, at.exception
    t = lambda key, **v: i18n.t(key, lang, **v)  # noqa: E731
    s = summary(result)
    infos = [i.value for i in at.info]
    assert infos[0] == t("labs.look.compression")
    assert t("compression.gloo_serial", count=1) in infos  # why PowerSGD waits on gloo
    worst = max(v.formula_error for v in s.strategies.values())
    successes = [m.value for m in at.success]
    assert t("compression.check_formula", worst=worst * 100, tol=1) in successes
    assert t("compression.check_replicas") in successes
    assert len(at.get("plotly_chart")) == 2  # loss against bytes, the curves
    beside, full = at.dataframe[0].value, at.dataframe[1].value  # beside the plot, then every figure
    assert list(beside.columns) == [t(f"compression.short.{c}") for c in ("strategy", "sent", "loss", "gap")]
    assert list(full.iloc[:, 0]) == [t(f"compression.strategy.{k}") for k in compression.STRATEGIES]
    assert t("compression.col.gap") in full.columns and t("compression.reference") in set(full.iloc[:, 6])
    captions = [c.value for c in at.caption]
    assert t("compression.table_caption", seeds=2) in captions
    assert t("compression.dense_steps", count=2, kb=i18n.format_number(s.gradient_bytes / 1e3, lang, ".3g")) \
        in captions
    curves = next(m for m in at.multiselect if m.label == t("compression.curves_choice"))
    curves.set_value(["fp16"]).run()
    assert not at.exception, at.exception
    names = [tr.get("name") for tr in json.loads(at.get("plotly_chart")[1].proto.spec)["data"]]
    assert t("compression.strategy.fp16") in names and t("compression.strategy.topk") not in names


@pytest.mark.usefixtures("app_db")
def test_the_form_offers_the_strategies_and_refuses_an_empty_list():
    from sqlmodel import select

    at = open_page("labs", "nl", lab="compression")
    assert not at.exception, at.exception
    t = lambda key, **v: i18n.t(key, "nl", **v)  # noqa: E731
    box = next(m for m in at.multiselect if m.label == t("compression.strategies"))
    assert len(box.value) == len(compression.STRATEGIES)
    assert t("compression.seeds") in {s.label for s in at.slider}
    box.set_value([])
    next(b for b in at.button if b.label == t("labs.run")).click().run()
    assert t("labs_refused.empty") in [e.value for e in at.error]
    box = next(m for m in at.multiselect if m.label == t("compression.strategies"))
    box.set_value(["topk", "topk_ef"])
    next(b for b in at.button if b.label == t("labs.run")).click().run()
    assert not at.exception, at.exception
    with session_scope() as session:
        run = session.exec(select(LabRun).order_by(LabRun.id.desc())).first()
    assert run.lab == "compression" and run.params["strategies"] == ["topk", "topk_ef"]
