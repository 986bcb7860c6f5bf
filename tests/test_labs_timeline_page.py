"""The DDP lab's timeline on the Labs page (issue #25): swim lanes per rank and
thread, naive above DDP on one clock, the overlap and exposed figures beside
them, the bucket-cap slider choosing DDP's timeline, and the trace download,
in every language; "predict, then measure" with the run's own fit of
dist.all_reduce (issue #36: a model whatever benchmark ran), and what overlap
would hide where communication takes no compute. A real run feeds the page;
no timing is asserted.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from academy import i18n
from app import charts
from app import timeline as lanes
from labs import reports
from tests.test_labs_readouts import shown, store, texts

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def result() -> dict:
    proc = subprocess.run([sys.executable, "-m", "labs", "ddp", "--world-size", "2", "--sections", "breakdown",
                           "timeline", "--steps", "3", "--warmup", "1", "--timeline-steps", "3",
                           "--bucket-caps-mb", "0.01", "25", "--json"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def lane_chart(at) -> dict:
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    return next(s for s in specs if any(tr.get("base") for tr in s["data"]))


@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_the_page_draws_each_rank_s_lanes_and_the_figures_beside_them(result, lang):
    tl = result["summary"]["sections"]["timeline"]
    at = shown(store(result), lang)
    assert i18n.t("labs.timeline.title", lang, count=tl["steps"]) in [m.value.strip("*") for m in at.markdown]
    assert any(i18n.t("labs.timeline.look", lang) in m.value for m in at.markdown)
    spec = lane_chart(at)
    lanes_drawn = spec["layout"]["yaxis"]["categoryarray"]
    assert len(lanes_drawn) == 2 * 2 * 2  # naive and DDP, 2 ranks, compute and comm
    naive, ddp = i18n.t("labs.timeline.naive", lang), i18n.t("labs.timeline.ddp", lang, cap="0,05" if lang == "nl"
                                                              else "0.05")
    assert lanes_drawn[0].startswith(naive) and lanes_drawn[-1].startswith(ddp)
    drawn = sum(len(tr["x"]) for tr in spec["data"])
    every = [s for name in ("naive", "ddp") for r in tl["variants"][name]["ranks"] for s in r["spans"]]
    waited = [s for s in every if s["kind"] == "comm" and s["start_ms"] < s["ready_ms"] < s["end_ms"]]
    assert drawn == len(every) + len(waited)  # a span that waited for a late rank: a grey piece, then its own
    grey = [tr for tr in spec["data"] if tr["name"] == i18n.t("labs.timeline.wait", lang)]
    assert sum(len(tr["x"]) for tr in grey) == len(waited)
    assert all(s["kind"] != "comm" or "ready_ms" in s for s in every)
    metrics = {m.label: m.value for m in at.metric}
    for title in (naive, ddp):
        assert i18n.t("labs.timeline.overlap", lang, name=title) in metrics
        assert i18n.t("labs.timeline.exposed", lang, name=title) in metrics
    assert metrics[i18n.t("labs.timeline.overlap", lang, name=naive)] in ("0%", "0 %")
    assert any(b.label == i18n.t("labs.timeline.download", lang) for b in at.get("download_button"))
    # The slider picks DDP's bucket cap: at 25 MB the lower lanes are that run's.
    slider = next(s for s in at.select_slider if s.label == i18n.t("labs.timeline.cap", lang))
    assert slider.value == 0.05 and list(slider.options) == [lanes_format(c, lang) for c in (0.01, 0.05, 25.0)]
    slider.set_value(25.0).run()
    after = lane_chart(at)["layout"]["yaxis"]["categoryarray"]
    assert after[-1].startswith(i18n.t("labs.timeline.ddp", lang, cap="25")) and after[0] == lanes_drawn[0]
    assert not at.exception
    assert any(i18n.t("labs.timeline.idle", lang, idle="", count=1, hidden=0, depth=0, batch=0, cpus=0)[:8] in x
               for x in texts(at))
    # The overlap figure is the median step's; the steps are listed under it.
    per_step = [i18n.format_number(x, lang, ".0%") for x in tl["variants"]["ddp@25"]["overlap_steps"]]
    assert i18n.t("labs.timeline.per_step", lang, name=i18n.t("labs.timeline.ddp", lang, cap="25"),
                  steps=", ".join(per_step)) in texts(at)


def lanes_format(cap: float, lang: str) -> str:
    return i18n.format_number(cap, lang, "g") + " MiB"


def test_the_lanes_use_the_palette_and_carry_their_numbers_as_a_table(result):
    variants = result["summary"]["sections"]["timeline"]["variants"]
    labels = {k: k for k in ("rank", "compute", "comm", "ms", "span", "start", "end", "forward", "backward",
                             "optimizer", "wait")}
    typed = reports.read("ddp", result).summary.sections.timeline.variants
    fig = lanes.timeline_figure([("naive", typed["naive"]), ("ddp", typed["ddp"])], labels)
    text = json.dumps(fig.to_plotly_json())
    for colour in {c.lower() for c in re.findall(r"#[0-9a-fA-F]{6}", text)}:
        assert colour in charts.palette(), colour
    bars = {tr.name: tr.marker.color for tr in fig.data}
    for tr in fig.data:  # a bar's hover names its span, its start and its end (not its length)
        assert "%{customdata[1]" in tr.hovertemplate
        assert all(abs(b + w - c[1]) < 1e-3 for b, w, c in zip(tr.base, tr.x, tr.customdata, strict=True) if w > 1e-3)
    assert bars["comm"] == charts.COMMUNICATION and bars["backward"] == charts.COMPUTE
    table = charts.table(fig)
    assert table["columns"][1:] == ["span", "start", "end"]
    assert len(table["rows"]) == sum(len(r["spans"]) for name in ("naive", "ddp")
                                     for r in variants[name]["ranks"])


# --------------------------------------------------------------------------
# Predict, then measure: the learner's prediction, the step model and the measurement

FIT = {"alpha_s": 2e-4, "bandwidth_Bps": 0.5e9, "bandwidth_GBps": 0.5, "steps": 2, "collective": "all_reduce"}


def store_bench(result: dict, worker: str = "labhost:2") -> int:
    """A benchmark run on the same host as ``store``'s lab runs, at the DDP run's world size and backend."""
    bench = {"lab": "bench", "params": {}, "machine": {}, "summary": {
        "world_size": result["summary"]["world_size"], "backend": result["summary"]["backend"],
        "rows": [], "fit": {"all_reduce": FIT}}}
    return store(bench, worker=worker)


def ms(value: float, lang: str) -> str:
    return i18n.format_number(value, lang, ".2f") + " ms"


ROWS = ("compute", "comm", "exposed", "hidden", "model", "measured")


@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_the_prediction_sits_beside_the_step_model_from_the_run_s_own_fit(result, lang):
    from labs import timeline

    store_bench(result)  # a benchmark of this machine does not replace the run's own timing
    run = json.loads(json.dumps(result))
    run["params"]["predicted_step_ms"] = 7.5
    at = shown(store(run), lang)
    tl = run["summary"]["sections"]["timeline"]
    fit = tl["fit"]
    assert fit["alpha_s"] > 0 and fit["bandwidth_Bps"] > 0, fit
    step = timeline.step_model(tl["variants"]["ddp"], world_size=2, fit=fit, gradient_bytes=tl["gradient_bytes"])
    assert step["model_ms"] == pytest.approx(step["compute_ms"] + step["exposed_ms"])
    assert step["hidden_ms"] == pytest.approx(step["comm_ms"] - step["exposed_ms"])
    assert i18n.t("labs.predict.title", lang, cap="0,05" if lang == "nl" else "0.05", count=2) in \
        [m.value.strip("*") for m in at.markdown]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics[i18n.t("labs.predict.guess", lang)] == ms(7.5, lang)
    assert metrics[i18n.t("labs.predict.model", lang)] == ms(step["model_ms"], lang)
    assert metrics[i18n.t("labs.predict.measured", lang)] == ms(step["measured_ms"], lang)
    shown_texts = texts(at)
    assert i18n.t("labs.predict.fit_run", lang, alpha=fit["alpha_s"] * 1e6, bw=fit["bandwidth_Bps"] / 1e9,
                  count=2) in shown_texts
    residual = step["measured_ms"] - step["model_ms"]
    assert i18n.t("labs.predict.residual_model", lang, ms=residual, share=residual / step["model_ms"]) \
        in shown_texts
    table = next(d.value for d in at.dataframe if i18n.t("labs.predict.term", lang) in d.value.columns)
    assert list(table[i18n.t("labs.predict.term", lang)]) == [i18n.t(f"labs.predict.row_{k}", lang) for k in ROWS]
    # Above, in the breakdown: what the same step model says overlap would hide where
    # communication takes no compute (on a GPU), for the breakdown's DDP.
    assert i18n.t("labs.ddp.overlap_gpu", lang, hidden=step["hidden_ms"], comm=step["comm_ms"],
                  cap="0,05" if lang == "nl" else "0.05") in shown_texts
    b = run["summary"]["sections"]["breakdown"]
    why = i18n.t("labs.ddp.overlap_why", lang, cpus=run["machine"]["cpu_count"])
    little = b["overlap_hidden"]["ms"]["median"] < 0.25 * b["bucketed"]["exposed_comm"]
    assert (why in shown_texts) == little


@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_a_run_from_before_its_own_fit_takes_this_machine_s_benchmark(result, lang):
    from labs import timeline

    bench_id = store_bench(result)
    run = json.loads(json.dumps(result))
    run["params"]["predicted_step_ms"] = 7.5
    del run["summary"]["sections"]["timeline"]["fit"]
    at = shown(store(run), lang)
    tl = run["summary"]["sections"]["timeline"]
    step = timeline.step_model(tl["variants"]["ddp"], world_size=2, fit={**FIT, "run_id": bench_id},
                               gradient_bytes=tl["gradient_bytes"])
    assert step["model_ms"] == pytest.approx(step["compute_ms"] + step["exposed_ms"])
    assert i18n.t("labs.predict.title", lang, cap="0,05" if lang == "nl" else "0.05", count=2) in \
        [m.value.strip("*") for m in at.markdown]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics[i18n.t("labs.predict.guess", lang)] == ms(7.5, lang)
    assert metrics[i18n.t("labs.predict.model", lang)] == ms(step["model_ms"], lang)
    assert metrics[i18n.t("labs.predict.measured", lang)] == ms(step["measured_ms"], lang)
    shown_texts = texts(at)
    assert i18n.t("labs.predict.fit", lang, run=bench_id, alpha=200, bw=0.5, count=2) in shown_texts
    residual = step["measured_ms"] - step["model_ms"]
    assert i18n.t("labs.predict.residual_model", lang, ms=residual, share=residual / step["model_ms"]) \
        in shown_texts
    assert i18n.t("labs.predict.residual_guess", lang, ms=step["measured_ms"] - 7.5,
                  share=(step["measured_ms"] - 7.5) / 7.5) in shown_texts
    table = next(d.value for d in at.dataframe if i18n.t("labs.predict.term", lang) in d.value.columns)
    assert list(table[i18n.t("labs.predict.term", lang)]) == [i18n.t(f"labs.predict.row_{k}", lang) for k in ROWS]
    # At another bucket size the prediction is not compared: it was for 0.05 MB.
    slider = next(s for s in at.select_slider if s.label == i18n.t("labs.timeline.cap", lang))
    slider.set_value(25.0).run()
    assert not at.exception
    assert i18n.t("labs.predict.other_cap", lang, ms=7.5, cap="0,05" if lang == "nl" else "0.05") in texts(at)
    assert {m.label: m.value for m in at.metric}[i18n.t("labs.predict.guess", lang)] == "—"


@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_without_a_fit_the_page_says_how_to_get_one_and_invents_nothing(result, lang):
    store_bench(result, worker="otherhost:3")  # another machine's fit does not count
    run = json.loads(json.dumps(result))
    del run["summary"]["sections"]["timeline"]["fit"]  # a run from before the lab timed its own
    at = shown(store(run), lang)
    shown_texts = texts(at)
    assert i18n.t("labs.predict.no_fit", lang, count=2, backend=result["summary"]["backend"]) in shown_texts
    assert i18n.t("labs.predict.no_guess", lang) in shown_texts
    metrics = {m.label: m.value for m in at.metric}
    assert metrics[i18n.t("labs.predict.model", lang)] == metrics[i18n.t("labs.predict.guess", lang)] == "—"
    assert metrics[i18n.t("labs.predict.measured", lang)].endswith(" ms")
    table = next(d.value for d in at.dataframe if i18n.t("labs.predict.term", lang) in d.value.columns)
    assert list(table[i18n.t("labs.timeline.ms", lang)])[1:5] == ["—"] * 4  # comm, exposed, hidden, model
    assert not [x for x in texts(at) if x.startswith(i18n.t("labs.ddp.overlap_gpu", lang, hidden=0, comm=0,
                                                              cap=0)[:12])]


@pytest.mark.usefixtures("app_db")
def test_the_form_offers_an_optional_prediction_and_keeps_it_with_the_run():
    from sqlmodel import select

    from academy.db import session_scope
    from academy.labruns import pages as labruns
    from academy.models import LabRun
    from tests.apptest import open_page

    assert labruns.validate("ddp", {"predicted_step_ms": 7.5}).params.predicted_step_ms == 7.5
    assert "predicted_step_ms" not in labruns.validate("ddp", {"predicted_step_ms": None}).stored()  # never required
    at = open_page("labs", "en", lab="ddp")
    box = next(n for n in at.number_input if n.label == i18n.t("labs.predict.field", "en"))
    assert box.value is None
    box.set_value(7.5)
    next(b for b in at.button if b.label == i18n.t("labs.run", "en")).click().run()
    assert not at.exception
    with session_scope() as session:
        run = session.exec(select(LabRun).order_by(LabRun.id.desc())).first()
    assert run.lab == "ddp" and run.params["predicted_step_ms"] == 7.5
