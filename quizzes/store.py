"""Quiz attempts in the database: start, answer, finish, review.

Plain keyword-only functions that take a Session (STYLE.md, 8). Each write
commits at once, so a refresh or a crash loses nothing; a refused write rolls
the session back. Errors are QuizError subclasses (``academy.errors.UserError``):
a catalog key the page shows with ``ui.error_text``.

Two tabs of one learner are the concurrency to survive:

* answers: the UniqueConstraint(attempt_id, position) of QuizAnswer lets
  exactly one answer per question in; the loser gets the stored answer's
  feedback with ``duplicate=True``;
* finishing: the status moves from in_progress to finished in one
  conditional UPDATE, which only one transaction can win; the score is
  computed inside that transaction, and the other tab reads the winner's;
* an answer racing a finish: the answer re-reads the attempt after its
  INSERT, inside the same write transaction, and gives up if it is finished;
* starting: there is at most one graded attempt in progress per learner;
  two tabs starting at once both end up on the older of the two.

Grading policy: the best graded attempt counts (``best_attempt``). What "a
passed attempt" is, is ``passed_attempt``: the one definition that the home
page, ``has_passed`` and the certificates read.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select, update

from academy.models import QuizAnswer, QuizAttempt, utcnow
from academy.settings import get_settings
from quizzes.bank import Bank, load_bank
from quizzes.engine import (
    Feedback,
    PublicQuestion,
    QuestionUnavailable,
    QuizError,
    draw_attempt,
    grade,
    normalize_response,
    passed,
    plan_question,
    public_question,
    score_percent,
)

IN_PROGRESS = "in_progress"
FINISHED = "finished"


class AttemptNotFound(QuizError, LookupError):
    pass


class NotYourAttempt(QuizError, PermissionError):
    pass


class AttemptFinished(QuizError):
    """The attempt is finished: answers are final."""


class AttemptNotFinished(QuizError):
    """Review and missed questions exist only for finished attempts."""


class InvalidPosition(QuizError, IndexError):
    pass


class NoQuestions(QuizError, ValueError):
    pass


@dataclass(frozen=True)
class AttemptSummary:
    attempt_id: int
    practice: bool  # practice attempts are ungraded: passed is None
    status: str  # in_progress | finished
    language: str
    total: int  # questions in the attempt
    answered: int
    correct: int
    score: float | None  # percent, set when finished
    passed: bool | None
    started_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class ReviewItem:
    position: int
    question: PublicQuestion | None  # None when the bank no longer has it
    response: Any  # as stored (None: unanswered)
    correct: bool  # as graded when answered
    credit: float
    feedback: Feedback | None  # full feedback, unanswered ones included


def _bank(bank: Bank | None) -> Bank:
    return bank if bank is not None else load_bank()


def _get_attempt(
    session: Session, attempt_id: int, learner_id: int | None, *, lock: bool = False
) -> QuizAttempt:
    statement = select(QuizAttempt).where(QuizAttempt.id == attempt_id)
    if lock:  # PostgreSQL: serialise answers and finishing on the attempt row
        statement = statement.with_for_update()
    attempt = session.exec(statement).first()
    if attempt is None:
        raise AttemptNotFound("quiz_errors.attempt_not_found")
    if learner_id is not None and attempt.learner_id != learner_id:
        raise NotYourAttempt("quiz_errors.not_your_attempt")
    return attempt


def _answers(session: Session, attempt_id: int) -> list[QuizAnswer]:
    return list(
        session.exec(
            select(QuizAnswer)
            .where(QuizAnswer.attempt_id == attempt_id)
            .order_by(col(QuizAnswer.position))
        )
    )


def _summary(attempt: QuizAttempt, answers: list[QuizAnswer]) -> AttemptSummary:
    assert attempt.id is not None
    return AttemptSummary(
        attempt_id=attempt.id,
        practice=attempt.practice,
        status=attempt.status,
        language=attempt.language,
        total=len(attempt.plan),
        answered=len(answers),
        correct=sum(a.correct for a in answers),
        score=attempt.score,
        passed=attempt.passed,
        started_at=attempt.started_at,
        finished_at=attempt.finished_at,
    )


# ------------------------------------------------------------------- start


def current_attempt(
    *, session: Session, learner_id: int, practice: bool = False
) -> QuizAttempt | None:
    """The learner's attempt in progress (graded, or practice), to resume."""
    return session.exec(
        select(QuizAttempt)
        .where(
            QuizAttempt.learner_id == learner_id,
            QuizAttempt.status == IN_PROGRESS,
            QuizAttempt.practice == practice,
        )
        .order_by(col(QuizAttempt.id))
    ).first()


def start_attempt(
    *,
    session: Session,
    learner_id: int,
    lang: str,
    seed: int | None = None,
    k: int | None = None,
    practice_question_ids: list[str] | None = None,
    bank: Bank | None = None,
) -> QuizAttempt:
    """Start a graded attempt, or resume the one in progress.

    With `practice_question_ids` it starts an ungraded practice attempt with
    just those questions (fresh values and shuffles); a practice attempt
    still open is closed first.
    """
    bank = _bank(bank)
    practice = practice_question_ids is not None
    if not practice:
        existing = current_attempt(session=session, learner_id=learner_id)
        if existing is not None:
            return existing
    seed = secrets.randbelow(2**31) if seed is None else seed
    if practice:
        ids = [qid for qid in dict.fromkeys(practice_question_ids or []) if qid in bank.questions]
        plan = [plan_question(bank.questions[qid], seed=seed) for qid in ids]
        _close_practice(session=session, learner_id=learner_id)
    else:
        plan = draw_attempt(bank, seed=seed, k=k or get_settings().quiz_questions)
    if not plan:
        raise NoQuestions("quiz_errors.no_questions")
    attempt = QuizAttempt(
        learner_id=learner_id,
        course_id=get_settings().course_id,
        seed=seed,
        language=lang,
        plan=plan,
        practice=practice,
    )
    session.add(attempt)
    try:
        session.commit()
    except IntegrityError:
        # Another tab started one between our check and our insert: the unique
        # index on open attempts kept it to one, and both tabs resume that one.
        session.rollback()
        other = current_attempt(session=session, learner_id=learner_id, practice=practice)
        if other is None:
            raise
        return other
    session.refresh(attempt)
    return attempt


def _close_practice(*, session: Session, learner_id: int) -> None:
    while (old := current_attempt(session=session, learner_id=learner_id, practice=True)) is not None:
        assert old.id is not None
        finish_attempt(session=session, attempt_id=old.id, learner_id=learner_id)


# ------------------------------------------------------------------ answer


def record_answer(
    *,
    session: Session,
    attempt_id: int,
    learner_id: int,
    position: int,
    response: Any,
    lang: str,
    bank: Bank | None = None,
    seconds: float | None = None,
) -> Feedback:
    """Grade and store the answer to question `position` (0-based); commits.

    ``seconds``: how long the learner took, as the page measured it (the review
    schedule, ``quizzes.review``, rates a quick or slow right answer by it).

    Raises NumberParseError or InvalidResponse for an unreadable answer
    (nothing stored: the learner may try again), AttemptFinished,
    NotYourAttempt, AttemptNotFound or InvalidPosition. A second answer to
    the same position is not stored: the first one's feedback comes back
    with ``duplicate=True``.
    """
    bank = _bank(bank)
    attempt = _get_attempt(session, attempt_id, learner_id, lock=True)
    if attempt.status != IN_PROGRESS:
        session.rollback()
        raise AttemptFinished("quiz_errors.attempt_finished")
    if not 0 <= position < len(attempt.plan):
        session.rollback()
        raise InvalidPosition("quiz_errors.invalid_position")
    item = attempt.plan[position]
    try:
        stored = normalize_response(item, bank, response, lang)
        feedback = grade(item, bank, stored, lang)
    except QuizError:
        session.rollback()
        raise
    session.add(
        QuizAnswer(
            attempt_id=attempt_id,
            position=position,
            question_id=item["question_id"],
            response=stored,
            correct=feedback.correct,
            credit=feedback.credit,
            seconds=seconds,
        )
    )
    try:
        session.flush()
    except IntegrityError:
        session.rollback()
        return _stored_feedback(session, attempt_id, position, item, bank, lang)
    # Re-read the attempt inside our write transaction: a finish that won
    # the race before our INSERT means the answer comes too late.
    status = session.exec(select(QuizAttempt.status).where(QuizAttempt.id == attempt_id)).one()
    if status != IN_PROGRESS:
        session.rollback()
        raise AttemptFinished("quiz_errors.attempt_finished")
    session.commit()
    return feedback


def _stored_feedback(
    session: Session, attempt_id: int, position: int, item: dict[str, Any], bank: Bank, lang: str
) -> Feedback:
    answer = session.exec(
        select(QuizAnswer).where(QuizAnswer.attempt_id == attempt_id, QuizAnswer.position == position)
    ).one()
    feedback = grade(item, bank, answer.response, lang)
    return replace(feedback, correct=answer.correct, credit=answer.credit, duplicate=True)


def answered_feedback(
    *, session: Session, attempt_id: int, learner_id: int, lang: str, bank: Bank | None = None
) -> dict[int, Feedback]:
    """Feedback of every answered position (to redraw a resumed attempt).

    Only answered questions: the key of the others stays on the server.
    """
    bank = _bank(bank)
    attempt = _get_attempt(session, attempt_id, learner_id)
    out: dict[int, Feedback] = {}
    for answer in _answers(session, attempt_id):
        try:
            feedback = grade(attempt.plan[answer.position], bank, answer.response, lang)
        except QuestionUnavailable:
            continue
        out[answer.position] = replace(feedback, correct=answer.correct, credit=answer.credit)
    return out


def answered_positions(*, session: Session, attempt_id: int, learner_id: int) -> set[int]:
    """The answered positions of an attempt: what the quiz page needs for its
    progress bar and navigation, without grading anything."""
    _get_attempt(session, attempt_id, learner_id)
    return set(
        session.exec(select(QuizAnswer.position).where(QuizAnswer.attempt_id == attempt_id)).all()
    )


def position_feedback(
    *, session: Session, attempt_id: int, learner_id: int, position: int, lang: str,
    bank: Bank | None = None,
) -> Feedback | None:
    """Feedback of the stored answer at one position, graded as stored; None
    when it is unanswered or its question is gone from the bank. The page
    calls this only for a question whose feedback it does not already hold
    from ``record_answer`` (a refresh, another language)."""
    attempt = _get_attempt(session, attempt_id, learner_id)
    answer = session.exec(
        select(QuizAnswer).where(QuizAnswer.attempt_id == attempt_id, QuizAnswer.position == position)
    ).first()
    if answer is None or not 0 <= position < len(attempt.plan):
        return None
    try:
        feedback = grade(attempt.plan[position], _bank(bank), answer.response, lang)
    except QuestionUnavailable:
        return None
    return replace(feedback, correct=answer.correct, credit=answer.credit)


# ------------------------------------------------------------------ finish


def finish_attempt(
    *,
    session: Session,
    attempt_id: int,
    learner_id: int,
    pass_percent: float | None = None,
) -> AttemptSummary:
    """Close an attempt and score it, once: unanswered questions count wrong.

    Idempotent: a second call (another tab) returns the same result.
    Practice attempts get a score but no pass/fail.
    """
    _get_attempt(session, attempt_id, learner_id)
    claimed = session.exec(
        update(QuizAttempt)
        .where(col(QuizAttempt.id) == attempt_id, col(QuizAttempt.status) == IN_PROGRESS)
        .values(status=FINISHED, finished_at=utcnow())
    )
    if claimed.rowcount == 1:
        # We hold the write lock (SQLite) or the row lock (PostgreSQL): no
        # answer can slip in between counting and storing the score.
        attempt = _get_attempt(session, attempt_id, learner_id)
        session.refresh(attempt)
        answers = _answers(session, attempt_id)
        total, correct = len(attempt.plan), sum(a.correct for a in answers)
        mark = get_settings().quiz_pass_percent if pass_percent is None else pass_percent
        attempt.score = score_percent(correct, total)
        attempt.passed = None if attempt.practice else passed(correct, total, mark)
        session.add(attempt)
        session.commit()
    else:
        session.rollback()
    attempt = _get_attempt(session, attempt_id, learner_id)
    session.refresh(attempt)
    return _summary(attempt, _answers(session, attempt_id))


# ----------------------------------------------------------------- history


def attempt_summary(*, session: Session, attempt_id: int, learner_id: int) -> AttemptSummary:
    attempt = _get_attempt(session, attempt_id, learner_id)
    return _summary(attempt, _answers(session, attempt_id))


def attempt_history(
    *, session: Session, learner_id: int, include_practice: bool = False
) -> list[AttemptSummary]:
    """The learner's attempts, newest first (graded only unless asked)."""
    statement = select(QuizAttempt).where(QuizAttempt.learner_id == learner_id)
    if not include_practice:
        statement = statement.where(col(QuizAttempt.practice).is_(False))
    attempts = list(session.exec(statement.order_by(col(QuizAttempt.id).desc())))
    ids = [a.id for a in attempts]
    by_attempt: dict[int, list[QuizAnswer]] = {i: [] for i in ids if i is not None}
    if ids:
        for answer in session.exec(select(QuizAnswer).where(col(QuizAnswer.attempt_id).in_(ids))):
            by_attempt[answer.attempt_id].append(answer)
    return [_summary(a, by_attempt.get(a.id or 0, [])) for a in attempts]


def best_attempt(*, session: Session, learner_id: int) -> AttemptSummary | None:
    """The finished graded attempt with the highest score (earliest on a tie)."""
    return best_of(attempt_history(session=session, learner_id=learner_id))


def best_of(history: list[AttemptSummary]) -> AttemptSummary | None:
    """``best_attempt`` from a history already read (newest first), so a page
    that shows both reads the attempts once."""
    finished = [s for s in history if s.status == FINISHED and s.score is not None]
    if not finished:
        return None
    return max(reversed(finished), key=lambda s: s.score or 0.0)


def passed_attempt() -> ColumnElement[bool]:
    """The pass rule as a SQL condition on QuizAttempt: a finished, graded
    (non-practice) attempt of this course that reached the pass mark.

    ``finish_attempt`` stores the mark's verdict (``engine.passed``) in
    ``QuizAttempt.passed``; everything that asks whether an attempt counts as
    passed (``has_passed``, certificate eligibility) filters with this.
    """
    return and_(
        QuizAttempt.course_id == get_settings().course_id,
        QuizAttempt.status == FINISHED,
        col(QuizAttempt.practice).is_(False),
        col(QuizAttempt.passed).is_(True),
    )


def has_passed(*, session: Session, learner_id: int) -> bool:
    statement = select(QuizAttempt.id).where(QuizAttempt.learner_id == learner_id, passed_attempt())
    return session.exec(statement).first() is not None


def missed_questions(
    *, session: Session, attempt_id: int, learner_id: int | None = None
) -> list[str]:
    """Ids of the questions answered wrong or left out, in attempt order.

    With `learner_id`, refuses another learner's attempt (NotYourAttempt).
    """
    attempt = _get_attempt(session, attempt_id, learner_id)
    if attempt.status != FINISHED:
        raise AttemptNotFinished("quiz_errors.attempt_not_finished")
    right = {a.position for a in _answers(session, attempt_id) if a.correct}
    return [
        item["question_id"] for pos, item in enumerate(attempt.plan) if pos not in right
    ]


def review(
    *,
    session: Session,
    attempt_id: int,
    lang: str,
    learner_id: int | None = None,
    bank: Bank | None = None,
) -> list[ReviewItem]:
    """Every question of a finished attempt with the response and full feedback.

    With `learner_id`, refuses another learner's attempt (NotYourAttempt).
    """
    bank = _bank(bank)
    attempt = _get_attempt(session, attempt_id, learner_id)
    if attempt.status != FINISHED:
        raise AttemptNotFinished("quiz_errors.attempt_not_finished")
    answers = {a.position: a for a in _answers(session, attempt_id)}
    items = []
    for pos, item in enumerate(attempt.plan):
        answer = answers.get(pos)
        try:
            question = public_question(item, bank, lang)
            feedback = grade(item, bank, answer.response if answer else None, lang)
        except QuestionUnavailable:
            question, feedback = None, None
        if feedback is not None and answer is not None:
            feedback = replace(feedback, correct=answer.correct, credit=answer.credit)
        items.append(
            ReviewItem(
                position=pos,
                question=question,
                response=answer.response if answer else None,
                correct=answer.correct if answer else False,
                credit=answer.credit if answer else 0.0,
                feedback=feedback,
            )
        )
    return items
