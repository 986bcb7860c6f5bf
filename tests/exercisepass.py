"""Passed exercises for the tests: learners who passed the ones a certificate requires, and
real passing reports of each exercise's reference, graded once per process.

A pass goes through the store's own function (``academy.exercises.record_pass``,
what the worker calls on a passing report), each tied to a finished run of its
exercise, as in production, so that the certificate requirement is met the
real way instead of being switched off.

`passing_report` is for the tests that only read a passing report (its trace,
its figures, how a page draws it): the grading is real, in the sandbox where it
can start (`sandbox_mode`), and shared by every test of the process that asks
for the same grading. Tests about grading itself (warm against fresh, the
worker, the command line) grade their own.
"""

from __future__ import annotations

import functools
import os

from sqlmodel import Session

from academy import exercises
from academy.models import LabRun
from labs.exercises.report import GradeReport


def pass_required_exercises(session: Session, learner_id: int) -> list[str]:
    """Record a passing run of each required exercise for the learner; commits; their ids."""
    done = list(exercises.required())
    for ex in done:
        run = LabRun(learner_id=learner_id, lab=exercises.LAB, params={"exercise": ex, "lang": "en"},
                     status="done", source="# passed in a test\n", result={"exercise": ex, "status": "passed"})
        session.add(run)
        session.flush()
        exercises.record_pass(session=session, learner_id=learner_id, exercise=ex, run_id=run.id)
    session.commit()
    return done


def pass_required_exercises_of(database_url: str, email: str) -> list[str]:
    """The same for a learner of a running server, found by e-mail (browser journeys)."""
    from sqlmodel import select

    from academy.db import make_engine
    from academy.models import Learner

    engine = make_engine(database_url)
    try:
        with Session(engine) as session:
            learner_id = session.exec(select(Learner.id).where(Learner.email == email)).one()
            return pass_required_exercises(session, learner_id)
    finally:
        engine.dispose()


def sandbox_mode() -> str:
    """The real sandbox where it can start here (CI runs as root with bwrap), else explicitly none."""
    from labs.sandbox import run as sandbox

    try:
        sandbox.check_available("bwrap")
        return "bwrap"
    except sandbox.SandboxUnavailable:
        return "none"


def passing_report(exercise_id: str, *, seed: int = 0, case_ids: tuple[str, ...] | None = None,
                   **env: str) -> GradeReport:
    """The report of ``exercise_id``'s reference graded with ``seed`` (on ``case_ids`` only, if
    given; with the ``EXERCISE_*`` settings in ``env``), asserted passing. Each distinct
    grading runs once per process; every caller gets its own copy."""
    return GradeReport.model_validate_json(_graded(exercise_id, seed, case_ids, tuple(sorted(env.items()))))


@functools.cache
def _graded(exercise_id: str, seed: int, case_ids: tuple[str, ...] | None, env: tuple[tuple[str, str], ...]) -> str:
    from labs.exercises import grader, reference

    saved = {key: os.environ.get(key) for key, _ in env}
    os.environ.update(dict(env))
    try:
        report = grader.grade(exercise_id, reference(exercise_id), seed=seed, mode=sandbox_mode(),
                              case_ids=list(case_ids) if case_ids else None)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    assert report.status == "passed", report.model_dump_json()[:2000]
    return report.model_dump_json()
