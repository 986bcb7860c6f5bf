"""The failure lab: a rank killed under torchrun, the job restarted and resumed from its checkpoint.

- the arithmetic on logs made by hand: which steps a kill loses, which are redone, Young/Daly;
- one real run on 3 gloo ranks: torchrun restarts the job once and the resumed weights equal
  those of a run never killed, bit for bit (on 3 ranks gloo's sums depend on the bucket
  layout, so this is the case where a careless resume would differ), and nothing is left;
- a run that kills more often than ``--max-restarts`` allows fails with torchrun's reason;
- the page, in every language.

That no process outlives a cancel or a ``kill -9`` of the worker is tested with a real
worker, beside the other labs', in tests/test_lab_worker.py.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from labs.failure import lab as failure
from labs.failure.report import FailureSummary
from labs.failure.supervise import PREFIX
from tests.apptest import open_page
from tests.factories import finished_run
from tests.procs import gone
from tests.runquestions import asks_its_questions

ROOT = Path(__file__).resolve().parent.parent
# Small: 12 steps, a checkpoint every 4, rank 1 killed at step 7 (steps 4, 5 and 6 are lost).
SMALL = {"steps": 12, "checkpoint_every": 4, "kill_step": 7, "hidden": 32, "batch": 32, "samples": 512}


def rec(kind: str, attempt: int, t0: float, t1: float | None = None, **extra) -> dict:
    return {"kind": kind, "attempt": attempt, "t0": t0, "t1": t0 if t1 is None else t1, **extra}


# --------------------------------------------------------------------------
# The arithmetic


def test_a_kill_loses_the_steps_after_the_last_checkpoint_and_they_are_redone():
    log = [rec("start", 0, 0.0, 1.0)]
    log += [rec("step", 0, 1.0 + i, 1.5 + i, step=i) for i in range(7)]
    log += [rec("checkpoint", 0, 5.0, 5.1, step=4), rec("kill", 0, 8.0, step=7)]
    log += [rec("start", 1, 9.0, 12.0), rec("resume", 1, 12.0, 12.2, step=4)]
    log += [rec("step", 1, 13.0 + i, 13.5 + i, step=4 + i) for i in range(8)]
    lane = failure.lanes([log], origin=0.0)[0]
    fate = {(s.attempt, s.step): s.kind for s in lane.segments if s.kind in ("kept", "lost", "redone")}
    assert [fate[(0, i)] for i in range(7)] == ["kept"] * 4 + ["lost"] * 3
    assert [fate[(1, i)] for i in range(4, 12)] == ["redone"] * 3 + ["kept"] * 5
    assert {s.kind for s in lane.segments} == {"start", "kept", "lost", "checkpoint", "resume", "redone"}


def test_a_lane_keeps_its_picture_in_a_few_segments():
    log = [rec("start", 0, 0.0, 1.0)] + [rec("step", 0, 1.0 + i, 1.5 + i, step=i) for i in range(6)]
    log += [rec("checkpoint", 0, 3.6, 3.7, step=3), rec("kill", 0, 8.0, step=6)]
    lane = failure.merged(failure.lanes([log], origin=0.0)[0])
    assert [(s.kind, s.step, s.last_step) for s in lane.segments] == [
        ("start", 0, None), ("kept", 0, 2), ("checkpoint", 3, None), ("lost", 3, 5)]
    assert lane.segments[1].end_s == 3.5  # the run ends where its last step did


def test_kill_steps_are_the_chosen_one_then_drawn_later_ones():
    p = failure.Params(steps=60, kill_step=20, kills=3)
    steps = failure.kill_steps(p)
    assert steps[0] == 20 and steps[0] < steps[1] < steps[2] < 60
    assert failure.kill_steps(p) == steps, "drawn from the seed"
    drawn = failure.kill_steps(failure.Params(steps=60, kill_step=0, kills=1))
    assert 1 <= drawn[0] < 60
    assert failure.kill_steps(failure.Params(kills=0)) == []
    with pytest.raises(ValueError, match="kill rank 2"):
        failure.check(failure.Params(kill_rank=2), 2)
    with pytest.raises(ValueError, match="past the last step"):
        failure.Params(steps=10, kill_step=10)


def test_young_daly_minimises_the_expected_waste():
    delta, mtbf = 0.004, 60.0
    tau = failure.young_daly(delta, mtbf)
    assert tau == pytest.approx(math.sqrt(2 * delta * mtbf))
    best = failure.waste_fraction(tau, delta_s=delta, mtbf_s=mtbf)
    assert best == pytest.approx(math.sqrt(2 * delta / mtbf))
    for other in (tau / 2, tau * 2):
        assert failure.waste_fraction(other, delta_s=delta, mtbf_s=mtbf) > best
    # A restart adds R/M at every interval, and moves nothing.
    assert failure.waste_fraction(tau, delta_s=delta, mtbf_s=mtbf, restart_s=6) == pytest.approx(best + 6 / mtbf)


# --------------------------------------------------------------------------
# Real runs under torchrun


def _run(params: dict, world_size: int) -> None:
    from labs.launch import run_lab
    from labs.request import Request

    request = Request.checked("failure", {**params, "world_size": world_size, "timeout": 400})
    print(json.dumps(run_lab(request.run, request.params).to_dict()))


def launch(params: dict, world_size: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", f"from tests.test_labs_failure import _run; "
                                                 f"_run({params!r}, {world_size})"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def result() -> dict:
    out = launch(SMALL, 3)
    assert out["ok"], out
    return out


@pytest.mark.slow  # lab ranks
def test_the_resumed_run_ends_with_the_weights_of_one_never_killed(result):
    s = FailureSummary.model_validate(result["summary"])
    assert result["launcher"] == "torchrun" and s.world_size == 3
    assert s.restarts == 1 and s.kill_steps == [7] and s.kill_rank == 1
    assert s.same_weights and s.max_abs_diff == 0.0
    assert s.lost_steps == 3, "steps 4, 5 and 6: done after the checkpoint at 4, before the kill at 7"
    assert [r.step for r in s.restart] == [7] and min(s.restart[0].detect_s, s.restart[0].start_s) >= 0
    for lane in s.lanes:  # runs of steps: (first, last)
        redone = [(seg.step, seg.last_step) for seg in lane.segments if seg.kind == "redone"]
        kept = [(seg.step, seg.last_step) for seg in lane.segments if seg.kind == "kept"]
        assert redone == [(4, 6)] and kept == [(0, 3), (7, 11)], lane.rank
    assert s.save_s is not None and s.checkpoint_bytes > 0 and s.tau_opt_s > 0
    # Its launcher has exited: a folder left under a dead launcher's pid is this run's (or another
    # finished one's); another test's failure lab still running keeps its own meanwhile.
    left = [p for p in Path(tempfile.gettempdir()).glob(f"{PREFIX}*-*")
            if gone(int(p.name[len(PREFIX):].split("-")[0]), wait=0)]
    assert not left, "the run's folder is removed"


@pytest.mark.slow  # lab ranks
def test_torchrun_gives_up_after_max_restarts_and_says_why():
    out = launch({**SMALL, "max_restarts": 0}, 2)
    assert out["ok"] is False and out["kind"] == "crash" and out["rank"] == 1
    assert "--max-restarts 0" in out["message"]


# --------------------------------------------------------------------------
# The page


@pytest.mark.slow  # lab ranks
def test_the_run_gives_questions_built_from_its_own_figures(result):
    asks_its_questions("failure", result)  # the recorded run of tests/fixtures/runs is still what the lab writes


@pytest.mark.slow  # lab ranks
@pytest.mark.usefixtures("app_db")
@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_the_page_shows_the_work_lost_and_young_daly(result, lang):
    from academy import i18n

    run_id = finished_run("failure", result, params=result["params"], machine=result["machine"],
                          worker="labhost:1")
    at = open_page("labs", lang, state={"lab_run_id": run_id})
    assert not at.exception, at.exception
    assert [e for e in at.info if e.value == i18n.t("labs.look.failure", lang)]
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(charts) == 3  # the work on the clock, the same by step, Young/Daly
    rows = charts[0]["layout"]["meta"]["table"]["rows"]
    lost, redone = i18n.t("failure.work.lost", lang), i18n.t("failure.work.redone", lang)
    assert [row[3] for row in rows if row[1] == lost and row[0].endswith(" 0")] == ["4–6"]
    by_step = charts[1]["layout"]["meta"]["table"]["rows"]
    assert sorted((row[2], row[3]) for row in by_step if row[1] in (lost, redone)) == [(0, "4–6"), (1, "4–6")], \
        "steps 4 to 6 lost by attempt 0, redone by attempt 1"
    assert any(e.value.startswith(i18n.t("failure.same", lang, digest="")[:12]) for e in at.success)
