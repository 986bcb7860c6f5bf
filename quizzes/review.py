"""The review queue: what a learner answered comes back when they are about to forget it (issue #42).

Every question a signed-in learner has answered (a bank question, in any quiz
attempt) and every question built from their own lab runs (``quizzes.own``)
is a `~academy.models.ReviewCard`, scheduled by FSRS (the ``fsrs`` package:
``fsrs.Scheduler`` at ``Settings.review_retention``, without fuzz, so that a
schedule can be checked) and rated by `rating` from correctness and time.

`sync` brings the queue up to date, and the pages call it before they read
it: the newest finished run of each lab with templates gets its questions
(due at once; a newer run's question retires the older run's card of the
same template), and each quiz answer not yet applied is applied, once, in the
order it was given (``ReviewLog.answer_id`` is unique). With nothing new it
only reads.

Two devices, one schedule; the database decides:

* a card is added once: the unique constraints of ReviewCard and an
  ``INSERT ... ON CONFLICT DO NOTHING``;
* a quiz answer is applied once: its log row is inserted first, and a second
  session's insert of the same ``answer_id`` does nothing (PostgreSQL makes
  it wait for the first to commit; SQLite has one writer at a time);
* an answer on the Review page is applied only to the card as it was shown:
  the UPDATE is conditional on ``reps``, the number of reviews applied, so of
  two devices answering the same card at once one wins and the other is told
  so (``Answered.applied`` False) with the card's schedule as the winner left it.

``now`` is a parameter everywhere (the pages pass `clock`), so tests run on
a fixed clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from fsrs import Card, Rating, Scheduler, State
from sqlalchemy import exists, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import aliased
from sqlmodel import Session, col, select

from academy.models import QuizAnswer, QuizAttempt, ReviewCard, ReviewLog, RunQuestion, utcnow
from academy.settings import get_settings
from quizzes import own
from quizzes.bank import Bank, load_bank
from quizzes.engine import (
    Feedback,
    PublicQuestion,
    QuestionUnavailable,
    QuizError,
    grade,
    plan_question,
    public_question,
)
from quizzes.templates import Templates, load_templates

RETRIES = 5  # a quiz answer re-read and re-applied when another session changed its card meanwhile


class CardNotFound(QuizError, LookupError):
    """No such card in this learner's queue."""


def clock() -> datetime:
    """Now, in UTC: what the pages pass as ``now`` (a test replaces it)."""
    return utcnow()


@lru_cache(maxsize=4)
def _scheduler(retention: float) -> Scheduler:
    return Scheduler(desired_retention=retention, enable_fuzzing=False)


def scheduler() -> Scheduler:
    """The FSRS scheduler at ``Settings.review_retention``, without fuzz."""
    return _scheduler(get_settings().review_retention)


def rating(*, correct: bool, seconds: float | None, computed: bool = False) -> Rating:
    """Again when wrong; when right, Easy within ``Settings.review_easy_s``, Hard after
    more than ``review_hard_s``, else Good (both times ``review_compute_factor`` longer
    for a question that asks for a computation). An answer of unknown duration is Good."""
    if not correct:
        return Rating.Again
    settings = get_settings()
    factor = settings.review_compute_factor if computed else 1.0
    if seconds is None:
        return Rating.Good
    if seconds <= settings.review_easy_s * factor:
        return Rating.Easy
    if seconds > settings.review_hard_s * factor:
        return Rating.Hard
    return Rating.Good


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


def _fsrs_card(row: ReviewCard) -> Card:
    return Card(card_id=row.id, state=State(row.state), step=row.step, stability=row.stability,
                difficulty=row.difficulty, due=_utc(row.due),
                last_review=_utc(row.last_review) if row.last_review else None)


def _reviewed(row: ReviewCard, rated: Rating, at: datetime) -> dict[str, Any]:
    """The card's columns after a review rated ``rated`` at ``at`` (never before its last review)."""
    when = max(_utc(at), _utc(row.last_review)) if row.last_review else _utc(at)
    card, _log = scheduler().review_card(_fsrs_card(row), rated, review_datetime=when)
    return {"state": int(card.state), "step": card.step, "stability": card.stability,
            "difficulty": card.difficulty, "due": card.due, "last_review": card.last_review,
            "reps": row.reps + 1}


def _insert_ignore(session: Session, model: Any, **values: Any) -> bool:
    """INSERT that does nothing where a unique constraint already holds the row; whether it
    inserted. (RETURNING says so on every driver; a rowcount need not: psycopg's is -1 here.)"""
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    table = model.__table__
    statement = dialect.insert(table).values(**values).on_conflict_do_nothing().returning(table.c.id)
    return session.exec(statement).first() is not None


# ------------------------------------------------------------------- sync


@dataclass(frozen=True)
class Synced:
    questions: int  # questions built from runs just now
    answers: int  # quiz answers applied just now


def sync(*, session: Session, learner_id: int, now: datetime | None = None, bank: Bank | None = None,
         templates: Templates | None = None) -> Synced:
    """Bring the learner's queue up to date (see the module docstring); commits what it adds."""
    now = now or clock()
    templates = templates if templates is not None else load_templates()
    made = 0
    labs = sorted({t.lab for t in templates.templates.values()})
    for run in own.newest_runs(session=session, learner_id=learner_id, labs=labs):
        made += len(own.add_for_run(session=session, run=run, templates=templates))
    _cards_for_run_questions(session, learner_id, now, retire=made > 0)
    return Synced(questions=made, answers=_apply_quiz_answers(session, learner_id, bank))


def _cards_for_run_questions(session: Session, learner_id: int, now: datetime, *, retire: bool) -> None:
    """A card, due now, for each run question without one; with ``retire``, retire the cards
    of questions that a newer run of the same template has replaced."""
    missing = session.exec(
        select(RunQuestion.id).where(RunQuestion.learner_id == learner_id,
                                     ~exists().where(ReviewCard.run_question_id == RunQuestion.id))).all()
    for run_question_id in missing:
        _insert_ignore(session, ReviewCard, learner_id=learner_id, run_question_id=run_question_id, due=now,
                       state=int(State.Learning), step=0, reps=0, retired=False, created_at=now)
    if retire:
        newer = aliased(RunQuestion)
        replaced = select(RunQuestion.id).where(
            RunQuestion.learner_id == learner_id,
            exists().where(newer.learner_id == RunQuestion.learner_id, newer.template == RunQuestion.template,
                           newer.run_id > RunQuestion.run_id))
        session.exec(update(ReviewCard).where(ReviewCard.learner_id == learner_id, col(ReviewCard.retired).is_(False),
                                              col(ReviewCard.run_question_id).in_(replaced)).values(retired=True))
    if missing or retire:
        session.commit()


def _apply_quiz_answers(session: Session, learner_id: int, bank: Bank | None) -> int:
    """Apply every quiz answer of the learner that no log row records yet, oldest first
    (the bank is read only when there is one: Home, which syncs, need not load it)."""
    pending = session.exec(
        select(QuizAnswer).join(QuizAttempt, col(QuizAttempt.id) == QuizAnswer.attempt_id)
        .where(QuizAttempt.learner_id == learner_id,
               ~exists().where(ReviewLog.answer_id == QuizAnswer.id))
        .order_by(col(QuizAnswer.answered_at), col(QuizAnswer.id))).all()
    if not pending:
        return 0
    bank = bank if bank is not None else load_bank()
    return sum(_apply_quiz_answer(session, learner_id, answer, bank) for answer in pending)


def _apply_quiz_answer(session: Session, learner_id: int, answer: QuizAnswer, bank: Bank) -> bool:
    """One quiz answer as a review of its question's card (made if need be, retired if the bank
    no longer has the question); False when another session applied it first."""
    question = bank.questions.get(answer.question_id)
    rated = rating(correct=answer.correct, seconds=answer.seconds,
                   computed=question is None or question.type == "numeric")
    for _ in range(RETRIES):
        _insert_ignore(session, ReviewCard, learner_id=learner_id, question_id=answer.question_id,
                       due=answer.answered_at, state=int(State.Learning), step=0, reps=0,
                       retired=question is None, created_at=answer.answered_at)
        row = session.exec(select(ReviewCard).where(ReviewCard.learner_id == learner_id,
                                                    ReviewCard.question_id == answer.question_id)
                           .execution_options(populate_existing=True)).one()
        if not _insert_ignore(session, ReviewLog, card_id=row.id, learner_id=learner_id, answer_id=answer.id,
                              rating=int(rated), correct=answer.correct, seconds=answer.seconds,
                              reviewed_at=answer.answered_at):
            session.rollback()  # applied by another session
            return False
        values = _reviewed(row, rated, answer.answered_at)
        done = session.exec(update(ReviewCard).where(col(ReviewCard.id) == row.id, col(ReviewCard.reps) == row.reps)
                            .values(**values)).rowcount
        if done == 1:
            session.commit()
            return True
        session.rollback()  # the card changed under us: read it again
    return False


# ------------------------------------------------------------------- queue


@dataclass(frozen=True)
class Item:
    """A card as the Review page lists it."""

    card_id: int
    reps: int  # the reviews applied so far: an answer to this showing is applied only while it holds
    due: datetime
    question_id: str | None  # a bank question, or
    run_question_id: int | None  # a question built from a run
    topic: str  # the lesson section it comes from
    lab: str | None = None
    run_id: int | None = None


def queue(*, session: Session, learner_id: int, now: datetime | None = None, upcoming: int = 20,
          bank: Bank | None = None, templates: Templates | None = None) -> tuple[list[Item], list[Item]]:
    """(due now, earliest due first; the next ``upcoming`` not due yet). Cards whose question
    the bank or the templates no longer have are left out."""
    now = now or clock()
    templates = templates if templates is not None else load_templates()
    rows = session.exec(
        select(ReviewCard, RunQuestion).outerjoin(RunQuestion, col(RunQuestion.id) == ReviewCard.run_question_id)
        .where(ReviewCard.learner_id == learner_id, col(ReviewCard.retired).is_(False))
        .order_by(col(ReviewCard.due), col(ReviewCard.id))).all()
    items = []
    if bank is None and any(asked is None for _, asked in rows):
        bank = load_bank()  # only for a queue with bank questions
    for card, asked in rows:
        if asked is None:
            assert bank is not None
            question = bank.questions.get(card.question_id or "")
            if question is not None:
                items.append(Item(card.id, card.reps, _utc(card.due), card.question_id, None, question.topic))
        elif (template := templates.templates.get(asked.template)) is not None:
            items.append(Item(card.id, card.reps, _utc(card.due), None, asked.id, template.topic,
                              lab=asked.lab, run_id=asked.run_id))
    due = [i for i in items if i.due <= now]
    return due, [i for i in items if i.due > now][:upcoming]


def due_count(*, session: Session, learner_id: int, now: datetime | None = None, bank: Bank | None = None,
              templates: Templates | None = None) -> int:
    """How many of the learner's questions are due now (what Home shows)."""
    due, _ = queue(session=session, learner_id=learner_id, now=now, upcoming=0, bank=bank, templates=templates)
    return len(due)


def _asked(session: Session, run_question_id: int | None) -> RunQuestion:
    asked = session.get(RunQuestion, run_question_id) if run_question_id is not None else None
    if asked is None:
        raise CardNotFound("quiz_errors.card_unavailable")
    return asked


def new_plan(*, session: Session, item: Item, seed: int, bank: Bank | None = None,
             templates: Templates | None = None) -> dict[str, Any]:
    """One showing of a card's question, kept on the server: a bank question with values and
    options drawn afresh, a run question with its options reshuffled."""
    try:
        if item.question_id is not None:
            bank = bank if bank is not None else load_bank()
            return plan_question(bank.questions[item.question_id], seed=seed)
        return own.plan(_asked(session, item.run_question_id), seed=seed, templates=templates)
    except (KeyError, QuestionUnavailable):
        raise CardNotFound("quiz_errors.card_unavailable") from None


def shown(*, session: Session, item: Item, plan: dict[str, Any], lang: str, bank: Bank | None = None,
          templates: Templates | None = None) -> PublicQuestion:
    """What the browser may see of a showing in ``lang``: texts, numbers, opaque keys."""
    try:
        if item.question_id is not None:
            return public_question(plan, bank if bank is not None else load_bank(), lang)
        return own.public_question(_asked(session, item.run_question_id), plan, lang, templates)
    except QuestionUnavailable:
        raise CardNotFound("quiz_errors.card_unavailable") from None


def _grade(session: Session, card: ReviewCard, plan: dict[str, Any], response: Any, lang: str,
           bank: Bank | None, templates: Templates | None) -> Feedback:
    try:
        if card.question_id is not None:
            if plan.get("question_id") != card.question_id:
                raise CardNotFound("quiz_errors.card_unavailable")
            return grade(plan, bank if bank is not None else load_bank(), response, lang)
        return own.grade(_asked(session, card.run_question_id), plan, response, lang, templates)
    except QuestionUnavailable:
        raise CardNotFound("quiz_errors.card_unavailable") from None


def feedback(*, session: Session, learner_id: int, card_id: int, plan: dict[str, Any], response: Any, lang: str,
             bank: Bank | None = None, templates: Templates | None = None) -> Feedback:
    """The feedback of an answer already given, in ``lang``, without scheduling anything
    (a page redrawn in another language)."""
    card = session.get(ReviewCard, card_id)
    if card is None or card.learner_id != learner_id:
        raise CardNotFound("quiz_errors.card_unavailable")
    return _grade(session, card, plan, response, lang, bank, templates)


# ------------------------------------------------------------------ answer


@dataclass(frozen=True)
class Answered:
    feedback: Feedback
    rating: Rating
    applied: bool  # False: another device answered this card first; its schedule stands
    due: datetime  # when the card comes back


def answer(*, session: Session, learner_id: int, card_id: int, reps: int, plan: dict[str, Any], response: Any,
           lang: str, seconds: float | None, now: datetime | None = None, bank: Bank | None = None,
           templates: Templates | None = None) -> Answered:
    """Grade the answer to a card shown with ``plan`` when it had ``reps`` reviews, and
    schedule the card by its rating, unless another answer got there first. Commits.

    Raises CardNotFound (not this learner's card), NumberParseError or InvalidResponse (an
    answer that cannot be read: nothing is stored, the learner may try again)."""
    now = now or clock()
    card = session.get(ReviewCard, card_id)
    if card is None or card.learner_id != learner_id:
        raise CardNotFound("quiz_errors.card_unavailable")
    graded = _grade(session, card, plan, response, lang, bank, templates)
    rated = rating(correct=graded.correct, seconds=seconds,
                   computed=card.run_question_id is not None or graded.type == "numeric")
    values = _reviewed(card, rated, now)
    done = session.exec(update(ReviewCard).where(col(ReviewCard.id) == card_id, col(ReviewCard.reps) == reps)
                        .values(**values)).rowcount
    if done != 1:
        session.rollback()
        session.refresh(card)
        return Answered(graded, rated, applied=False, due=_utc(card.due))
    session.add(ReviewLog(card_id=card_id, learner_id=learner_id, rating=int(rated), correct=graded.correct,
                          seconds=seconds, reviewed_at=now))
    session.commit()
    return Answered(graded, rated, applied=True, due=values["due"])
