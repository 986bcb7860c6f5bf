"""Quiz attempts in the database: persistence, resume, finish, review, and
two tabs of one learner racing each other on a real (file, WAL) SQLite."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from sqlmodel import Session, select

from academy.db import make_engine
from academy.models import Learner, QuizAnswer, QuizAttempt
from quizzes import store
from quizzes.bank import load_bank
from quizzes.engine import KEYS, NumberParseError, grade, plan_question
from tests.conftest import race

FIXTURE = Path(__file__).parent / "fixtures" / "quiz_bank"
K = 6  # the whole fixture bank


@pytest.fixture(scope="module")
def bank():
    return load_bank(FIXTURE, languages=("en", "zh", "nl"), topics=("overview", "ring-allreduce", "ddp"))


def _session(engine) -> Session:
    """Like academy.db.session_scope: objects stay readable after a commit."""
    return Session(engine, expire_on_commit=False)


def _learners(engine, n: int = 2) -> list[int]:
    with _session(engine) as session:
        tag = uuid.uuid4().hex[:8]  # the PostgreSQL database outlives one test
        people = [Learner(email=f"l{i}-{tag}@example.org", password_hash="x") for i in range(n)]
        session.add_all(people)
        session.commit()
        return [p.id for p in people]


@pytest.fixture()
def learners(engine):  # engine: migrated in-memory SQLite with StaticPool (conftest.py)
    return _learners(engine)


def right_answer(bank, item: dict):
    """What a learner who knows everything submits for a plan item."""
    question = bank.questions[item["question_id"]]
    if question.type == "numeric":
        return str(grade(item, bank, None, "en").expected)
    if question.type == "ordering":
        where = {idx: KEYS[pos] for pos, idx in enumerate(item["items"])}
        return [where[i] for i in range(len(question.items))]
    keys = [KEYS[pos] for pos, idx in enumerate(item["options"]) if question.options[idx].correct]
    return keys[0] if question.type == "single" else keys


def wrong_answer(bank, item: dict):
    question = bank.questions[item["question_id"]]
    if question.type == "numeric":
        return "-1"
    if question.type == "ordering":
        return list(reversed(right_answer(bank, item)))
    keys = [KEYS[pos] for pos, idx in enumerate(item["options"]) if not question.options[idx].correct]
    return keys[0] if question.type == "single" else keys


def _start(session, bank, learner_id, **kw):
    return store.start_attempt(session=session, learner_id=learner_id, lang="en", k=K, bank=bank, **kw)


def _answer(session, bank, attempt, learner_id, position, *, right=True, lang="en"):
    item = attempt.plan[position]
    response = right_answer(bank, item) if right else wrong_answer(bank, item)
    return store.record_answer(
        session=session, attempt_id=attempt.id, learner_id=learner_id,
        position=position, response=response, lang=lang, bank=bank,
    )


# ------------------------------------------------------- persist and resume


def test_attempt_is_stored_and_resumed(engine, learners, bank):
    me = learners[0]
    with _session(engine) as session:
        attempt = _start(session, bank, me, seed=123)
        assert attempt.plan == [plan_question(bank.questions[p["question_id"]], seed=123) for p in attempt.plan]
        assert not attempt.practice and attempt.status == "in_progress"
        feedback = _answer(session, bank, attempt, me, 0)
        assert feedback.correct and not feedback.duplicate
        attempt_id, plan = attempt.id, attempt.plan

    # A browser refresh: new session, the same attempt comes back, answers kept.
    with _session(engine) as session:
        current = store.current_attempt(session=session, learner_id=me)
        assert current is not None and current.id == attempt_id and current.plan == plan
        again = _start(session, bank, me)  # "start" resumes instead of a second attempt
        assert again.id == attempt_id
        shown = store.answered_feedback(session=session, attempt_id=attempt_id, learner_id=me, lang="nl", bank=bank)
        assert list(shown) == [0] and shown[0].correct
        assert store.current_attempt(session=session, learner_id=learners[1]) is None
        count = len(session.exec(select(QuizAttempt)).all())
        assert count == 1


def test_one_position_is_graded_without_the_others(engine, learners, bank):
    """What the quiz page reads on a refresh: the answered positions, and the
    feedback of the one question on screen, as stored and in the page's language."""
    me, other = learners
    with _session(engine) as session:
        attempt = _start(session, bank, me)
        _answer(session, bank, attempt, me, 0, right=True)
        _answer(session, bank, attempt, me, 2, right=False)
        assert store.answered_positions(session=session, attempt_id=attempt.id, learner_id=me) == {0, 2}
        kw = {"session": session, "attempt_id": attempt.id, "learner_id": me, "bank": bank}
        right = store.position_feedback(position=0, lang="zh", **kw)
        wrong = store.position_feedback(position=2, lang="en", **kw)
        assert right.correct and not wrong.correct
        assert right.question_id == attempt.plan[0]["question_id"]
        assert store.position_feedback(position=1, lang="en", **kw) is None  # unanswered: no key
        with pytest.raises(store.NotYourAttempt):
            store.answered_positions(session=session, attempt_id=attempt.id, learner_id=other)


def test_answers_are_committed_immediately(engine, learners, bank):
    me = learners[0]
    with _session(engine) as session:
        attempt = _start(session, bank, me)
        _answer(session, bank, attempt, me, 1, right=False)
    with _session(engine) as other:
        [row] = other.exec(select(QuizAnswer)).all()
        assert row.position == 1 and row.correct is False and row.question_id == attempt.plan[1]["question_id"]


def test_numeric_answer_keeps_text_and_value(engine, learners, bank):
    me = learners[0]
    with _session(engine) as session:
        attempt = _start(session, bank, me)
        pos = next(i for i, p in enumerate(attempt.plan) if p["question_id"] == "ring-allreduce-fixed")
        with pytest.raises(NumberParseError):
            store.record_answer(session=session, attempt_id=attempt.id, learner_id=me,
                                position=pos, response="lots", lang="en", bank=bank)
        assert session.exec(select(QuizAnswer)).all() == []  # garbage is not an answer
        fb = store.record_answer(session=session, attempt_id=attempt.id, learner_id=me,
                                 position=pos, response="149,5", lang="nl", bank=bank)
        assert fb.correct
        row = session.exec(select(QuizAnswer)).one()
        assert row.response == {"text": "149,5", "value": 149.5}


def test_second_answer_returns_the_first(engine, learners, bank):
    me = learners[0]
    with _session(engine) as session:
        attempt = _start(session, bank, me)
        first = _answer(session, bank, attempt, me, 2, right=False)
        second = _answer(session, bank, attempt, me, 2, right=True)
        assert second.duplicate and not first.duplicate
        assert second.correct is False and second.given == first.given
        assert len(session.exec(select(QuizAnswer)).all()) == 1


def test_refusals(engine, learners, bank):
    me, other = learners
    with _session(engine) as session:
        attempt = _start(session, bank, me)
        with pytest.raises(store.NotYourAttempt):
            _answer(session, bank, attempt, other, 0)
        for position in (K, -1):
            with pytest.raises(store.InvalidPosition):
                store.record_answer(session=session, attempt_id=attempt.id, learner_id=me,
                                    position=position, response="a", lang="en", bank=bank)
        with pytest.raises(store.AttemptNotFound):
            store.record_answer(session=session, attempt_id=999, learner_id=me, position=0,
                                response="a", lang="en", bank=bank)
        with pytest.raises(store.AttemptNotFinished):
            store.review(session=session, attempt_id=attempt.id, lang="en", bank=bank)
        with pytest.raises(store.NotYourAttempt):
            store.finish_attempt(session=session, attempt_id=attempt.id, learner_id=other)
        store.finish_attempt(session=session, attempt_id=attempt.id, learner_id=me)
        with pytest.raises(store.NotYourAttempt):
            store.review(session=session, attempt_id=attempt.id, lang="en", learner_id=other, bank=bank)
        with pytest.raises(store.NotYourAttempt):
            store.missed_questions(session=session, attempt_id=attempt.id, learner_id=other)
        with pytest.raises(store.AttemptFinished) as info:
            _answer(session, bank, attempt, me, 0)
        assert "finished" in info.value.text("en")
        assert session.exec(select(QuizAnswer)).all() == []


# --------------------------------------------------------- finish and grade


def test_finish_scores_once_and_counts_unanswered_wrong(engine, learners, bank):
    me = learners[0]
    with _session(engine) as session:
        attempt = _start(session, bank, me)
        for pos in range(4):
            _answer(session, bank, attempt, me, pos, right=pos != 3)
        # positions 4 and 5 left unanswered: 3 right of 6
        result = store.finish_attempt(session=session, attempt_id=attempt.id, learner_id=me)
        assert (result.total, result.answered, result.correct) == (6, 4, 3)
        assert result.score == pytest.approx(50.0) and result.passed is False
        assert result.status == "finished" and result.finished_at is not None
        again = store.finish_attempt(session=session, attempt_id=attempt.id, learner_id=me, pass_percent=10)
        assert again == result  # the first result stands
        assert store.current_attempt(session=session, learner_id=me) is None
        assert store.missed_questions(session=session, attempt_id=attempt.id) == [
            p["question_id"] for p in attempt.plan[3:]
        ]


def test_pass_mark_and_best_attempt(engine, learners, bank):
    me = learners[0]
    with _session(engine) as session:
        assert store.best_attempt(session=session, learner_id=me) is None
        assert not store.has_passed(session=session, learner_id=me)
        first = _start(session, bank, me)
        for pos in range(K):
            _answer(session, bank, first, me, pos, right=pos < 4)  # 4/6 = 66.7 %
        low = store.finish_attempt(session=session, attempt_id=first.id, learner_id=me)
        assert not low.passed and not store.has_passed(session=session, learner_id=me)

        second = _start(session, bank, me)
        assert second.id != first.id
        for pos in range(K):
            _answer(session, bank, second, me, pos, right=pos < 5)  # 5/6 = 83.3 %
        high = store.finish_attempt(session=session, attempt_id=second.id, learner_id=me)
        assert high.passed and store.has_passed(session=session, learner_id=me)

        third = _start(session, bank, me)
        store.finish_attempt(session=session, attempt_id=third.id, learner_id=me)  # 0 %
        best = store.best_attempt(session=session, learner_id=me)
        assert best is not None and best.attempt_id == second.id
        history = store.attempt_history(session=session, learner_id=me)
        assert [h.attempt_id for h in history] == [third.id, second.id, first.id]
        assert [h.score for h in history] == pytest.approx([0.0, 500 / 6, 400 / 6])


def test_practice_the_missed_questions(engine, learners, bank):
    me = learners[0]
    with _session(engine) as session:
        graded = _start(session, bank, me)
        for pos in range(K):
            _answer(session, bank, graded, me, pos, right=pos % 2 == 0)
        store.finish_attempt(session=session, attempt_id=graded.id, learner_id=me)
        missed = store.missed_questions(session=session, attempt_id=graded.id)
        assert len(missed) == 3

        practice = _start(session, bank, me, practice_question_ids=missed)
        assert practice.practice and [p["question_id"] for p in practice.plan] == missed
        assert store.current_attempt(session=session, learner_id=me) is None  # graded: none open
        assert store.current_attempt(session=session, learner_id=me, practice=True).id == practice.id
        for pos in range(len(missed)):
            _answer(session, bank, practice, me, pos)
        result = store.finish_attempt(session=session, attempt_id=practice.id, learner_id=me)
        assert result.practice and result.score == 100.0 and result.passed is None
        # Practice never counts: not passed, not the best, not in the graded history.
        assert not store.has_passed(session=session, learner_id=me)
        assert store.best_attempt(session=session, learner_id=me).attempt_id == graded.id
        assert [h.attempt_id for h in store.attempt_history(session=session, learner_id=me)] == [graded.id]
        assert len(store.attempt_history(session=session, learner_id=me, include_practice=True)) == 2

        # A new practice attempt closes one left open.
        open_one = _start(session, bank, me, practice_question_ids=missed[:1])
        newer = _start(session, bank, me, practice_question_ids=missed[1:] + ["no-such-question"])
        assert [p["question_id"] for p in newer.plan] == missed[1:]
        session.refresh(open_one)
        assert open_one.status == "finished"
        with pytest.raises(store.NoQuestions):
            _start(session, bank, me, practice_question_ids=[])


def test_review_shows_every_question_with_feedback(engine, learners, bank):
    me = learners[0]
    with _session(engine) as session:
        attempt = _start(session, bank, me)
        _answer(session, bank, attempt, me, 0, right=True)
        _answer(session, bank, attempt, me, 1, right=False)
        store.finish_attempt(session=session, attempt_id=attempt.id, learner_id=me)
        items = store.review(session=session, attempt_id=attempt.id, lang="zh", bank=bank)
    assert [i.position for i in items] == list(range(K))
    assert items[0].correct and items[0].feedback.correct
    assert not items[1].correct and not items[1].feedback.correct and items[1].feedback.given
    assert items[2].response is None and items[2].feedback.given == [] and not items[2].correct
    for item in items:
        assert item.question.question_id == item.feedback.question_id
        assert item.feedback.correct_answer
        assert item.feedback.explanations or item.feedback.explanation


# -------------------------------------------------------------- concurrency


def test_two_tabs_answer_the_same_question(file_engine, bank):
    me, _ = _learners(file_engine)
    with _session(file_engine) as session:
        attempt = _start(session, bank, me)

    def tab(position, right):
        def job():
            with _session(file_engine) as session:
                return _answer(session, bank, attempt, me, position, right=right)
        return job

    for position in range(K):  # odd positions: one tab right, the other wrong
        first, second = race(tab(position, True), tab(position, position % 2 == 0))
        assert not isinstance(first, Exception), first
        assert not isinstance(second, Exception), second
        assert sorted([first.duplicate, second.duplicate]) == [False, True]
        assert first.correct == second.correct  # both tabs show the stored answer

    with _session(file_engine) as session:
        rows = session.exec(select(QuizAnswer).where(QuizAnswer.attempt_id == attempt.id)).all()
        assert sorted(r.position for r in rows) == list(range(K))  # exactly one each

    def finish():
        with _session(file_engine) as session:
            return store.finish_attempt(session=session, attempt_id=attempt.id, learner_id=me)

    results = race(finish, finish)
    with _session(file_engine) as session:
        assert not any(isinstance(r, Exception) for r in results), results
        assert results[0] == results[1]
        assert results[0].correct == sum(r.correct for r in rows)
        assert results[0].score == pytest.approx(100.0 * results[0].correct / K)
        assert session.get(QuizAttempt, attempt.id).score == results[0].score


def test_answer_racing_finish_is_counted_or_refused(file_engine, bank):
    me, _ = _learners(file_engine)
    for _ in range(5):
        with _session(file_engine) as session:
            attempt = _start(session, bank, me)
            for pos in range(K - 1):
                _answer(session, bank, attempt, me, pos)

        def answer_last(attempt=attempt):
            with _session(file_engine) as session:
                return _answer(session, bank, attempt, me, K - 1)

        def finish(attempt=attempt):
            with _session(file_engine) as session:
                return store.finish_attempt(session=session, attempt_id=attempt.id, learner_id=me)

        answered, finished = race(answer_last, finish)
        assert not isinstance(finished, Exception), finished
        assert isinstance(answered, store.AttemptFinished) or answered.correct
        with _session(file_engine) as session:
            stored = session.exec(select(QuizAnswer).where(QuizAnswer.attempt_id == attempt.id)).all()
        # Whatever won, the score matches exactly the answers stored.
        assert finished.answered == len(stored)
        assert finished.score == pytest.approx(100.0 * sum(r.correct for r in stored) / K)
        assert len(stored) == (K - 1 if isinstance(answered, Exception) else K)


def test_two_tabs_start_one_attempt(file_engine, bank):
    me, _ = _learners(file_engine)
    for _ in range(5):
        def tab():
            with _session(file_engine) as session:
                return _start(session, bank, me).id

        first, second = race(tab, tab)
        assert first == second, (first, second)
        with _session(file_engine) as session:
            open_attempts = session.exec(
                select(QuizAttempt).where(QuizAttempt.learner_id == me, QuizAttempt.status == "in_progress")
            ).all()
            assert [a.id for a in open_attempts] == [first]
            store.finish_attempt(session=session, attempt_id=first, learner_id=me)


def test_the_database_refuses_a_second_open_attempt(file_engine):
    """The one-open-attempt rule is the database's, not only start_attempt's check."""
    from sqlalchemy.exc import IntegrityError

    me, _ = _learners(file_engine)
    with _session(file_engine) as session:
        session.add(QuizAttempt(learner_id=me, seed=1, plan=[]))
        session.commit()
        session.add(QuizAttempt(learner_id=me, seed=2, plan=[]))
        with pytest.raises(IntegrityError):
            session.commit()
        session.rollback()
        session.add(QuizAttempt(learner_id=me, seed=3, plan=[], practice=True))  # practice: its own slot
        session.add(QuizAttempt(learner_id=me, seed=4, plan=[], status="finished"))  # closed ones: any number
        session.commit()


def test_migration_0005_keeps_the_oldest_open_attempt(tmp_path):
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import text

    from academy.settings import ROOT

    engine = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    cfg = Config(str(ROOT / "alembic.ini"))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0004")
        conn.execute(text("INSERT INTO learner (id, email, display_name, password_hash, is_admin, language, created_at) "
                          "VALUES (1, 'a@example.org', 'A', 'x', 0, 'en', '2026-01-01')"))
        for attempt_id in (1, 2, 3):  # three open graded attempts from a race before the index
            conn.execute(text("INSERT INTO quizattempt (id, learner_id, course_id, seed, language, plan, "
                              "practice, status, started_at) VALUES (:id, 1, 'data-parallelism', 1, 'en', "
                              "'[]', 0, 'in_progress', '2026-01-01')"), {"id": attempt_id})
        command.upgrade(cfg, "0005")
        rows = conn.execute(text("SELECT id, status FROM quizattempt ORDER BY id")).all()
    assert [tuple(r) for r in rows] == [(1, "in_progress"), (2, "abandoned"), (3, "abandoned")]
