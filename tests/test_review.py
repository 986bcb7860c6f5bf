"""The review queue (issue #42) on a fixed clock: questions from the learner's ring and sharding
runs and from their quiz answers come back on the days FSRS schedules; the schedule survives
a restart; two sessions answering at once, on SQLite and PostgreSQL, make one schedule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fsrs import Card, Rating, Scheduler
from sqlmodel import Session, select

from academy.db import make_engine, migrate
from academy.models import LabRun, QuizAnswer, ReviewCard, ReviewLog, RunQuestion
from quizzes import review, store
from quizzes.bank import load_bank
from tests.conftest import race
from tests.runquestions import answer_for, learner_with_runs, result

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)  # a Monday morning


def _session(engine) -> Session:
    return Session(engine, expire_on_commit=False)


def answer_all_due(session, learner_id: int, now: datetime, *, right=True, seconds=100.0, lang="en"):
    """Answer every card due at ``now``, as the Review page does: {card id: Answered}."""
    bank = load_bank()
    due, _ = review.queue(session=session, learner_id=learner_id, now=now)
    out = {}
    for item in due:
        plan = review.new_plan(session=session, item=item, seed=7)
        response = answer_for(session, item, plan, bank, lang, right=right)
        out[item.card_id] = review.answer(session=session, learner_id=learner_id, card_id=item.card_id,
                                          reps=item.reps, plan=plan, response=response, lang=lang,
                                          seconds=seconds, now=now)
    return out


def test_rating_from_correctness_and_time():
    assert review.rating(correct=False, seconds=1) == Rating.Again
    assert review.rating(correct=True, seconds=5) == Rating.Easy
    assert review.rating(correct=True, seconds=30) == Rating.Good
    assert review.rating(correct=True, seconds=61) == Rating.Hard
    assert review.rating(correct=True, seconds=None) == Rating.Good
    # A question that asks for a computation gets three times as long.
    assert review.rating(correct=True, seconds=40, computed=True) == Rating.Easy
    assert review.rating(correct=True, seconds=150, computed=True) == Rating.Good


def test_a_learners_ring_and_sharding_questions_come_back_on_the_days_fsrs_schedules(session):
    learner_id, runs = learner_with_runs(session, ("ring", "sharding"))
    synced = review.sync(session=session, learner_id=learner_id, now=T0)
    assert synced.questions == 5 and synced.answers == 0
    assert review.sync(session=session, learner_id=learner_id, now=T0).questions == 0
    due, upcoming = review.queue(session=session, learner_id=learner_id, now=T0)
    assert len(due) == 5 and upcoming == []
    assert {i.lab for i in due} == {"ring", "sharding"} and {i.run_id for i in due} == set(runs.values())

    # Each step of an independent FSRS replays what the queue should do.
    model = Scheduler(desired_retention=0.9, enable_fuzzing=False)
    expected = {i.card_id: Card(card_id=i.card_id, due=T0) for i in due}
    now = T0
    for round_ in range(4):
        done = answer_all_due(session, learner_id, now)
        assert set(done) == set(expected), round_
        for card_id, answered in done.items():
            assert answered.applied and answered.feedback.correct and answered.rating == Rating.Good
            expected[card_id], _ = model.review_card(expected[card_id], Rating.Good, review_datetime=now)
            assert answered.due == expected[card_id].due
        next_due = min(c.due for c in expected.values())
        assert review.due_count(session=session, learner_id=learner_id, now=next_due - timedelta(seconds=1)) == 0
        assert review.due_count(session=session, learner_id=learner_id, now=next_due) == sum(
            c.due == next_due for c in expected.values())
        now = max(c.due for c in expected.values())  # every card due again
    # Learning steps (10 minutes), then days that grow with each right answer.
    gaps = sorted({(c.due - c.last_review) for c in expected.values()})
    assert gaps[0] >= timedelta(days=10), gaps
    logs = session.exec(select(ReviewLog).where(ReviewLog.learner_id == learner_id)).all()
    assert len(logs) == 4 * 5 and all(log.answer_id is None and log.seconds == 100.0 for log in logs)


def test_a_wrong_answer_comes_back_within_minutes(session):
    learner_id, _ = learner_with_runs(session, ("ring",))
    review.sync(session=session, learner_id=learner_id, now=T0)
    done = answer_all_due(session, learner_id, T0, right=False)
    assert all(a.rating == Rating.Again and a.due == T0 + timedelta(minutes=1) for a in done.values())


def test_a_newer_run_replaces_the_older_runs_questions(session):
    learner_id, runs = learner_with_runs(session, ("ring",))
    review.sync(session=session, learner_id=learner_id, now=T0)
    answer_all_due(session, learner_id, T0)
    faster = result("ring")
    faster["summary"]["world_size"] = 4
    newer = LabRun(learner_id=learner_id, lab="ring", status="done", result=faster)
    session.add(newer)
    session.commit()
    later = T0 + timedelta(hours=1)
    assert review.sync(session=session, learner_id=learner_id, now=later).questions == 3
    due, upcoming = review.queue(session=session, learner_id=learner_id, now=later)
    assert {i.run_id for i in due + upcoming} == {newer.id}  # the older run's cards retired, not lost
    old = session.exec(select(ReviewCard).join(RunQuestion).where(RunQuestion.run_id == runs["ring"])).all()
    assert len(old) == 3 and all(c.retired and c.reps == 1 for c in old)


def test_quiz_answers_join_the_queue_once_rated_by_time(session):
    learner_id, _ = learner_with_runs(session, ())
    bank = load_bank()
    attempt = store.start_attempt(session=session, learner_id=learner_id, lang="en", k=4, seed=11, bank=bank)
    from benchmarks.quizkey import right_answer, wrong_answer

    for position, item in enumerate(attempt.plan):
        right = position != 1
        store.record_answer(session=session, attempt_id=attempt.id, learner_id=learner_id, position=position,
                            response=(right_answer if right else wrong_answer)(item, bank, "en"), lang="en",
                            bank=bank, seconds=5.0 if position == 0 else 30.0)
    assert review.sync(session=session, learner_id=learner_id, now=T0).answers == 4
    assert review.sync(session=session, learner_id=learner_id, now=T0).answers == 0  # applied once
    logs = {log.answer_id: log for log in session.exec(select(ReviewLog).where(ReviewLog.learner_id == learner_id))}
    answers = session.exec(select(QuizAnswer).where(QuizAnswer.attempt_id == attempt.id)).all()
    assert set(logs) == {a.id for a in answers}
    by_position = {a.position: logs[a.id] for a in answers}
    assert by_position[1].rating == Rating.Again and not by_position[1].correct
    assert by_position[0].rating == Rating.Easy  # 5 s is quick for any question
    for position in (2, 3):
        kind = bank.questions[attempt.plan[position]["question_id"]].type
        assert by_position[position].rating == review.rating(correct=True, seconds=30.0, computed=kind == "numeric")
    cards = session.exec(select(ReviewCard).where(ReviewCard.learner_id == learner_id)).all()
    assert sorted(c.question_id for c in cards) == sorted(p["question_id"] for p in attempt.plan)
    assert all(c.reps == 1 for c in cards)
    # A card the quiz made is asked on the Review page once it is due.
    due, _ = review.queue(session=session, learner_id=learner_id, now=T0 + timedelta(days=60))
    assert {i.question_id for i in due} == {c.question_id for c in cards}


# --------------------------------------------------------- restart, two sessions


def test_the_schedule_survives_a_restart(tmp_path):
    url = f"sqlite:///{tmp_path / 'restart.db'}"
    engine = make_engine(url)
    migrate(engine)
    with _session(engine) as session:
        learner_id, _ = learner_with_runs(session, ("ring", "sharding"))
        review.sync(session=session, learner_id=learner_id, now=T0)
        answer_all_due(session, learner_id, T0)
        before = review.queue(session=session, learner_id=learner_id, now=T0 + timedelta(minutes=30))
    engine.dispose()  # the server stops
    engine = make_engine(url)  # and starts again
    migrate(engine)
    with _session(engine) as session:
        assert review.sync(session=session, learner_id=learner_id, now=T0) == review.Synced(0, 0)
        after = review.queue(session=session, learner_id=learner_id, now=T0 + timedelta(minutes=30))
    engine.dispose()
    assert after == before and len(after[0]) == 5


def test_two_devices_answering_one_card_make_one_schedule(file_engine):
    with _session(file_engine) as session:
        learner_id, _ = learner_with_runs(session, ("ring", "sharding"))
        review.sync(session=session, learner_id=learner_id, now=T0)
        due, _ = review.queue(session=session, learner_id=learner_id, now=T0)
    bank = load_bank()
    for item in due:
        def device(right: bool, item=item):
            def job():
                with _session(file_engine) as session:
                    plan = review.new_plan(session=session, item=item, seed=3)
                    response = answer_for(session, item, plan, bank, "nl", right=right)
                    return review.answer(session=session, learner_id=learner_id, card_id=item.card_id,
                                         reps=item.reps, plan=plan, response=response, lang="nl", seconds=20,
                                         now=T0)
            return job

        first, second = race(device(True), device(False))
        assert not isinstance(first, Exception), first
        assert not isinstance(second, Exception), second
        assert sorted([first.applied, second.applied]) == [False, True]
        winner = first if first.applied else second
        assert first.due == second.due == winner.due  # the loser is told the winner's schedule
        with _session(file_engine) as session:
            card = session.get(ReviewCard, item.card_id)
            logs = session.exec(select(ReviewLog).where(ReviewLog.card_id == item.card_id)).all()
            assert card.reps == 1 and len(logs) == 1 and logs[0].correct == winner.feedback.correct
            assert card.due == winner.due


def test_two_sessions_bringing_the_queue_up_to_date_add_and_apply_once(file_engine):
    bank = load_bank()
    with _session(file_engine) as session:
        learner_id, _ = learner_with_runs(session, ("ring", "sharding", "bench"))
        attempt = store.start_attempt(session=session, learner_id=learner_id, lang="en", k=6, seed=5, bank=bank)
        from benchmarks.quizkey import right_answer

        for position, item in enumerate(attempt.plan):
            store.record_answer(session=session, attempt_id=attempt.id, learner_id=learner_id, position=position,
                                response=right_answer(item, bank, "en"), lang="en", bank=bank, seconds=12.0)

    def device():
        with _session(file_engine) as session:
            return review.sync(session=session, learner_id=learner_id, now=T0, bank=bank)

    first, second = race(device, device)
    assert not isinstance(first, Exception), first
    assert not isinstance(second, Exception), second
    assert first.questions + second.questions == 7 and first.answers + second.answers == 6
    with _session(file_engine) as session:
        questions = session.exec(select(RunQuestion).where(RunQuestion.learner_id == learner_id)).all()
        cards = session.exec(select(ReviewCard).where(ReviewCard.learner_id == learner_id)).all()
        logs = session.exec(select(ReviewLog).where(ReviewLog.learner_id == learner_id)).all()
    assert len(questions) == 7 and len(cards) == 7 + 6 and len(logs) == 6
    assert all(c.reps == (1 if c.question_id else 0) for c in cards)


def test_the_database_holds_the_queues_rules(file_engine):
    """One card per question and learner, one per run question, exactly one kind of question,
    and a quiz answer applied once: the database's rules, not only the module's."""
    from sqlalchemy.exc import IntegrityError

    with _session(file_engine) as session:
        learner_id, _ = learner_with_runs(session, ())
        for rows in ([ReviewCard(learner_id=learner_id, question_id="q"), ReviewCard(learner_id=learner_id,
                                                                                    question_id="q")],
                     [ReviewCard(learner_id=learner_id)]):
            session.add_all(rows)
            with pytest.raises(IntegrityError):
                session.commit()
            session.rollback()
