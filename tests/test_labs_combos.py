"""Every choice the Labs form offers ends in a drawn result or a clear refusal, never a traceback.

The page is driven with AppTest, as a learner would: one real run per ring
algorithm, and one benchmark and one DDP run, from the form (2 processes,
smallest sizes). Every other lab x algorithm x dtype x op x backend
combination is run once through the labs engine (2 ranks, small sizes) and
its recorded result is shown by the real page, the way a past run is
opened from the history. The combinations come from the form's own options:
a new option the test does not know about fails it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from sqlmodel import func, select

from academy import i18n
from academy.db import session_scope
from academy.labruns import pages as labruns
from academy.models import LabRun
from labs.launch import run_lab
from labs.request import Request
from tests.apptest import open_page
from tests.factories import finished_run

ALGOS = ["ring", "pipelined", "naive"]
DTYPES = ["float32", "float64", "bfloat16", "int64"]
OPS = ["sum", "avg"]
BACKENDS = ["auto", "gloo", "nccl"]
RUNNABLE_BACKENDS = ["auto", "gloo"]  # nccl needs a GPU per rank: refused on this machine
SMALL = {"ring": {"size": 1024}, "bench": {"min_bytes": 1024, "max_bytes": 65536}, "ddp": {"steps": 2}}
ROOT = Path(__file__).resolve().parent.parent
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


def t(key: str, **values) -> str:
    return i18n.t(key, "en", **values)


def ring_combos() -> list[tuple[str, str, str, str]]:
    return [(a, d, o, b) for a in ALGOS for d in DTYPES for o in OPS for b in RUNNABLE_BACKENDS
            if not (o == "avg" and d == "int64")]


def record_all() -> None:
    """Print one real 2-rank result per combination, as the app stores it (JSON, Infinity/NaN as null).

    Runs in its own single-threaded process, where the launcher forks the
    ranks (fast); in the test process, with Streamlit's threads about, it
    would have to spawn each rank and import torch afresh.
    """
    out = []
    todo = [(("ring", algo, dtype, op, backend), dict(size=1024, algo=algo, dtype=dtype, op=op), backend)
            for algo, dtype, op, backend in ring_combos()]
    todo += [((lab, backend), dict(SMALL[lab]), backend) for lab in ("bench", "ddp") for backend in RUNNABLE_BACKENDS]
    for key, params, backend in todo:
        request = Request.checked(key[0], {**params, "world_size": 2, "backend": backend})
        result = run_lab(request.run, request.params)
        assert result.ok, (key, result)
        out.append([list(key), result.to_dict()])
    print(json.dumps(out))


@pytest.fixture(scope="module")
def recorded() -> dict[tuple, dict]:
    proc = subprocess.run([sys.executable, "-c", "from tests.test_labs_combos import record_all; record_all()"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1], parse_constant=lambda _name: None)
    return {tuple(key): result for key, result in rows}


def charts(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def choose(at, label_key: str, value) -> None:
    [box for box in at.selectbox if box.label == t(label_key)][0].set_value(value)


def click_run(at) -> None:
    [b for b in at.button if b.label == t("labs.run")][0].click()
    at.run()
    assert not at.exception, at.exception


def poll_done(at, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        at.run()
        assert not at.exception, at.exception
        if any(s.value.startswith(t("labs.done", seconds=0, overhead=0)[:8]) for s in at.success):
            return
        errors = [e.value for e in at.error]
        assert not errors, errors
        time.sleep(0.3)
    raise AssertionError("the run never finished on the page")


def frames_expected(algo: str, n: int = 2) -> int:
    return (n - 1 if algo == "naive" else 2 * (n - 1)) + 1


def assert_ring_drawn(at, algo: str, n: int = 2) -> None:
    figs = charts(at)
    assert len(figs) == 2, "the animation and the step-time plot"
    anim, steps = figs
    assert len(anim["frames"]) == frames_expected(algo, n)
    names = {tr.get("name") for tr in anim["frames"][-1]["data"]}
    assert ("buffers" if algo == "naive" else "chunks") in names
    assert len(steps["data"][0]["y"]) == frames_expected(algo, n) - 1, "one measured bar per step"
    caption = t("labs_naive.animation" if algo == "naive" else "labs.ring.animation")
    assert f"**{caption}**" in [md.value for md in at.markdown], "the animation's caption, translated"
    if algo == "naive":
        # Each arrow names the rank whose whole buffer it carries (its size is in the hover and table).
        texts = sorted(a["text"] for a in anim["frames"][1]["layout"]["annotations"])
        assert texts == [f"{t('widgets.ring.rank')} {r}" for r in range(n)], texts


@pytest.mark.usefixtures("app_db")
def test_the_form_offers_what_this_test_covers():
    at = open_page("labs")
    options = {box.label: box.options for box in at.selectbox}
    assert options[t("labs.algo")] == [t(f"labs.algo_{a}") for a in ALGOS]
    assert options[t("labs.dtype")] == DTYPES
    assert options[t("labs.op")] == OPS
    assert options[t("labs.backend")] == BACKENDS
    assert [r.options for r in at.radio if r.label == t("labs.choose")][0] == \
        [t(f"labs.lab_{lab}") for lab in labruns.lab_names()]


@pytest.mark.usefixtures("lab_worker")
def test_each_algorithm_bench_and_ddp_run_from_the_form_and_are_drawn():
    at = open_page("labs")
    for algo in ALGOS:
        choose(at, "labs.algo", algo)
        [s for s in at.select_slider if s.label == t("labs.size")][0].set_value(1024)
        click_run(at)
        poll_done(at)
        run = labruns.get_run(at.session_state["lab_run_id"])
        assert_ring_drawn(at, algo, run.params["world_size"])  # the form's default: 3 ranks
        assert run.params["algo"] == algo and run.result["summary"]["correct"]
    for lab, drawn in (("bench", 1), ("ddp", 2)):
        [r for r in at.radio if r.label == t("labs.choose")][0].set_value(lab).run()
        if lab == "ddp":
            [s for s in at.slider if s.label == t("labs.steps")][0].set_value(2)
        click_run(at)
        poll_done(at)
        assert labruns.get_run(at.session_state["lab_run_id"]).lab == lab
        assert len(charts(at)) >= drawn


@pytest.mark.usefixtures("app_db")
def test_every_recorded_combination_is_drawn_by_the_real_page(recorded):
    at = open_page("labs")
    for key, result in recorded.items():
        run_id = finished_run(key[0], result, params=result["params"], machine=result["machine"])
        at.session_state["lab_run_id"] = run_id
        at.run()
        assert not at.exception, (key, at.exception)
        assert any(s.value.startswith(t("labs.done", seconds=0, overhead=0)[:8]) for s in at.success), key
        if key[0] == "ring":
            assert_ring_drawn(at, key[1])
        else:
            assert charts(at), key


@pytest.mark.usefixtures("app_db")
def test_combinations_the_labs_cannot_run_are_refused_clearly():
    at = open_page("labs")
    choose(at, "labs.dtype", "int64")
    choose(at, "labs.op", "avg")
    click_run(at)
    assert [e.value for e in at.error] == [t("labs_refused.avg_int")]
    if GPUS >= 2:
        pytest.skip("this machine can run NCCL")
    for lab in labruns.lab_names():
        [r for r in at.radio if r.label == t("labs.choose")][0].set_value(lab).run()
        choose(at, "labs.backend", "nccl")
        if lab == "ring":
            choose(at, "labs.op", "sum")
        click_run(at)
        assert [e.value for e in at.error] == [t("labs_refused.nccl", gpus=GPUS)], lab
    with session_scope() as s:
        assert s.exec(select(func.count()).select_from(LabRun)).one() == 0, "nothing was queued"


GROUPED = re.compile(r"\b\d{1,3}(?:\.\d{3})+\b")  # 12.345.678: Dutch grouping, not a decimal point


def _shown(result: dict, lang: str):
    run_id = finished_run(result["lab"], result, params=result["params"], machine=result["machine"])
    at = open_page("labs", lang, state={"lab_run_id": run_id})
    assert not at.exception, at.exception
    texts = [e.value for kind in ("markdown", "caption", "success", "info", "error") for e in at.get(kind)]
    texts += [m.value for m in at.metric]
    texts = [x.replace(result["machine"]["torch"], "torch") for x in texts]  # a version, not a number
    return texts, charts(at)


DUTCH = {"ring": ("ring", "ring", "float32", "sum", "gloo"), "bench": ("bench", "gloo"), "ddp": ("ddp", "gloo")}


@pytest.mark.parametrize("lab", ["ring", "bench", "ddp"])
@pytest.mark.usefixtures("app_db")
def test_results_in_dutch_have_decimal_commas(recorded, lab):
    """A recorded 2-rank result of each lab, drawn in Dutch: decimal commas everywhere."""
    results = {name: recorded[key] for name, key in DUTCH.items()}
    texts, charts = _shown(results[lab], "nl")
    assert charts and all(c["layout"]["separators"] == ",." for c in charts), "plotly's ticks and hover"
    assert all("." not in c["layout"].get("title", {}).get("text", "").replace(" · ", "")
               for c in charts), "our own numbers in chart titles"
    pointed = [x for x in texts if re.search(r"\d\.\d", GROUPED.sub("", x))]
    assert not pointed, pointed
    assert any(re.search(r"\d,\d", x) for x in texts), texts
    english, _ = _shown(results[lab], "en")
    assert any(re.search(r"\d\.\d", x) for x in english), "the check above can fail"
    if lab == "ring":
        s = results["ring"]["summary"]
        metrics = [x for x in texts if x.endswith(" ms")]
        assert f"{i18n.format_number(s['total_time_s'] * 1e3, 'nl', '.2f')} ms" in metrics
        assert all(re.fullmatch(r"\d+,\d\d ms", m) for m in metrics), metrics
