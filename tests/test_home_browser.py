"""Home in a real browser: every status state in en, zh and nl at 1400 px and 390 px, with the
course map in reading order on the phone; a deadlock report on the Exercises page; and the
Review page's questions built from a learner's own runs, answered in every language and width.

Screenshots: ``test-artifacts/home-<state>-<lang>-<width>.png`` (guest, nothing, quiz_only,
eligible, issued, disqualified), ``exercise-deadlock-<lang>.png``,
``review-<lang>-<width>.png`` and ``review-feedback-<lang>-<width>.png`` (a question and its
feedback) and ``home-review-nl-1400.png`` (Home's count of what is due).
"""

from __future__ import annotations

import re

import pytest

from academy import exercises, i18n
from academy.accounts import open_session
from academy.db import session_scope
from academy.i18n import t
from academy.models import LabRun
from app.ui import cookie_name
from tests.browserkit import frames, main, still, switch_language, wait_app
from tests.test_home import learner_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LANGS = ("en", "zh", "nl")
STATES = ("guest", "nothing", "quiz_only", "eligible", "issued", "disqualified")
WIDTHS = (1400, 390)
CERT_TEXT = {"guest": "home.cert_guest_exercises", "nothing": "home.cert_needs_quiz_exercises",
             "quiz_only": "home.cert_needs_exercises", "eligible": "home.cert_ready", "issued": "home.cert_issued",
             "disqualified": "home.cert_disqualified"}

SIDEBAR_AWAY = """() => { const bar = document.querySelector('[data-testid="stSidebar"]');
                         return !bar || bar.getBoundingClientRect().right <= 0; }"""


def content_height(page) -> int:
    """The height of the main area's content: Streamlit scrolls inside it, not the body."""
    return int(page.evaluate("() => Math.max(...['stMain', 'stAppViewContainer', 'stMainBlockContainer']"
                             ".map(id => document.querySelector(`[data-testid=${id}]`)?.scrollHeight || 0))"))


def whole_page(page, path, width: int) -> None:
    """A screenshot of the whole page: Streamlit scrolls inside its main area, not the body,
    so the window is made as tall as that area's content first (then set back). The
    content's height is read once nothing moves and it holds still for two frames (after a
    resize the page lays itself out again and the sidebar slides away)."""
    tall = content_height(page)
    for _ in range(20):
        still(page)
        tall, before = content_height(page), tall
        if tall == before:
            break
    page.set_viewport_size({"width": width, "height": min(max(tall + 80, 900), 12_000)})
    frames(page)
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size({"width": width, "height": 900})


def signed_in(browser, server, learner_id: int | None, width: int):
    context = browser.new_context(viewport={"width": width, "height": 900})
    if learner_id is not None:
        with session_scope() as session:
            token = open_session(session=session, learner_id=learner_id)
        context.add_cookies([{"name": cookie_name(), "value": token, "url": server.url}])
    return context


@pytest.mark.usefixtures("on_server_db")
def test_home_in_every_state_language_and_width(server, browser, artifacts):
    learners = {state: None if state == "guest" else learner_in(state, f"shot-{state}@example.org")
                for state in STATES}
    for n, (state, learner_id) in enumerate(learners.items()):
        # One page per state (the learner's cookie): opened once, then the language is switched
        # in the sidebar and the window resized, as a learner would; each is checked and shot.
        # Every state in every language on the phone, where the cards stack and long words
        # wrap; the wide window in one language per state, each language in two states.
        context = signed_in(browser, server, learner_id, WIDTHS[0])
        page = context.new_page()
        try:
            page.goto(f"{server.url}/?lang={LANGS[0]}")
            wait_app(page)
            for lang in LANGS:
                if lang != LANGS[0]:
                    switch_language(page, lang)  # in the wide window: the phone hides the sidebar
                    page.mouse.move(WIDTHS[0] - 10, 10)  # off the sidebar and its box, as after a load
                    page.evaluate("() => document.activeElement?.blur()")
                for width in WIDTHS if lang == LANGS[n % len(LANGS)] else WIDTHS[1:]:
                    page.set_viewport_size({"width": width, "height": 900})
                    if width < WIDTHS[0]:  # the phone's sidebar slides away, as after a load at that width
                        page.wait_for_function(SIDEBAR_AWAY, timeout=30_000)
                    key = CERT_TEXT[state]
                    raw = i18n.catalog(lang)[key]
                    raw = raw["other"] if isinstance(raw, dict) else raw
                    words = max(re.split(r"\{[^{}]*\}", raw), key=len).strip()  # the text around the values
                    main(page).get_by_text(words, exact=False).first.wait_for(timeout=30_000)
                    # The phone stacks the cards: the page's order must be the reading order.
                    titles = main(page).get_by_text(re.compile(r"^\d+\. ")).all_inner_texts()
                    numbers = [int(x.split(".", 1)[0]) for x in titles]
                    assert numbers == sorted(numbers) and numbers[0] == 1, numbers
                    whole_page(page, artifacts / f"home-{state}-{lang}-{width}.png", width)
                page.set_viewport_size({"width": WIDTHS[0], "height": 900})
        finally:
            context.close()


@pytest.mark.usefixtures("on_server_db")
def test_a_deadlock_report_names_each_direction(server, browser, artifacts):
    learner_id = learner_in("nothing", "deadlock-shot@example.org")
    stuck = {"id": "w3-n7-float32", "world_size": 3, "size": 7, "dtype": "float32", "status": "failed",
             "findings": [{"check": "deadlock", "passed": False, "key": "deadlock", "values": {"seconds": 5}}],
             "waiting": [{"rank": 0, "op": "send", "peer": 1, "bytes": 28},
                         {"rank": 1, "op": "recv", "peer": 0, "bytes": 0},
                         {"rank": 2, "op": "irecv", "peer": 1, "bytes": 0}], "output": {}}
    cases = [{**stuck, "id": "w2-n5-float32", "world_size": 2, "size": 5, "status": "passed", "findings": [],
              "waiting": []}, stuck]
    cases += [{**stuck, "id": f"w3-n{k}-float32", "size": k, "status": "not_run", "findings": [], "waiting": []}
              for k in (9, 1000, 12345)]
    with session_scope() as session:
        session.add(LabRun(learner_id=learner_id, lab=exercises.LAB, status="done", source="# stuck\n",
                           params={"exercise": "ring-allreduce", "lang": "en"},
                           result={"exercise": "ring-allreduce", "status": "failed", "ok": False, "error": None,
                                   "cases": cases, "trace": {}, "duration_s": 5.9, "sandbox": "bwrap"}))
        session.commit()
    context = signed_in(browser, server, learner_id, 1400)
    page = context.new_page()
    try:
        page.goto(f"{server.url}/exercises?lang={LANGS[0]}&exercise=ring-allreduce")
        wait_app(page)
        for lang in LANGS:
            if lang != LANGS[0]:
                switch_language(page, lang)  # the exercise stays chosen (its query parameter)
                page.mouse.move(1390, 10)
                page.evaluate("() => document.activeElement?.blur()")
                assert "exercise=ring-allreduce" in page.url, page.url
            headline = t("exercises.failed_not_run", lang, passed=1, failed=1, not_run=3, count=5)
            main(page).get_by_text(headline).wait_for(timeout=30_000)
            report = main(page).get_by_test_id("stExpander").filter(has_text="w3-n7-float32")
            report.scroll_into_view_if_needed()
            whole_page(page, artifacts / f"exercise-deadlock-{lang}.png", 1400)
    finally:
        context.close()


@pytest.mark.usefixtures("on_server_db")
def test_an_ordering_question_is_answered_position_by_position(server, browser, artifacts):
    from benchmarks.quizkey import right_answer
    from quizzes.bank import load_bank
    from quizzes.engine import public_question
    from tests.browserkit import alert, answer, button
    from tests.test_quiz_page import seeded_attempt

    learner_id = learner_in("nothing", "order-shot@example.org")
    attempt, pos = seeded_attempt(learner_id, "ordering")
    bank = load_bank()
    context = signed_in(browser, server, learner_id, 1400)
    page = context.new_page()
    try:
        page.goto(f"{server.url}/quiz?lang=en")
        wait_app(page)
        for _ in range(pos):
            button(main(page), "quiz.next", "en").click()
            wait_app(page)
        question = public_question(attempt.plan[pos], bank, "en")
        main(page).get_by_text(t("quiz.order_hint", "en")).wait_for(timeout=30_000)
        response = right_answer(attempt.plan[pos], bank, "en")
        answer(page, question, response, "en")  # picks each position, then submits
        alert(page, t("quiz.right", "en"))
        whole_page(page, artifacts / "quiz-ordering-en.png", 1400)
    finally:
        context.close()


def checked(page, lang: str) -> None:
    """axe-core finds nothing of ours (in its languages, en and zh) and no label is cut short."""
    from tests.browserkit import axe_ours, cut_short

    if lang in ("en", "zh"):
        assert axe_ours(page) == "", lang
    assert cut_short(page) == [], lang


def _shown_question(page, learner_id: int, lang: str):
    """The run question on screen (its text, in ``lang``, is visible) and its right option's text."""
    from sqlmodel import select

    from academy.models import RunQuestion
    from quizzes import own

    with session_scope() as session:
        items = session.exec(select(RunQuestion).where(RunQuestion.learner_id == learner_id)).all()
        for item in items:
            plan = own.plan(item, seed=0)
            text = own.public_question(item, plan, lang).text
            if main(page).get_by_text(text[:40]).count():
                return item, own.grade(item, plan, None, lang).correct_answer[0]
    raise AssertionError("no run question of this learner is on the page")


@pytest.mark.usefixtures("on_server_db")
def test_review_in_every_language_and_width(server, browser, artifacts):
    """Issue #42: a learner who ran the ring, sharding and straggler labs answers the questions
    built from their own figures on the Review page, in en, zh and nl, at 1400 and 390 px: each
    question and its feedback shot; then Home's count of what is still due."""
    from sqlmodel import select

    from academy.models import ReviewCard
    from quizzes.figures import figures
    from quizzes.numbers import format_number
    from tests.browserkit import alert, button, pattern
    from tests.runquestions import learner_with_runs, result

    with session_scope() as session:
        learner_id, runs = learner_with_runs(session, ("ring", "sharding", "straggler"))
    context = signed_in(browser, server, learner_id, WIDTHS[0])
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"{server.url}/review?lang={LANGS[0]}")
        wait_app(page)
        answered = 0
        for lang in LANGS:
            if lang != LANGS[0]:
                page.set_viewport_size({"width": WIDTHS[0], "height": 900})
                switch_language(page, lang)
                page.mouse.move(WIDTHS[0] - 10, 10)
                page.evaluate("() => document.activeElement?.blur()")
            for width in WIDTHS:
                page.set_viewport_size({"width": width, "height": 900})
                if width < WIDTHS[0]:
                    page.wait_for_function(SIDEBAR_AWAY, timeout=30_000)
                main(page).get_by_text(t("review.due", lang, count=7 - answered)).wait_for(timeout=30_000)
                item, right = _shown_question(page, learner_id, lang)
                source = t("review.from_run", lang, lab=t(f"labs_names.{item.lab}", lang), run=runs[item.lab],
                           section="")
                main(page).get_by_text(source.rstrip()).first.wait_for(timeout=30_000)
                mine = figures(item.lab, result(item.lab))
                shown = main(page).inner_text()
                assert any(format_number(v, lang) in shown for v in mine.values()), shown  # own figures
                whole_page(page, artifacts / f"review-{lang}-{width}.png", width)
                checked(page, lang)
                main(page).get_by_test_id("stRadioOption").filter(has_text=right).first.click()
                button(main(page), "review.submit", lang).click()
                alert(page, t("quiz.right", lang))
                main(page).get_by_text(pattern("review.rated_good", lang)).or_(
                    main(page).get_by_text(pattern("review.rated_easy", lang))).or_(
                    main(page).get_by_text(pattern("review.rated_hard", lang))).first.wait_for(timeout=30_000)
                whole_page(page, artifacts / f"review-feedback-{lang}-{width}.png", width)
                checked(page, lang)
                button(main(page), "review.next", lang).click()
                wait_app(page)
                answered += 1
        main(page).get_by_text(t("review.due", "nl", count=1)).wait_for(timeout=30_000)
        with session_scope() as session:
            cards = session.exec(select(ReviewCard).where(ReviewCard.learner_id == learner_id)).all()
        assert sorted(c.reps for c in cards) == [0] + [1] * 6
        page.set_viewport_size({"width": WIDTHS[0], "height": 900})
        page.goto(f"{server.url}/?lang=nl")
        wait_app(page)
        main(page).get_by_text(t("home.review_due", "nl", count=1)).wait_for(timeout=30_000)
        whole_page(page, artifacts / "home-review-nl-1400.png", WIDTHS[0])
        assert errors == []
    finally:
        context.close()
