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
from labs import reports
from labs.launch import run_lab
from labs.model import SHARDED
from labs.params import Run
from labs.sharding import lab as sharding
from tests.apptest import open_page
from tests.factories import finished_run
from tests.test_charts import colours

LANGS = sorted(i18n.languages())
NAMES = {k: k for k in ["ddp", "zero1", "zero2", "zero3", "params", "grads", "optimizer", "measured",
                        "predicted", "rank", "mb", "sent", "model", "weights", "optimizer_state", "gb",
                        "strategy"]} | {"series": "{part} ({kind})"}


@pytest.fixture(scope="module")
def result() -> dict:
    """One real 2-rank run, as the worker stores it (JSON)."""
    outcome = run_lab(Run(world_size=2, timeout=240), sharding.Params(width=64, depth=4, steps=2))
    assert outcome.ok, outcome
    return json.loads(json.dumps(outcome.to_dict()))


def figures(result: dict) -> dict:
    s = reports.read("sharding", result).summary
    totals = {k: calc.memory_per_device(7e9, "bf16-mixed", "adam", strategy=k, world_size=8)
              for k in ("ddp", "zero1", "zero2", "zero3")}
    return {"ledger": page.ledger_figure(s.strategies, names=NAMES),
            "wire": page.wire_figure(s.strategies, s.predicted_wire_bytes_per_step, names=NAMES),
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
    run_id = finished_run("sharding", result, params={"world_size": 2, **result["params"]},
                          machine=result["machine"])
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
    assert t("sharding.animation_caption_replayed") in [c.value for c in at.caption]  # from the run's record
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


PHASE_NAMES = NAMES | {f"phase_{p}": p for ps in page.PHASES.values() for p in ps} | {
    "phase_bytes": "model {mb} MB", "phase_measured": "sent {mb} MB in {calls} calls of {dtype}",
    "play": "play", "pause": "pause", "step": "step", "what_moves": "moves"}


def collectives(record: list[dict]) -> list[reports.Collective]:
    """A stored record as the page reads it (``labs.reports``)."""
    return [reports.Collective.model_validate(entry) for entry in record]


def test_the_shard_map_follows_the_recorded_collectives():
    # A synthetic record, not the fixed table: ZeRO-3 with an extra all-reduce after its reduce-scatter
    record = [{"kind": "all_gather", "stage": "forward", "bytes": 1_500_000, "calls": 4, "dtype": "bfloat16"},
              {"kind": "all_gather", "stage": "backward", "bytes": 1_250_000, "calls": 3, "dtype": "bfloat16"},
              {"kind": "reduce_scatter", "stage": "backward", "bytes": 2_000_000, "calls": 4, "dtype": "bfloat16"},
              {"kind": "all_reduce", "stage": "step", "bytes": 8, "calls": 1, "dtype": "float32"}]
    fig = page.shard_figure("zero3", 2, parameter_bytes=4e6, names=PHASE_NAMES, record=collectives(record))
    titles = [f.layout.title.text for f in fig.frames]
    assert titles == ["start", "gather_forward<br>sent 1.50 MB in 4 calls of bfloat16",
                      "gather_backward<br>sent 1.25 MB in 3 calls of bfloat16",
                      "reduce_scatter<br>sent 2.00 MB in 4 calls of bfloat16",
                      "all_reduce<br>sent 0.00 MB in 1 calls of float32", "step_own"]
    assert [row[1] for row in charts.table(fig)["rows"]] == [t.replace("<br>", " ") for t in titles]
    # Compute phases go where they ran: backward before the first reduction, the step before a broadcast
    zero1 = [{"kind": "all_reduce", "stage": "backward", "bytes": 10, "calls": 2, "dtype": "float32"},
             {"kind": "broadcast", "stage": "step", "bytes": 5, "calls": 8, "dtype": "float32"}]
    assert [p for p, _e in page.replayed_phases("zero1", collectives(zero1))] == list(page.PHASES["zero1"])
    ddp = [{"kind": "all_reduce", "stage": "backward", "bytes": 10, "calls": 2, "dtype": "float32"}]
    assert [p for p, _e in page.replayed_phases("ddp", collectives(ddp))] == list(page.PHASES["ddp"])
    # A collective the map cannot draw, or no record (a run stored before it): the fixed phases, the model's bytes
    odd = [{"kind": "all_gather", "stage": "", "bytes": 10, "calls": 1, "dtype": "float32"}]
    assert page.replayed_phases("zero2", collectives(odd)) is None
    for fallback in (collectives(odd), None):
        fig = page.shard_figure("zero2", 2, parameter_bytes=4e6, names=PHASE_NAMES, record=fallback)
        assert [f.layout.title.text for f in fig.frames][2] == "reduce_scatter<br>model 2.00 MB"


@pytest.mark.parametrize("strategy", ["ddp", "zero1", "zero2", "zero3"])
def test_the_shard_map_of_a_real_run_replays_its_record(result, strategy):
    record = result["summary"]["strategies"][strategy]["step_collectives"]
    fig = page.shard_figure(strategy, 2, parameter_bytes=result["summary"]["model"]["bytes"], names=PHASE_NAMES,
                            record=collectives(record))
    titles = [f.layout.title.text for f in fig.frames]
    assert [t.split("<br>")[0] for t in titles] == list(page.PHASES[strategy])  # the real run: the lesson's phases
    sent = [t for t in titles if "<br>sent" in t]
    assert len(sent) == len(record)
    for title, entry in zip(sent, record, strict=True):
        assert f"sent {entry['bytes'] / 1e6:.2f} MB in {entry['calls']} calls of float32" in title


@pytest.fixture(scope="module")
def bf16_result() -> dict:
    params = sharding.Params(width=64, depth=4, steps=2, precision="bf16-mixed")
    outcome = run_lab(Run(world_size=2, timeout=240), params)
    assert outcome.ok, outcome
    return json.loads(json.dumps(outcome.to_dict()))


@pytest.mark.usefixtures("app_db")
def test_the_form_offers_the_precision_and_the_run_keeps_it():
    from sqlmodel import select

    at = open_page("labs", "en", lab="sharding")
    assert not at.exception, at.exception
    box = next(b for b in at.selectbox if b.label == i18n.t("sharding.precision", "en"))
    assert box.value == "fp32" and list(box.options) == [i18n.t("widgets.precision.fp32", "en"),
                                                         i18n.t("widgets.precision.bf16-mixed", "en")]
    box.set_value("bf16-mixed")
    next(b for b in at.button if b.label == i18n.t("labs.run", "en")).click().run()
    assert not at.exception, at.exception
    with session_scope() as session:
        run = session.exec(select(LabRun).order_by(LabRun.id.desc())).first()
    assert run.lab == "sharding" and run.params["precision"] == "bf16-mixed"


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.usefixtures("app_db")
def test_the_labs_page_draws_a_bf16_run(bf16_result, lang):
    run_id = finished_run("sharding", bf16_result, params={"world_size": 2, **bf16_result["params"]},
                          machine=bf16_result["machine"])
    at = open_page("labs", lang, state={"lab_run_id": run_id}, lab="sharding")
    assert not at.exception, at.exception
    t = lambda key, **v: i18n.t(key, lang, **v)  # noqa: E731
    captions = [c.value for c in at.caption]
    assert t("sharding.precision_line", precision=t("widgets.precision.bf16-mixed"), dtypes="bfloat16") in captions
    summary = bf16_result["summary"]
    ledger = summary["strategies"]
    weights = t("sharding.check_weights_mean", diff=max(v["max_abs_diff_vs_ddp"] for v in ledger.values()),
                tol=10, mean=max(v["mean_abs_diff_vs_ddp"] for v in ledger.values()),
                moved=summary["mean_abs_update_ddp"])
    assert weights in [m.value for m in at.success]
    names = [tr["name"] for tr in json.loads(at.get("plotly_chart")[0].proto.spec)["data"]]
    assert t("sharding.series", part=t("sharding.part.optimizer_master"), kind=t("sharding.measured")) in names
    spec = json.loads(at.get("plotly_chart")[2].proto.spec)  # the shard map of DDP, from the record
    entry = ledger["ddp"]["step_collectives"][0]
    measured = t("sharding.phase.measured", mb=f"{entry['bytes'] / 1e6:.2f}", calls=entry["calls"], dtype="bfloat16")
    assert spec["frames"][2]["layout"]["title"]["text"] == t("sharding.phase.all_reduce") + "<br>" + measured
    assert t("sharding.animation_caption_replayed") in captions


@pytest.mark.usefixtures("app_db")
def test_a_run_stored_before_the_record_still_draws(result):
    old = json.loads(json.dumps(result))  # as issue #24's first version stored it
    summary = old["summary"]
    for key in ("precision", "wire_dtypes", "weight_check", "mean_abs_update_ddp"):
        del summary[key]
    for s in summary["strategies"].values():
        del s["step_collectives"], s["mean_abs_diff_vs_ddp"]
    run_id = finished_run("sharding", old, params={"world_size": 2, **old["params"]}, machine=old["machine"])
    at = open_page("labs", "en", state={"lab_run_id": run_id}, lab="sharding")
    assert not at.exception, at.exception
    assert i18n.t("sharding.animation_caption", "en") in [c.value for c in at.caption]
    spec = json.loads(at.get("plotly_chart")[2].proto.spec)
    assert [f["layout"]["title"]["text"].split("<br>")[0] for f in spec["frames"]] == [
        i18n.t(f"sharding.phase.{p}", "en") for p in page.PHASES["ddp"]]
