"""May this learner claim a certificate now? The one rule, asked by the store and by every page.

``certificates.store.issue_certificate`` refuses whatever ``eligibility`` does
not answer with ``eligible``; the Home page and the Certificate page show
what it answers, so neither can offer a certificate the store would refuse
(STYLE.md 14: a rule such as "passed" is one function).

The reasons, in the order they are checked (the first that holds is the answer):

1. ``disqualified``: an admin's "revoke and disqualify" blocks new
   certificates until an admin lifts it; nothing the learner does changes that.
2. ``already_issued``: the learner holds an active certificate for the course
   (``certificate_id``); a new name or language is a reissue.
3. ``quiz_missing``: no passed, finished, non-practice quiz attempt.
4. ``exercises_missing``: with ``certificate_requires_exercises`` on, the
   required exercises not passed yet (``missing``, in course order).

Otherwise ``eligible``, with the best passed attempt, which the new
certificate states.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlmodel import Session, col, select

from academy import exercises as exercise_store
from academy.models import Certificate, QuizAttempt
from academy.settings import get_settings
from quizzes.store import passed_attempt

Reason = Literal["eligible", "disqualified", "already_issued", "quiz_missing", "exercises_missing"]


@dataclass(frozen=True)
class Eligibility:
    """The answer: ``eligible``, or the first reason why not, with what that reason names."""

    reason: Reason
    attempt: QuizAttempt | None = None  # the best passed attempt, where there is one
    missing: tuple[str, ...] = ()  # exercises_missing: the required exercises not passed yet
    certificate_id: str | None = None  # already_issued: the active certificate

    @property
    def eligible(self) -> bool:
        return self.reason == "eligible"


def eligible_attempt(*, session: Session, learner_id: int) -> QuizAttempt | None:
    """The learner's best passed, finished, non-practice attempt (earliest of equals)."""
    return session.exec(
        select(QuizAttempt)
        .where(QuizAttempt.learner_id == learner_id, passed_attempt())
        .order_by(col(QuizAttempt.score).desc(), col(QuizAttempt.finished_at).asc())
    ).first()


def is_disqualified(*, session: Session, learner_id: int) -> bool:
    """Whether an admin's "revoke and disqualify" blocks new certificates."""
    return (
        session.exec(
            select(Certificate.id).where(
                Certificate.learner_id == learner_id,
                Certificate.course_id == get_settings().course_id,
                Certificate.disqualified == True,  # noqa: E712  (SQL, not Python truth)
            )
        ).first()
        is not None
    )


def active_certificate(*, session: Session, learner_id: int) -> Certificate | None:
    """The learner's active (not revoked) certificate for this course, if any."""
    return session.exec(
        select(Certificate).where(
            Certificate.learner_id == learner_id,
            Certificate.course_id == get_settings().course_id,
            col(Certificate.revoked_at).is_(None),
        )
    ).first()


def eligibility(*, session: Session, learner_id: int) -> Eligibility:
    """Whether ``learner_id`` may claim a certificate now, or the first reason not to."""
    attempt = eligible_attempt(session=session, learner_id=learner_id)
    if is_disqualified(session=session, learner_id=learner_id):
        return Eligibility("disqualified", attempt)
    active = active_certificate(session=session, learner_id=learner_id)
    if active is not None:
        return Eligibility("already_issued", attempt, certificate_id=active.id)
    if attempt is None:
        return Eligibility("quiz_missing")
    missing = exercise_store.missing_for_certificate(session=session, learner_id=learner_id)
    if missing:
        return Eligibility("exercises_missing", attempt, missing=tuple(missing))
    return Eligibility("eligible", attempt)
