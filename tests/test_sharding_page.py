"""The sharding lab on the Labs page and its calculator in the lesson, in every language."""

from __future__ import annotations

import json

import pytest

from academy import i18n
from academy.db import session_scope
from academy.models import LabRun
from app import calculators as calc
from app import charts
from app import sharding as page
from labs import sharding
from labs.launch import run_lab
from labs.model import SHARDED
from tests.apptest import open_page
from tests.test_charts import colours

LANGS = sorted(i18n.languages())
NAMES = {k: k for k in ["ddp", "zero1", "zero2", "zero3", "params", "grads", "optimizer", "measured",
                        "predicted", "rank", "mb", "sent", "model", "weights", "optimizer_state", "gb",
                        "strategy"]} | {"series": "{part} ({kind})"}


@pytest.fixture(scope="module")
def result() -> dict:
    """One real 2-rank run, as the worker stores it (JSON)."""
    outcome = run_lab("sharding", sharding.Params(width=64, depth=4, steps=2), world_size=2, timeout=240)
    assert outcome.ok, outcome
    return json.loads(json.dumps(outcome.to_dict()))


def figures(result: dict) -> dict:
    s = result["summary"]
    totals = {k: calc.memory_per_device(7e9, "bf16-mixed", "adam", strategy=k, world_size=8)
              for k in ("ddp", "zero1", "zero2", "zero3")}
    return {"ledger": page.ledger_figure(s["strategies"], names=NAMES),
            "wire": page.wire_figure(s["strategies"], s["predicted_wire_bytes_per_step"], names=NAMES),
            "calculator": page.calculator_figure(totals, calc.DEVICES, names=NAMES)}


def test_the_figures_draw_the_run_in_the_palette(result):
    figs = figures(result)
    for name, fig in figs.items():
        stray = [(where, c) for where, c in colours(fig.to_plotly_json()) if c.lower() not in charts.palette()]
        assert not stray, (name, stray)
    ledger = result["summary"]["strategies"]
    # Eight bars (4 strategies x 2 ranks), measured beside predicted, each stacked from its own base.
    bars = {tr.name: tr for tr in figs["ledger"].data}
    assert len(bars) == 6 and all(len(tr.x) == 8 for tr in bars.values())
    top = [b + y for b, y in zip(bars["optimizer (measured)"].base, bars["optimizer (measured)"].y, strict=True)]
    assert top[0] == pytest.approx(sum(ledger["ddp"]["ranks"][0]["measured"].values()) / 1e6)
    assert bars["params (predicted)"].marker.pattern.shape == "/"
    sent = figs["wire"].data[0]
    assert sent.marker.color == charts.COMMUNICATION and figs["wire"].data[1].marker.color == charts.MODEL
    assert sent.y[-1] == pytest.approx(ledger["zero3"]["ranks"][1]["wire_bytes_per_step"] / 1e6)
    ledger_table = charts.table(figs["ledger"])  # one line per bar, as a screen reader reads it
    assert ledger_table["rows"][0][0] == "ddp · rank 0" and len(ledger_table["columns"]) == 7
    assert ledger_table["rows"][0][1] == pytest.approx(ledger["ddp"]["ranks"][0]["measured"]["params"] / 1e6)
    table = charts.table(figs["calculator"])  # the text alternative: a row per strategy
    assert [row[0] for row in table["rows"]] == ["ddp", "zero1", "zero2", "zero3"]
    assert sum(table["rows"][1][1:]) == pytest.approx(38.5)  # 7 B, bf16 + Adam, ZeRO-1 on 8: the lesson's figure


@pytest.mark.parametrize("strategy", ["ddp", "zero1", "zero2", "zero3"])
def test_the_shard_map_shows_what_each_rank_keeps(strategy):
    n = 4
    states = dict(page.shard_states(strategy, n))
    end = page.shard_states(strategy, n)[-1][1]
    for part in page.ANIMATED_PARTS:  # after the step: all of a replicated part, 1/n of a sharded one
        kept = sum(row.count(page.KEPT) for row in end[part])
        assert kept == (n if part in SHARDED[strategy] else n * n), (strategy, part)
    if strategy == "zero3":  # the weights pass through every rank whole, twice, and are freed
        assert page.TRANSIENT in states["gather_forward"]["params"][0]
        assert page.TRANSIENT not in sum(states["reduce_scatter"]["params"], [])
    names = NAMES | {f"phase_{p}": p for ps in page.PHASES.values() for p in ps} | {
        "phase_bytes": "{mb} MB", "play": "play", "pause": "pause", "step": "step", "what_moves": "moves"}
    fig = page.shard_figure(strategy, n, parameter_bytes=4e6, names=names)
    assert len(fig.frames) == len(page.PHASES[strategy])
    stray = [(where, c) for where, c in colours(fig.to_plotly_json()) if c.lower() not in charts.palette()]
    assert not stray, stray
    rows = charts.table(fig)["rows"]
    sent = [r[1] for r in rows if "MB" in r[1]]
    # The traffic of the step: 2 (n-1)/n of the parameter bytes, 3 under ZeRO-3 and torch's ZeRO-1
    per_collective = 4e6 * (n - 1) / n / 1e6
    total = sum(float(r.split()[-2]) for r in sent) / per_collective
    assert total == pytest.approx({"ddp": 2, "zero1": 3, "zero2": 2, "zero3": 3}[strategy], rel=0.01)


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.usefixtures("app_db")
def test_the_labs_page_draws_a_finished_run(result, lang):
    with session_scope() as s:
        run = LabRun(lab="sharding", params={"world_size": 2, **result["params"]}, status="done",
                     result=result, machine=result["machine"])
        s.add(run)
        s.commit()
        run_id = run.id
    at = open_page("labs", lang, state={"lab_run_id": run_id}, lab="sharding")
    assert not at.exception, at.exception
    t = lambda key, **v: i18n.t(key, lang, **v)  # noqa: E731
    assert [i.value for i in at.info][0] == t("labs.look.sharding")
    successes = [m.value for m in at.success]
    assert t("sharding.check_order", count=2) in successes
    assert any(m.startswith(t("sharding.check_ledger", worst=0, tol=10)[:12]) for m in successes)
    assert len(at.get("plotly_chart")) == 3  # the ledger, the wire bytes, the shard map
    radio = [r for r in at.radio if r.label == t("sharding.strategy_choice")][0]
    radio.set_value("zero3").run()
    assert not at.exception, at.exception
    spec = json.loads(at.get("plotly_chart")[2].proto.spec)
    assert len(spec["frames"]) == len(page.PHASES["zero3"])
    assert spec["layout"]["title"]["text"] == t("sharding.phase.start")
    names = [tr["name"] for tr in json.loads(at.get("plotly_chart")[0].proto.spec)["data"]]
    assert t("sharding.series", part=t("sharding.part.params"), kind=t("sharding.measured")) in names
    assert t("sharding.no_peak") in [c.value for c in at.caption]
    # The form offers the lab's own parameters, labelled in the language
    assert {t("sharding.width"), t("sharding.depth")} <= {s.label for s in at.slider}


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.usefixtures("app_db")
def test_the_lesson_shows_the_calculator(lang):
    at = open_page("lessons", lang, section="sharding")
    assert not at.exception, at.exception
    assert i18n.t("sharding.calc.title", lang) in [h.value for h in at.subheader]
    assert at.get("plotly_chart")
    lines = [m.value for m in at.markdown if m.value.startswith("**")]
    zero3 = i18n.t("sharding.strategy.zero3", lang)
    assert any(zero3 in line and "14" in line for line in lines), lines  # 7 B on 8 devices: 14 GB
