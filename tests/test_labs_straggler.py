"""The straggler lab: its arithmetic on hand-made timelines, one run on 2 gloo ranks, the throttle, the page.

No timing is asserted (timings go to ``make bench``: ``labs.straggler`` there
holds the measured step against the model); the run's test checks what
holds on any machine: every rank's spans, the same weights slowed or not,
local SGD averaging once a period, and the report's shape.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from labs.straggler import lab as straggler
from labs.straggler.report import StragglerSummary
from labs.straggler.throttle import PREFIX, Throttle, Unavailable, _cpu_dir
from tests.apptest import open_page
from tests.factories import finished_run
from tests.runquestions import asks_its_questions

ROOT = Path(__file__).resolve().parent.parent
# Small: 2 seeds of 4 measured steps, averaging every 2 (about 10 s on 2 loaded cores).
SMALL = {"steps": 4, "period": 2, "seeds": 2, "warmup": 1, "hidden": 64, "batch": 64, "samples": 1024}


def rows(starts: list[float], own: float, comm: float) -> list[list[float]]:
    """A rank's rows: each step starts at ``starts[i]``, computes ``own`` ms, waits ``comm`` ms."""
    return [[s, s + own + comm, own, comm] for s in starts]


# --------------------------------------------------------------------------
# The arithmetic, on timelines made by hand


def test_a_step_ends_when_the_last_rank_has_left_the_all_reduce():
    # Rank 1 computes 9 ms, rank 0 3 ms and waits 6 ms more in a 1 ms all-reduce: 10 ms a step.
    fast, slow = rows([0, 10, 20], own=3, comm=7), rows([0, 10, 20], own=9, comm=1)
    assert straggler.sync_points([fast, slow], 1) == [10, 10, 10]
    assert straggler.allreduce_ms([fast, slow]) == 1
    f = straggler.figures([fast, slow], every=1, allreduce=1, world_size=2, batch=4)
    assert f["own"] == [3, 9] and f["model"] == 10  # the slowest rank's own time + the all-reduce
    assert f["wait"] == [6, 0]  # the fast rank waits the slow rank's extra compute
    assert f["throughput"] == pytest.approx(2 * 4 * 3 / 0.030)


def test_local_sgd_pays_the_all_reduce_once_a_period():
    # Averaging every 2 steps: compute 9 ms a step on the slow rank, a 2 ms average after step 2.
    slow = [[0, 9, 9, 0], [9, 20, 9, 2], [20, 29, 9, 0], [29, 40, 9, 2]]
    fast = [[0, 3, 3, 0], [3, 20, 3, 14], [20, 23, 3, 0], [23, 40, 3, 14]]
    assert straggler.sync_points([fast, slow], 2) == [10, 10]
    f = straggler.figures([fast, slow], every=2, allreduce=2, world_size=2, batch=1)
    assert f["model"] == 9 + 2 / 2
    assert f["wait"][0] == pytest.approx((28 - 2 * 2) / 4)


def test_params_round_the_measured_steps_up_to_whole_periods():
    assert straggler.Params(steps=10, period=4).measured == 12
    assert straggler.Params(steps=12, period=4).measured == 12
    with pytest.raises(ValueError, match="2 to 4 ranks"):
        straggler.check(straggler.Params(), 1)
    with pytest.raises(ValueError, match="slow rank 2"):
        straggler.check(straggler.Params(slow_rank=2), 2)


@pytest.mark.parametrize("lab, params, key, values", [
    ("straggler", {"world_size": 1}, "labs.err_world_between", {"low": 2, "high": 4}),
    ("straggler", {"world_size": 2, "slow_rank": 3}, "labs.err_rank", {"max": 1, "count": 2}),
    ("failure", {"world_size": 3, "kill_rank": 5}, "labs.err_rank", {"max": 2, "count": 3}),
])
def test_the_page_refuses_what_the_lab_would_refuse_in_the_learners_words(lab, params, key, values):
    from academy import i18n
    from academy.labruns import pages

    with pytest.raises(pages.LabRequestError) as err:
        pages.validate(lab, params)
    assert (err.value.key, err.value.values) == (key, values)
    assert "{" not in i18n.t(key, "zh", **values) and "{" not in i18n.t(key, "nl", **values)


# --------------------------------------------------------------------------
# One real run


def _run() -> None:
    from labs.launch import run_lab
    from labs.request import Request

    request = Request.checked("straggler", {**SMALL, "world_size": 2, "timeout": 300, "hang_timeout": 120})
    print(json.dumps(run_lab(request.run, request.params).to_dict()))


@pytest.fixture(scope="module")
def result() -> dict:
    """One run on 2 ranks, in a process of its own (the ranks fork fast there), as JSON."""
    proc = subprocess.run([sys.executable, "-c", "from tests.test_labs_straggler import _run; _run()"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["ok"], out
    return out


@pytest.mark.slow  # lab ranks
def test_the_run_times_every_rank_and_keeps_the_weights(result):
    s = StragglerSummary.model_validate(result["summary"])
    assert s.world_size == 2 and s.slow_rank == 1 and s.factor == 3 and s.mechanism in ("cgroup", "stop")
    assert set(s.variants) == set(straggler.VARIANTS)
    assert s.same_weights, "slowing a rank changes the time, not the sums"
    for name, v in s.variants.items():
        assert v.step_ms.k == (4 * 2 if name != "local_sgd" else 2 * 2), name  # steps (periods) x seeds
        assert v.step_ms.q1 <= v.step_ms.median <= v.step_ms.q3
        assert [r.rank for r in v.timeline.ranks] == [0, 1]
        assert len(v.compute_ms) == len(v.own_ms) == len(v.wait_ms) == 2
        assert all(w >= 0 for w in v.wait_ms) and v.model_ms.median > 0 and v.throughput.median > 0
    sync = s.variants["slow"].timeline
    for r in sync.ranks:  # the synchronous steps: forward, backward, optimizer and one all-reduce each
        comms = [sp for sp in r.spans if sp.kind == "comm"]
        assert len(comms) == 3 and {sp.name for sp in r.spans if sp.kind == "compute"} == {
            "forward", "backward", "optimizer"}
    local = s.variants["local_sgd"].timeline
    for r in local.ranks:  # the last period of 2 steps: one average, at its end
        comms = [sp for sp in r.spans if sp.kind == "comm"]
        assert [sp.step for sp in comms] == [3] and comms[0].name == "average the models"
    assert s.loss_paid.min <= s.loss_paid.median <= s.loss_paid.max


@pytest.mark.slow  # lab ranks
def test_the_command_line_and_its_text(result):
    text = straggler.format_text(result["summary"])
    assert "rank 1 given 1/3 of a core" in text and "local_sgd" in text and "bit for bit" in text


# --------------------------------------------------------------------------
# The throttle


def test_a_cgroup_throttle_leaves_nothing_behind():
    found = _cpu_dir()
    if found is None:
        with pytest.raises(Unavailable):
            Throttle.start("cgroup")
        pytest.skip("no writable cgroup with the cpu controller here")
    parent, _kind = found
    throttle = Throttle.start("cgroup")
    group = parent / f"{PREFIX}{os.getpid()}"
    assert throttle.method == "cgroup" and group.is_dir()
    assert str(os.getpid()) in (group / "cgroup.procs").read_text().split()
    throttle.set(4)
    throttle.close()
    assert not group.exists()
    assert str(os.getpid()) in (parent / "cgroup.procs").read_text().split()


def test_a_stop_throttle_ends_its_helper_with_us_running():
    throttle = Throttle.start("stop")
    helper = throttle._helper
    throttle.set(2)
    throttle.close()
    assert helper.poll() is not None, "the helper has ended"
    with open(f"/proc/{os.getpid()}/stat") as f:
        assert f.read().rsplit(")", 1)[1].split()[0] in ("R", "S"), "and left us running"


# --------------------------------------------------------------------------
# The page


def _store(result: dict) -> int:

    return finished_run("straggler", result, params=result["params"], machine=result["machine"],
                        worker="labhost:1")


@pytest.mark.slow  # lab ranks
def test_the_run_gives_questions_built_from_its_own_figures(result):
    asks_its_questions("straggler", result)  # the recorded run of tests/fixtures/runs is still what the lab writes


@pytest.mark.slow  # lab ranks
@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_the_page_shows_the_model_the_timeline_and_the_trade(result, lang):
    at = open_page("labs", lang, state={"lab_run_id": _store(result)})
    assert not at.exception, at.exception
    from academy import i18n

    look = i18n.t("labs.look.straggler", lang)
    assert [e for e in at.info if e.value == look], "the result opens with what to look for"
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(charts) == 2  # the steps against the model, every rank's timeline
    assert any(e.value == i18n.t("straggler.same", lang) for e in at.success)
    assert len(at.metric) == 6
