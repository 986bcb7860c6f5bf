"""The Review page, Home's count, the Labs page's note and the Admin page's table (issue #42),
in AppTest on a fixed clock: a learner who ran the ring lab and the sharding lab sees
questions with their own figures in their language, answers them, and sees them come
back on the days FSRS schedules; the compression, topology, straggler and failure labs' runs
give theirs the same way."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fsrs import Card, Rating, Scheduler
from sqlmodel import select

from academy import i18n, lessons
from academy.db import session_scope
from academy.models import QuizAnswer, ReviewCard, RunQuestion
from quizzes import review, store
from quizzes.bank import load_bank
from quizzes.figures import figures
from quizzes.numbers import format_number
from quizzes.templates import load_templates
from tests.apptest import open_page, press
from tests.runquestions import answer_for, learner_with_runs, result

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
LANGS = ("en", "zh", "nl")
LATER_LABS = ("compression", "topology", "straggler", "failure")


class Clock:
    """The pages' clock (``quizzes.review.clock``), moved by the test."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fixed = Clock(T0)
    monkeypatch.setattr(review, "clock", fixed)
    return fixed


def texts(at) -> list[str]:
    return [str(e.value) for kind in ("markdown", "caption", "info", "success", "error", "warning")
            for e in getattr(at, kind)]


def answer_on_page(at, clock: Clock, lang: str, *, think: float = 100.0) -> str:
    """Answer the question on screen right, ``think`` seconds after it was shown; the page's
    outcome text."""
    current = at.session_state["review_current"]
    with session_scope() as session:
        response = answer_for(session, current["item"], current["plan"], load_bank(), lang)
    at.radio[0].set_value(response)
    clock.now += timedelta(seconds=think)
    press(at, i18n.t("review.submit", lang))
    assert not at.exception, at.exception
    assert i18n.t("quiz.right", lang) in [s.value for s in at.success]
    return at.info[-1].value


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.usefixtures("app_db")
def test_own_figures_in_the_learners_language_come_back_on_the_days_fsrs_schedules(lang, clock):
    with session_scope() as session:
        learner_id, runs = learner_with_runs(session, ("ring", "sharding"))
    at = open_page("review", lang, learner_id)
    assert not at.exception, at.exception
    assert i18n.t("review.due", lang, count=5) in texts(at)
    item = at.session_state["review_current"]["item"]
    mine = figures(item.lab, result(item.lab))
    figure = {"ring": "S", "sharding": "z2"}[item.lab]
    shown = "\n".join(texts(at))
    assert f"{format_number(mine[figure], lang)} MB" in shown  # the learner's own figure, the language's way
    section = {s.id: s.title for s in lessons.sections(lang)}[item.topic]
    assert i18n.t("review.from_run", lang, lab=i18n.t(f"labs_names.{item.lab}", lang), run=runs[item.lab],
                  section=section) in shown

    # Five questions answered right, each in 100 s: Good, back after the 10-minute learning step.
    outcomes = []
    for _ in range(5):
        outcomes.append(answer_on_page(at, clock, lang))
        press(at, i18n.t("review.next", lang))
    with session_scope() as session:
        cards = session.exec(select(ReviewCard).where(ReviewCard.learner_id == learner_id)).all()
    assert len(cards) == 5 and all(c.reps == 1 for c in cards)
    for card in cards:
        assert i18n.t("review.rated_good", lang, when=i18n.format_datetime(card.due, lang), seconds=100) in outcomes
    assert i18n.t("review.all_done", lang) in [s.value for s in at.success]
    first_back = min(c.due for c in cards)
    assert i18n.t("review.none_due", lang, when=i18n.format_datetime(first_back, lang)) in [i.value for i in at.info]

    # A second before, nothing; at the moment FSRS chose, the questions are back.
    clock.now = first_back - timedelta(seconds=1)
    at.run()
    assert at.session_state["review_current"] is None and not at.radio
    clock.now = max(c.due for c in cards)
    at.run()
    assert i18n.t("review.due", lang, count=5) in texts(at)
    for _ in range(5):
        answer_on_page(at, clock, lang)
        press(at, i18n.t("review.next", lang))
    with session_scope() as session:
        again = session.exec(select(ReviewCard).where(ReviewCard.learner_id == learner_id)).all()
    assert all(c.reps == 2 and c.due - c.last_review >= timedelta(days=1) for c in again)  # days now

    home = open_page("home", lang, learner_id)
    assert i18n.t("home.review_none", lang) in texts(home)
    clock.now = max(c.due for c in again)
    home = open_page("home", lang, learner_id)
    assert i18n.t("home.review_due", lang, count=5) in texts(home)


@pytest.mark.usefixtures("app_db")
def test_a_page_in_another_language_shows_the_answer_again_without_scheduling_twice(clock):
    with session_scope() as session:
        learner_id, _ = learner_with_runs(session, ("ring",))
    at = open_page("review", "en", learner_id)
    answer_on_page(at, clock, "en")
    at.selectbox(key="lang_select").set_value("nl").run()  # the sidebar's language box
    assert not at.exception, at.exception
    assert i18n.t("quiz.right", "nl") in [s.value for s in at.success]
    with session_scope() as session:
        assert sorted(c.reps for c in session.exec(select(ReviewCard))) == [0, 0, 1]


@pytest.mark.usefixtures("app_db", "clock")
def test_a_guest_is_asked_to_sign_in_and_an_empty_queue_says_how_to_fill_it():
    at = open_page("review", "zh")
    assert i18n.t("review.need_account", "zh") in [i.value for i in at.info] and not at.radio
    with session_scope() as session:
        learner_id, _ = learner_with_runs(session, ())
    at = open_page("review", "nl", learner_id)
    assert i18n.t("review.empty", "nl") in [i.value for i in at.info]
    home = open_page("home", "nl", learner_id)
    assert i18n.t("home.review_none", "nl") in texts(home)


@pytest.mark.parametrize("lab", ["sharding", *LATER_LABS])
@pytest.mark.usefixtures("app_db", "clock")
def test_the_labs_page_says_what_a_finished_run_added(lab):
    with session_scope() as session:
        learner_id, runs = learner_with_runs(session, (lab,))
    at = open_page("labs", "en", learner_id, state={"lab_run_id": runs[lab]}, lab=lab)
    assert not at.exception, at.exception
    assert i18n.t("labs.own_questions", "en", count=len(load_templates().of(lab))) in [i.value for i in at.info]


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.usefixtures("app_db")
def test_the_later_labs_questions_are_asked_with_their_own_figures_and_graded(lang, clock):
    """The compression, topology, straggler and failure labs' runs: every question shows the
    run's figures in the learner's language, is graded right, and is scheduled."""
    with session_scope() as session:
        learner_id, runs = learner_with_runs(session, LATER_LABS)
    count = sum(len(load_templates().of(lab)) for lab in LATER_LABS)
    at = open_page("review", lang, learner_id)
    assert not at.exception, at.exception
    assert i18n.t("review.due", lang, count=count) in texts(at)
    asked = set()
    for _ in range(count):
        item = at.session_state["review_current"]["item"]
        with session_scope() as session:
            template = load_templates().templates[session.get(RunQuestion, item.run_question_id).template]
        shown = "\n".join(texts(at))
        for name in template.figures:  # each of the run's own figures, the language's way
            assert format_number(figures(item.lab, result(item.lab))[name], lang) in shown, (template.id, name)
        assert "{" not in shown
        asked.add(item.lab)
        answer_on_page(at, clock, lang, think=50)  # Good, and all eight within the 10-minute learning step
        press(at, i18n.t("review.next", lang))
    assert asked == set(LATER_LABS)
    assert i18n.t("review.all_done", lang) in [s.value for s in at.success]
    with session_scope() as session:
        cards = session.exec(select(ReviewCard).where(ReviewCard.learner_id == learner_id)).all()
    assert len(cards) == count and all(c.reps == 1 for c in cards)


@pytest.mark.usefixtures("app_db")
def test_the_admin_page_shows_how_each_question_performs(clock):
    bank = load_bank()
    from benchmarks.quizkey import right_answer, wrong_answer

    with session_scope() as session:
        admin_id, _ = learner_with_runs(session, ("ring",), admin=True)
        # Five learners of rising skill take the same attempt: the first question is right
        # for the strong ones only, the second for everyone but them.
        for skill in range(5):
            learner_id, _ = learner_with_runs(session, ())
            attempt = store.start_attempt(session=session, learner_id=learner_id, lang="en", k=6, seed=3, bank=bank)
            for position, item in enumerate(attempt.plan):
                right = position < skill + 1
                store.record_answer(session=session, attempt_id=attempt.id, learner_id=learner_id,
                                    position=position, response=(right_answer if right else wrong_answer)(
                                        item, bank, "en"), lang="en", bank=bank)
            store.finish_attempt(session=session, attempt_id=attempt.id, learner_id=learner_id)
    review_page = open_page("review", "en", admin_id)
    answer_on_page(review_page, clock, "en")
    at = open_page("admin", "nl", admin_id)
    assert not at.exception, at.exception
    assert i18n.t("admin.items", "nl") in [h.value for h in at.header]
    table = at.dataframe[0].value
    assert list(table.columns) == [i18n.t(f"admin.col_{c}", "nl") for c in
                                   ("question", "section", "asked", "answered", "right", "discrimination")]
    assert len(table) == 6 and set(table[i18n.t("admin.col_asked", "nl")]) == {5}
    assert table[i18n.t("admin.col_discrimination", "nl")].notna().sum() >= 4
    templates = at.dataframe[1].value
    assert list(templates[i18n.t("admin.col_answered", "nl")]) == [1]


@pytest.mark.usefixtures("app_db")
def test_a_quiz_answer_comes_back_for_review_rated_by_the_time_it_took(clock):
    """The Quiz page measures how long an answer took; the Review page then schedules the
    question by it, and asks it again when it is due, with fresh values and order."""
    from benchmarks.quizkey import right_answer
    from tests.test_quiz_page import answer, seeded_attempt

    with session_scope() as session:
        learner_id, _ = learner_with_runs(session, ())
    attempt, pos = seeded_attempt(learner_id, "single")
    at = open_page("quiz", "en", learner_id, state={f"quiz_pos_{attempt.id}": pos})
    clock.now += timedelta(seconds=70)  # a choice question answered right after 70 s: Hard
    answer(at, attempt, pos, right_answer(attempt.plan[pos], load_bank(), "en"), "en")
    assert not at.exception, at.exception
    with session_scope() as session:
        [stored] = session.exec(select(QuizAnswer).where(QuizAnswer.attempt_id == attempt.id)).all()
    assert stored.seconds == 70 and stored.correct

    at = open_page("review", "en", learner_id)
    with session_scope() as session:
        [card] = session.exec(select(ReviewCard).where(ReviewCard.learner_id == learner_id)).all()
    assert card.question_id == attempt.plan[pos]["question_id"] and card.reps == 1
    # An independent FSRS: a new card rated Hard when the answer was given.
    fresh = Card(card_id=1, due=card.last_review)
    assert card.due == Scheduler(enable_fuzzing=False).review_card(fresh, Rating.Hard,
                                                                   review_datetime=card.last_review)[0].due
    clock.now = card.due - timedelta(seconds=1)  # (the quiz stamps its answers with the real time)
    at.run()
    assert i18n.t("review.none_due", "en", when=i18n.format_datetime(card.due, "en")) in [i.value for i in at.info]
    clock.now = card.due
    at.run()
    assert at.session_state["review_current"]["item"].question_id == card.question_id
    assert i18n.t("review.from_quiz", "en", section={s.id: s.title for s in lessons.sections("en")}[
        at.session_state["review_current"]["item"].topic]) in texts(at)
