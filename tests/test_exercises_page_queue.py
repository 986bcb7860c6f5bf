"""Exercise submissions through the real queue: a ``python -m academy.worker`` runs
``python -m labs.exercises grade`` on the stored source and records a pass only
for a passing report, in the same transaction as the result.

The sandbox is bubblewrap where it can start (CI runs as root), else the
explicit "none" mode: what is tested here is the queue's bookkeeping; the
sandbox has tests of its own. One worker serves the module (each test has
learners of its own): a worker's start and its first warm grader once, not
per test. The page test, which needs no worker, comes first, so that the
worker stops right after the last grading instead of starting a warm grader
no test uses.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from sqlmodel import select

from academy import exercises
from academy.db import session_scope
from academy.models import ExercisePass
from tests import exercisepass
from tests.factories import learner, wait_for_run

FIXTURES = Path(__file__).parent / "fixtures"
MINE = (FIXTURES / "exercise_page" / "ring_mine.py").read_text()
WHOLE_BUFFER = (FIXTURES / "exercises" / "ring_whole_buffer.py").read_text()


@pytest.fixture(scope="module", autouse=True)
def worker_settings():
    """Before the module's worker starts (autouse fixtures come first): the mode it passes to
    the grader, and its warm grader (the product's default; tests' workers start none). No
    warm lab process: no lab runs here, and it would import PyTorch for nothing."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LAB_WARM_EXERCISES", "1")
        patch.setenv("LAB_WARM_POOL", "0")
        patch.setenv("EXERCISE_SANDBOX", exercisepass.sandbox_mode())
        yield






def passes_of(learner_id: int) -> list[ExercisePass]:
    with session_scope() as session:
        return list(session.exec(select(ExercisePass).where(ExercisePass.learner_id == learner_id)))


@pytest.mark.parametrize("lang", ["zh", "nl"])
def test_the_real_exercises_in_each_language_and_labs_keep_to_their_own_runs(app_db, lang):  # noqa: ARG001
    """Without the stand-in: the page lists the exercises in place with their texts in ``lang``;
    the Labs page neither lists an exercise submission nor takes it for its own running lab."""
    from academy import i18n
    from labs.exercises import messages
    from tests.apptest import open_page

    me = learner()
    at = open_page("exercises", lang, me, exercise="broadcast")
    assert not at.exception, at.exception
    for ex in exercises.catalog():
        assert any(m.value.startswith(f"**{messages.exercise(ex, lang)['title']}**") for m in at.markdown), ex
    assert messages.exercise("broadcast", lang)["title"] in [h.value for h in at.header]
    [editor] = at.get("component_instance")  # the code editor, with the starter in it
    assert json.loads(editor.proto.json_args)["code"] == exercises.starter("broadcast")
    exercises.submit(learner_id=me, exercise="broadcast", source="def broadcast(tensor, src):\n    pass\n", lang=lang)
    labs = open_page("labs", lang, me)
    assert not labs.exception, labs.exception
    assert not [b for b in labs.button if b.label == i18n.t("labs.cancel", lang)]
    assert not [b for b in labs.button if b.key and b.key.startswith("past_")]


@pytest.mark.usefixtures("shared_lab_worker")
def test_a_passing_submission_records_the_pass_and_a_failing_one_does_not():
    me = learner()
    failing = exercises.submit(learner_id=me, exercise="ring-allreduce", source=WHOLE_BUFFER, lang="nl")
    run = wait_for_run(failing, timeout=120, poll=0.3)
    assert run.status == "done", run.error
    assert run.result["status"] == "failed"
    # The whole-buffer ring gets every value right and fails on the bytes it sent (as the
    # router counted them, outside the learner's processes).
    failed_checks = {f["check"] for c in run.result["cases"] for f in c["findings"] if not f["passed"]}
    assert failed_checks == {"bytes"}, failed_checks
    assert passes_of(me) == []

    passing = exercises.submit(learner_id=me, exercise="ring-allreduce", source=MINE, lang="en")
    run = wait_for_run(passing, timeout=120, poll=0.3)
    assert run.status == "done", run.error
    assert run.result["status"] == "passed" and run.result["cases"]
    assert run.result["sandbox"] == os.environ["EXERCISE_SANDBOX"]  # the setting reached the grader
    assert (run.progress or {}).get("step") == (run.progress or {}).get("total_steps") == len(run.result["cases"])
    assert exercises.case_progress(run.progress) == (len(run.result["cases"]),) * 2
    [row] = passes_of(me)
    assert (row.exercise, row.run_id) == ("ring-allreduce", passing)

    again = exercises.submit(learner_id=me, exercise="ring-allreduce", source=MINE, lang="en")
    assert wait_for_run(again, timeout=120, poll=0.3).result["status"] == "passed"
    assert [p.run_id for p in passes_of(me)] == [passing]  # the first pass stays, one row


@pytest.mark.usefixtures("shared_lab_worker")
def test_code_that_cannot_be_graded_is_a_report_with_its_reason_not_a_pass():
    me = learner()
    run = wait_for_run(exercises.submit(learner_id=me, exercise="broadcast", source="def broadcast(:\n", lang="en"), timeout=120, poll=0.3)
    assert run.status == "done", run.error
    assert run.result["status"] == "error" and run.result["error"]["key"] == "syntax_error"
    assert passes_of(me) == []
