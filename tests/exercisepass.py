"""Learners who passed the exercises a certificate requires, for the certificate tests.

Through the store's own function (``academy.exercises.record_pass``, what the
worker calls on a passing report), each pass tied to a finished run of its
exercise, as in production, so that the certificate requirement is met the
real way instead of being switched off.
"""

from __future__ import annotations

from sqlmodel import Session

from academy import exercises
from academy.models import LabRun


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
