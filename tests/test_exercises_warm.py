"""Warm graders (issue #26): a sandbox started before the submission grades it as a fresh one would.

``grader.prestart`` starts the harness in the sandbox (PyTorch and every
exercise's preloads imported, ranks forked for every exercise's world sizes, as
many sets of each as an exercise that restarts its ranks needs)
with no submission, no plan and no exercise chosen (issue #35: one warm grader
serves every exercise); ``grade(warm=)`` then draws the seed, puts the file in
and writes the plan. The worker's pool of
such graders and a ``kill -9`` of one are in tests/test_lab_worker.py; the
sandbox's side (`sandbox.start_python`) in tests/test_sandbox.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from labs import exercises
from labs.exercises import grader
from tests.test_exercises import FIXTURES, ROOT, failing

pytestmark = pytest.mark.needs_sandbox  # slow, too


def _same(value):
    """A report without what differs between two gradings of one seed: the times taken
    (``duration_s``, and the trace's ``t_start``/``t_end`` of each step)."""
    if isinstance(value, dict):
        return {k: _same(v) for k, v in value.items() if k != "duration_s" and not k.startswith("t_")}
    if isinstance(value, list):
        return [_same(v) for v in value]
    return value


@pytest.mark.parametrize("source", ["reference", "ring_whole_buffer.py"])
def test_warm_and_fresh_grade_one_submission_the_same(source):
    """The reference passes and a whole-buffer ring fails its bytes rule, warm as fresh:
    the same report, checks and findings, for the same seed."""
    text = exercises.reference("ring-allreduce") if source == "reference" else (FIXTURES / source).read_text()
    with grader.prestart() as warm:
        assert warm.started.alive() and list(warm.started.inputs.iterdir()) == [], \
            "started before the submission exists"
        warmed = grader.grade("ring-allreduce", text, seed=11, warm=warm)
        assert not warm.started.alive(), "used once, for this submission, and gone"
    fresh = grader.grade("ring-allreduce", text, seed=11)
    assert _same(warmed.dump()) == _same(fresh.dump())
    assert warmed.status == ("passed" if source == "reference" else "failed")
    if source != "reference":
        assert failing(warmed) and all(f[0].check == "bytes" for f in failing(warmed).values())


def test_a_warm_grader_grades_one_job_from_stdin_and_exits(tmp_path):
    """``python -m labs.exercises warm``: one job line, the ``grade`` command's files and exit
    code; a second grader whose stdin closes with no job exits 3, its sandbox with it."""
    (tmp_path / "sub.py").write_text(exercises.reference("ring-allreduce"))
    out, events, log = tmp_path / "report.json", tmp_path / "events.jsonl", tmp_path / "run.log"
    job = {"argv": ["grade", "ring-allreduce", str(tmp_path / "sub.py"), "--json", "--events", str(events),
                    "--out", str(out)], "output": str(log)}
    warm = subprocess.run([sys.executable, "-m", "labs.exercises", "warm"], cwd=ROOT,
                          input=json.dumps(job) + "\n", capture_output=True, text=True, timeout=120)
    assert warm.returncode == 0, log.read_text()
    report = json.loads(out.read_text())
    assert report["status"] == "passed" and json.loads(log.read_text())["status"] == "passed"
    assert len(events.read_text().splitlines()) == len(report["cases"])
    idle = subprocess.run([sys.executable, "-m", "labs.exercises", "warm"], cwd=ROOT,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert idle.returncode == 3 and idle.stdout == ""


@pytest.mark.parametrize("exercise", ["broadcast", "sharded-optimizer", "save-and-resume"])
def test_one_warm_sandbox_grades_any_exercise(exercise):
    """Issue #35: the warm sandbox is started before the exercise is chosen, so the exercise
    graded last no longer decides which submissions are graded warm: another exercise's
    (sharded-optimizer: a preload of its own, torch._dynamo; save-and-resume: a fresh set of
    ranks for each restart, forked before the plan like the first) is graded in it, with the
    report a fresh grading gives; the groups and sets its plan leaves out are not used."""
    sets, preload = grader.warm_shape()
    ex = exercises.load(exercise)
    needs = grader.sets_needed(ex, grader.plan(ex, 5, grader.CASE_TIMEOUT_S)["groups"])
    assert all(n <= sets[world] for world, n in needs.items()) and set(getattr(ex, "PRELOAD", ())) <= set(preload)
    source = exercises.reference(exercise)
    with grader.prestart() as warm:
        assert warm.fits(ex, needs, grader.CASE_TIMEOUT_S, warm.mode)
        warmed = grader.grade(exercise, source, seed=5, warm=warm)
        assert not warm.started.alive(), "used once, and gone"
    fresh = grader.grade(exercise, source, seed=5)
    assert warmed.status == fresh.status == "passed", warmed.error
    assert [(c.id, c.status) for c in warmed.cases] == [(c.id, c.status) for c in fresh.cases]
