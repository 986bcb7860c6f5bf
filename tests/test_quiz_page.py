"""The quiz page in AppTest: right and wrong feedback, finish, review, practice, resume."""

from __future__ import annotations

import pytest
from sqlmodel import select
from streamlit.testing.v1 import AppTest

from academy import i18n, lessons
from academy.accounts import sign_up
from academy.db import session_scope
from academy.models import QuizAnswer, QuizAttempt
from academy.settings import get_settings
from benchmarks.quizkey import right_answer, wrong_answer
from quizzes import store
from quizzes.bank import load_bank
from quizzes.engine import draw_attempt, message
from tests import apptest
from tests.apptest import MAIN, assert_headings_in_order, open_page, press


def open_quiz(learner_id: int, lang: str) -> AppTest:
    at = open_page("quiz", lang, learner_id)
    assert not at.exception, at.exception
    return at


def click(at: AppTest, label: str) -> None:
    press(at, label)
    assert not at.exception, at.exception


def current(learner_id: int) -> QuizAttempt:
    with session_scope() as s:
        return s.exec(select(QuizAttempt).where(QuizAttempt.learner_id == learner_id,
                                                QuizAttempt.status == "in_progress")).one()


def seeded_attempt(learner_id: int, wanted: str) -> tuple[QuizAttempt, int]:
    """Start an attempt whose seed draws a `wanted`-type question, and its position:
    a test that needs one must not depend on the luck of the draw."""
    bank, k = load_bank(), get_settings().quiz_questions

    def first(seed: int) -> int | None:
        types = [bank.questions[i["question_id"]].type for i in draw_attempt(bank, seed=seed, k=k)]
        return types.index(wanted) if wanted in types else None

    seed = next(s for s in range(1000) if first(s) is not None)
    with session_scope() as s:
        store.start_attempt(session=s, learner_id=learner_id, lang="en", seed=seed, k=k, bank=bank)
    return current(learner_id), first(seed)


def answer(at: AppTest, attempt: QuizAttempt, pos: int, response, lang: str) -> None:
    key = f"ans_{attempt.id}_{pos}"
    qtype = load_bank().questions[attempt.plan[pos]["question_id"]].type
    if qtype == "single":
        at.radio(key=key).set_value(response)
    elif qtype == "multiple":
        for box in at.checkbox:
            if box.key and box.key.startswith(key + "_"):
                box.set_value(box.key.rsplit("_", 1)[1] in response)
    elif qtype == "numeric":
        at.text_input(key=key).input(response)
    else:  # ordering: one select box per position
        for n, item in enumerate(response, 1):
            at.selectbox(key=f"{key}_{n}").set_value(item)
        at.run()
    click(at, i18n.t("quiz.submit", lang))


def play(at, learner_id, lang, plan_answers):
    attempt = current(learner_id)
    bank = load_bank()
    for pos, item in enumerate(attempt.plan):
        good = plan_answers(pos)
        response = (right_answer if good else wrong_answer)(item, bank, lang)
        answer(at, attempt, pos, response, lang)
        assert_headings_in_order(at)  # the question is an h2 under the page's h1, feedback and all
        feedback = [s.value for s in at.success] if good else [e.value for e in at.error]
        expected = i18n.t("quiz.right" if good else "quiz.wrong", lang)
        assert expected in feedback, (pos, item["question_id"], response)
        if pos < len(attempt.plan) - 1:
            click(at, i18n.t("quiz.next", lang))
    return attempt


@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
@pytest.mark.usefixtures("app_db")
def test_right_and_wrong_feedback_fail_practise_then_pass(lang):
    with session_scope() as s:
        learner = sign_up(session=s, email=f"quiz-{lang}@example.org", password="long enough pw")
    at = open_quiz(learner.id, lang)
    click(at, i18n.t("quiz.start", lang))
    first = play(at, learner.id, lang, lambda pos: pos % 2 == 0)  # half wrong: fails
    click(at, i18n.t("quiz.finish", lang))
    assert any(i18n.t("quiz.failed", lang, pass_mark=80) == e.value for e in at.error)
    assert_headings_in_order(at)  # the results: score and review, h2s
    # Review lists every question; practise the missed ones (ungraded).
    assert len(at.expander) >= len(first.plan)
    missed = len(first.plan) // 2
    click(at, i18n.t("quiz.practice_start", lang, count=missed))
    assert i18n.t("quiz.practice_banner", lang) in [i.value for i in at.info]
    play(at, learner.id, lang, lambda _pos: True)
    click(at, i18n.t("quiz.finish", lang))
    click(at, i18n.t("quiz.back", lang))
    click(at, i18n.t("quiz.start", lang))
    play(at, learner.id, lang, lambda _pos: True)
    click(at, i18n.t("quiz.finish", lang))
    assert i18n.t("quiz.passed", lang, pass_mark=80) in [s.value for s in at.success]
    with session_scope() as s:
        graded = s.exec(select(QuizAttempt).where(QuizAttempt.learner_id == learner.id,
                                                  QuizAttempt.practice == False)).all()  # noqa: E712
        assert sorted(a.passed for a in graded) == [False, True]
        for a in graded:
            answers = s.exec(select(QuizAnswer).where(QuizAnswer.attempt_id == a.id)).all()
            assert len(answers) == len(a.plan)


@pytest.mark.usefixtures("app_db")
def test_attempt_resumes_after_refresh():
    with session_scope() as s:
        learner = sign_up(session=s, email="resume@example.org", password="long enough pw")
    at = open_quiz(learner.id, "en")
    click(at, "Start a new attempt")
    attempt = current(learner.id)
    answer(at, attempt, 0, right_answer(attempt.plan[0], load_bank(), "en"), "en")
    # A refresh is a brand-new session: the attempt and its answer are still there.
    again = open_quiz(learner.id, "en")
    [bar] = again.get("progress")
    assert bar.proto.text == i18n.t("quiz.answered_of", "en", answered=1, total=len(attempt.plan))
    assert bar.proto.value == int(100 / len(attempt.plan))
    assert current(learner.id).id == attempt.id
    assert i18n.t("quiz.question_of", "en", n=2, total=len(attempt.plan)) in "".join(c.value for c in again.caption)


@pytest.mark.usefixtures("app_db")
def test_garbage_numeric_answer_gets_a_message_and_loses_nothing():
    with session_scope() as s:
        learner = sign_up(session=s, email="garbage@example.org", password="long enough pw")
    attempt, pos = seeded_attempt(learner.id, "numeric")
    at = open_quiz(learner.id, "en")  # resumes the seeded attempt
    for _ in range(pos):
        click(at, "Next question")
    answer(at, attempt, pos, "twelve<script>", "en")
    assert at.error and "not a number" in at.error[0].value
    with session_scope() as s:
        assert s.exec(select(QuizAnswer).where(QuizAnswer.attempt_id == attempt.id)).all() == []


@pytest.mark.usefixtures("app_db")
def test_quiz_needs_an_account():
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.query_params["lang"] = "en"
    at.run()
    at.switch_page("views/quiz.py")
    at.run()
    assert i18n.t("quiz.need_account", "en") in [i.value for i in at.info]
    assert not [b for b in at.button if b.label == "Start a new attempt"]


def _texts(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.usefixtures("app_db")
def test_every_option_explains_itself_after_the_answer_and_none_before(lang):
    with session_scope() as s:
        learner = sign_up(session=s, email=f"explain-{lang}@example.org", password="long enough pw")
    attempt, pos = seeded_attempt(learner.id, "single")
    bank = load_bank()
    item = attempt.plan[pos]
    question = bank.questions[item["question_id"]]
    at = open_quiz(learner.id, lang)
    for _ in range(pos):
        click(at, i18n.t("quiz.next", lang))
    explains = [o.explain[lang].split("{")[0] for o in question.options]
    assert not [e for e in explains if e in _texts(at)]  # nothing before the answer
    answer(at, attempt, pos, right_answer(item, bank, lang), lang)
    shown = _texts(at)
    assert [e for e in explains if e in shown] == explains  # every option, not only the right one
    assert message("feedback.why_others", lang) in shown
    # Each explanation cites its section by the table of contents' title, linked, language kept.
    titles = {sec.id: sec.title for sec in lessons.sections(lang)}
    for option in question.options:
        for sec in option.see:
            assert f"[{titles[sec]}](/lessons?section={sec}&lang={lang})" in shown


@pytest.mark.usefixtures("app_db")
def test_a_partial_ordering_asks_for_every_item_and_stores_nothing():
    """The page tells "nothing chosen" from "some items chosen" by a flag beside
    the response, not by a magic response string."""
    with session_scope() as s:
        learner = sign_up(session=s, email="partial-order@example.org", password="long enough pw")
    attempt, pos = seeded_attempt(learner.id, "ordering")
    at = open_quiz(learner.id, "en")
    for _ in range(pos):
        click(at, i18n.t("quiz.next", "en"))
    answer(at, attempt, pos, right_answer(attempt.plan[pos], load_bank(), "en")[:1], "en")
    assert i18n.t("quiz.need_all_items", "en") in [w.value for w in at.warning]
    click(at, i18n.t("quiz.submit", "en"))  # the widget keeps the one item: the same hint again
    assert i18n.t("quiz.need_all_items", "en") in [w.value for w in at.warning]
    with session_scope() as s:
        assert s.exec(select(QuizAnswer).where(QuizAnswer.attempt_id == attempt.id)).all() == []


@pytest.mark.usefixtures("app_db")
def test_ordering_is_one_select_box_per_position_and_refuses_an_item_twice():
    """A widget made for ordering (review m-quiz): positions 1..n, each a select box."""
    with session_scope() as s:
        learner = sign_up(session=s, email="twice-order@example.org", password="long enough pw")
    attempt, pos = seeded_attempt(learner.id, "ordering")
    at = open_quiz(learner.id, "en")
    for _ in range(pos):
        click(at, i18n.t("quiz.next", "en"))
    key = f"ans_{attempt.id}_{pos}"
    items = attempt.plan[pos]["items"]
    boxes = [b for b in at.selectbox if b.key and b.key.startswith(key + "_")]
    assert [b.label for b in boxes] == [i18n.t("quiz.order_position", "en", n=n) for n in range(1, len(items) + 1)]
    assert not at.multiselect
    right = right_answer(attempt.plan[pos], load_bank(), "en")
    answer(at, attempt, pos, [right[0], *right[:-1]], "en")  # the first item twice, the last nowhere
    assert any(w.value.startswith("“") and "more than once" in w.value for w in at.warning)
    assert i18n.t("quiz.need_all_items", "en") in [w.value for w in at.warning]
    with session_scope() as s:
        assert s.exec(select(QuizAnswer).where(QuizAnswer.attempt_id == attempt.id)).all() == []
    answer(at, attempt, pos, right, "en")
    assert i18n.t("quiz.right", "en") in [x.value for x in at.success]


@pytest.mark.usefixtures("app_db")
def test_attempt_history_is_read_once_per_run(monkeypatch):
    calls = []
    real = store.attempt_history

    def counted(**kwargs):
        calls.append(kwargs["learner_id"])
        return real(**kwargs)

    monkeypatch.setattr(store, "attempt_history", counted)
    with session_scope() as s:
        learner = sign_up(session=s, email="history-once@example.org", password="long enough pw")
    at = apptest.open_page("home", "en", learner.id)  # Home reads it once, for the best score
    for setup in (lambda: None, lambda: seeded_attempt(learner.id, "single")):
        setup()  # first the overview (no attempt yet), then an attempt in progress with history below it
        calls.clear()
        at.switch_page("views/quiz.py")
        at.run()
        assert not at.exception, at.exception
        assert calls == [learner.id]


@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
@pytest.mark.usefixtures("app_db")
def test_algbw_given_for_busbw_is_named_and_the_answer_has_the_asked_precision(lang):
    """Giving algbw for a busbw question gets the bank's words for that slip, and the right answer
    is shown to the 3 significant figures the question asks for, not 37.333 (journey review m7)."""
    from quizzes.engine import format_number
    from quizzes.formula import compute_answer

    wanted = "ring-allreduce-busbw"
    bank, k = load_bank(), get_settings().quiz_questions
    seed = next(s for s in range(5000)
                if wanted in [i["question_id"] for i in draw_attempt(bank, seed=s, k=k)])
    with session_scope() as s:
        learner = sign_up(session=s, email=f"busbw-{lang}@example.org", password="long enough pw")
        store.start_attempt(session=s, learner_id=learner.id, lang=lang, seed=seed, k=k, bank=bank)
    attempt = current(learner.id)
    pos = [i["question_id"] for i in attempt.plan].index(wanted)
    params = attempt.plan[pos]["params"]
    at = open_quiz(learner.id, lang)
    for _ in range(pos):
        click(at, i18n.t("quiz.next", lang))
    algbw = params["S"] / params["t"]
    answer(at, attempt, pos, format_number(round(algbw, 2), lang), lang)
    assert i18n.t("quiz.wrong", lang) in [e.value for e in at.error]
    question = bank.questions[wanted]
    slip = next(m for m in question.mistakes if m.label == "algbw for busbw")
    said = slip.explain[lang].replace("{mistake}", format_number(float(f"{algbw:.3g}"), lang))
    for name, value in params.items():
        said = said.replace("{" + name + "}", format_number(value, lang))
    assert [w.value for w in at.warning] == [said]
    busbw = compute_answer(question, params)
    shown = format_number(float(f"{busbw:.3g}"), lang)
    assert any(i18n.t("quiz.correct_answer", lang, answer=f"{shown} GB/s") == m.value for m in at.markdown)
    exact = format_number(busbw, lang)
    assert exact == shown or not [m for m in at.markdown if exact in m.value]  # never the 5-digit value
