"""Helpers for the browser journeys: waits, navigation, sign-up, answering quiz questions.

Labels come from the app's own catalogs (``academy.i18n.t``), so the journeys
follow the texts a learner sees in each language instead of hard-coding them.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from playwright.sync_api import TimeoutError as PlaywrightTimeout

from academy.i18n import t

WAIT = 30_000  # ms: one Streamlit rerun on a busy 2-core machine, with room to spare
# ms between the checks of a wait_for_function. Playwright's default checks on every animation
# frame, which keeps Chromium drawing frames at 60 Hz for the whole wait (a tenth of a core).
POLL = 100


def wait_app(page, timeout: int = WAIT) -> None:
    """Wait until Streamlit is connected and idle: no script run going on or asked for.

    Right after a click the rerun may not have begun yet, so callers then also
    wait for the text the click should bring.
    """
    page.wait_for_selector(
        '[data-testid="stApp"][data-test-connection-state="CONNECTED"]'
        '[data-test-script-state="notRunning"]', timeout=timeout)
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=timeout, polling=POLL
    )
    page.wait_for_timeout(200)


def frames(page, n: int = 2) -> None:
    """Wait for ``n`` animation frames: the page has laid itself out and painted again (after a
    resize or a scroll), without a fixed sleep."""
    page.evaluate("n => new Promise(done => { const next = k => k ? requestAnimationFrame(() => next(k - 1))"
                  " : done(); next(n); })", n)


def still(page, timeout: int = WAIT) -> None:
    """Wait until no CSS transition or animation is running (a sidebar sliding away after a
    resize, say); endless ones, such as a spinner, do not count. Then two frames."""
    page.wait_for_function(
        "() => document.getAnimations().every(a => a.playState !== 'running'"
        " || a.effect?.getComputedTiming().iterations === Infinity)", timeout=timeout, polling=POLL)
    frames(page)


def pattern(key: str, lang: str) -> re.Pattern[str]:
    """A catalog text as a regex; each ``{placeholder}`` matches any text."""
    parts = re.split(r"\{[^{}]*\}", t(key, lang))
    return re.compile(".+?".join(re.escape(p) for p in parts))


def main(page):
    return page.get_by_test_id("stMain")


def see(page, text: str | re.Pattern[str], timeout: int = WAIT):
    """Wait until ``text`` is visible in the main area and return its locator."""
    loc = main(page).get_by_text(text, exact=True) if isinstance(text, str) else main(page).get_by_text(text)
    loc.first.wait_for(state="visible", timeout=timeout)
    return loc.first


def alert(page, text: str | re.Pattern[str], timeout: int = WAIT):
    """Wait for an st.success / st.info / st.error box with ``text``."""
    loc = main(page).get_by_test_id("stAlert").filter(has_text=text)
    loc.first.wait_for(state="visible", timeout=timeout)
    return loc.first


def nav(page, key: str, lang: str, heading: str | re.Pattern[str] | None = None) -> None:
    """Open a page through the sidebar navigation (no reload: the session goes on).

    Waits for the page's URL and its title (``heading``, by default the page's name).
    """
    title = t(key, lang)
    link = page.get_by_test_id("stSidebarNav").get_by_role("link").filter(
        has=page.get_by_text(title, exact=True))
    link.click()
    path = "" if key == "nav.home" else key.removeprefix("nav.")
    page.wait_for_url(re.compile(rf"^[^?]*/{path}(\?.*)?$"), timeout=WAIT)
    main(page).get_by_test_id("stHeading").filter(has_text=heading or title).first.wait_for(timeout=WAIT)
    wait_app(page)


def switch_language(page, code: str) -> None:
    """Pick a language in the sidebar's language box (opening the sidebar if a narrow window collapsed it)."""
    from academy.i18n import languages

    expand = page.get_by_test_id("stExpandSidebarButton")
    box = page.get_by_test_id("stSidebar").get_by_role("combobox").first
    for _ in range(5):
        still(page)  # a sidebar still sliding after a resize is neither open nor shut
        if box.is_visible():
            break
        # Collapsed (a narrow window): open it. Back in a wide window Streamlit may open it
        # by itself meanwhile, and the button moves while the header settles (Playwright's
        # click timed out waiting for it to hold still): the click event, briefly.
        with contextlib.suppress(PlaywrightTimeout):
            expand.dispatch_event("click", timeout=2_000)
        with contextlib.suppress(PlaywrightTimeout):
            box.wait_for(state="visible", timeout=5_000)
    box.click()
    page.get_by_role("option", name=languages()[code], exact=True).click()
    page.wait_for_url(re.compile(rf"[?&]lang={code}\b"), timeout=WAIT)
    wait_app(page)


# Plotly draws a chart at its container's width once it has relaid out after a resize.
_CHARTS_FIT = """() => [...document.querySelectorAll('[data-testid="stPlotlyChart"]')].every(box => {
    const svg = box.querySelector('.main-svg');
    return svg && Math.abs(svg.getBoundingClientRect().width - box.getBoundingClientRect().width) < 2;
})"""


def charts_fitted(page, timeout: int = WAIT) -> None:
    """Wait until every plotly chart on the page is drawn at its container's width
    (after a new window size), and a little more for the last frame to be painted."""
    page.wait_for_function(_CHARTS_FIT, timeout=timeout, polling=POLL)
    page.wait_for_timeout(150)


def choose(page, lang: str, label_key: str, option: str) -> None:
    """Pick ``option`` in the Labs form's select box labelled ``label_key``."""
    box = main(page).get_by_test_id("stForm").get_by_test_id("stSelectbox").filter(has_text=t(label_key, lang))
    box.scroll_into_view_if_needed()
    page.wait_for_timeout(300)  # a list opened while the page still scrolls closes again
    wanted = page.get_by_role("option", name=option, exact=True)
    for _ in range(3):
        box.get_by_role("combobox").click()
        with contextlib.suppress(Exception):
            wanted.wait_for(timeout=5_000)
            break
    wanted.click()


def button(scope, key: str, lang: str, **values):
    return scope.get_by_role("button", name=t(key, lang, **values))


def sign_up(page, lang: str, *, name: str, email: str, password: str) -> None:
    """Create an account on the Account page (which must be open) and wait until signed in."""
    page.get_by_role("tab", name=t("account.sign_up_tab", lang)).click()
    form = page.get_by_test_id("stForm").filter(has=page.get_by_role("button", name=t("account.sign_up", lang)))
    form.get_by_role("textbox", name=t("account.display_name", lang), exact=True).fill(name)
    form.get_by_role("textbox", name=t("account.email", lang), exact=True).fill(email)
    form.get_by_role("textbox", name=t("account.password", lang), exact=True).fill(password)
    form.get_by_role("button", name=t("account.sign_up", lang)).click()
    alert(page, t("account.created", lang))
    page.wait_for_function("() => document.cookie.includes('dpa_session=')", timeout=WAIT, polling=POLL)
    wait_app(page)


# --- the database behind the server -------------------------------------------------------


def open_attempt(database_url: str, email: str):
    """The learner's graded attempt in progress (its plan is what the page shows)."""
    from sqlmodel import Session, create_engine, select

    from academy.models import Learner, QuizAttempt

    engine = create_engine(database_url)
    try:
        with Session(engine) as s:
            learner = s.exec(select(Learner).where(Learner.email == email)).one()
            return s.exec(select(QuizAttempt).where(
                QuizAttempt.learner_id == learner.id, QuizAttempt.status == "in_progress",
                QuizAttempt.practice == False,  # noqa: E712 (SQL expression)
            )).one()
    finally:
        engine.dispose()


def learner_row(database_url: str, email: str, model):
    """Rows of ``model`` belonging to the learner with this e-mail address."""
    from sqlmodel import Session, create_engine, select

    from academy.models import Learner

    engine = create_engine(database_url)
    try:
        with Session(engine) as s:
            learner = s.exec(select(Learner).where(Learner.email == email)).one()
            return list(s.exec(select(model).where(model.learner_id == learner.id)).all())
    finally:
        engine.dispose()


# --- quiz questions -------------------------------------------------------------------------

KEYS = "abcdefghijklmnopqrstuvwxyz"


def answer(page, question, response: Any, lang: str) -> None:
    """Give ``response`` (option key(s), ordered item keys, or number text) through the widgets.

    ``question`` is ``quizzes.engine.public_question`` of the plan item: what the page shows.
    """
    m = main(page)
    if question.type == "single":
        pos = KEYS.index(response)
        m.get_by_test_id("stRadioOption").nth(pos).get_by_test_id("stMarkdownContainer").click()
        wait_app(page)
        assert m.get_by_test_id("stRadio").get_by_role("radio").nth(pos).is_checked()
    elif question.type == "multiple":
        boxes = m.get_by_test_id("stCheckbox")
        for key in response:
            pos = KEYS.index(key)
            boxes.nth(pos).get_by_test_id("stMarkdownContainer").click()
            wait_app(page)
            assert boxes.nth(pos).get_by_role("checkbox").is_checked()
    elif question.type == "numeric":
        box = m.get_by_role("textbox")
        box.fill(response)
        box.press("Enter")
        wait_app(page)
        assert box.input_value() == response
    else:  # ordering: one select box per position, 1 to n; pick each position's item
        items = dict(question.items)
        boxes = m.get_by_test_id("stSelectbox")
        for n, key in enumerate(response):
            box = boxes.nth(n)
            listbox = page.get_by_role("listbox")
            for _ in range(5):
                # A pick reruns the page, which may close the list just as we look at it
                # (a busy machine makes that likely): open it again and retry the pick.
                wait_app(page)
                if not listbox.is_visible():
                    box.get_by_role("combobox").click()
                try:
                    listbox.get_by_role("option", name=items[key], exact=True).click(timeout=5_000)
                    break
                except PlaywrightTimeout:
                    continue
            wait_app(page)
            chosen = box.get_by_role("combobox").input_value()  # the pick shows as the box's text
            assert chosen == items[key], (n, chosen)
    button(m, "quiz.submit", lang).click()


def take_quiz(page, server, email: str, lang: str, *, right: bool, shoot=None) -> int:
    """Start an attempt and answer every question (from the bank's key, right or wrong); finish it.

    Returns the number of questions. ``shoot(name)`` is called after the first feedback.
    """
    from benchmarks.quizkey import right_answer, wrong_answer
    from quizzes.bank import load_bank
    from quizzes.engine import public_question

    m = main(page)
    button(m, "quiz.start", lang).click()
    attempt = None
    for _ in range(50):  # the attempt row appears once the click's rerun committed it
        try:
            attempt = open_attempt(server.env["DATABASE_URL"], email)
            break
        except Exception:  # noqa: BLE001  (NoResultFound until then)
            page.wait_for_timeout(200)
    assert attempt is not None, "starting the quiz created no attempt"
    bank = load_bank()
    total = len(attempt.plan)
    types = [bank.questions[item["question_id"]].type for item in attempt.plan]
    print(f"quiz plan ({'right' if right else 'wrong'} answers): {', '.join(types)}")
    for pos, item in enumerate(attempt.plan):
        see(page, re.compile(re.escape(t("quiz.question_of", lang, n=pos + 1, total=total))))
        wait_app(page)
        question = public_question(item, bank, lang)
        response = (right_answer if right else wrong_answer)(item, bank, lang)
        answer(page, question, response, lang)
        if right:
            verdict = alert(page, t("quiz.right", lang))
        else:
            verdict = alert(page, re.compile(
                f"{re.escape(t('quiz.wrong', lang))}|{pattern('quiz.partly', lang).pattern}"))
        wait_app(page)
        if pos == 0 and shoot is not None:
            shoot("first-answer", focus=verdict)
        if pos < total - 1:
            button(m, "quiz.next", lang).click()
    see(page, t("quiz.answered_of", lang, answered=total, total=total))
    button(m, "quiz.finish", lang).click()
    return total


def pdf_verify_url(pdf: Path, public_url: str, render_to: Path | None = None) -> tuple[str, str]:
    """The verification URL of a certificate PDF and how it was found ("qr", "link" or "text").

    Renders the page (pdftoppm; kept as ``render_to`` when given) and decodes its
    QR code (zbarimg) when those tools are installed; otherwise reads the URL the
    PDF links and prints under the QR code.
    """
    if shutil.which("pdftoppm"):
        with tempfile.TemporaryDirectory() as tmp:
            png = Path(tmp) / "page"
            subprocess.run(["pdftoppm", "-png", "-r", "150", "-singlefile", str(pdf), str(png)],
                           check=True, capture_output=True, timeout=60)
            if render_to is not None:
                shutil.copyfile(f"{png}.png", render_to)
            if shutil.which("zbarimg"):
                out = subprocess.run(["zbarimg", "--quiet", "--raw", "-Sqrcode.enable=1", f"{png}.png"],
                                     capture_output=True, text=True, timeout=60)
                urls = [line.strip() for line in out.stdout.splitlines() if line.strip()]
                if out.returncode == 0 and urls:
                    return urls[0], "qr"
    from pypdf import PdfReader

    reader = PdfReader(str(pdf))
    page = reader.pages[0]
    for annot in page.get("/Annots") or []:
        uri = (annot.get_object().get("/A") or {}).get("/URI")
        if uri and str(uri).startswith(public_url):
            return str(uri), "link"
    found = re.search(re.escape(public_url.rstrip("/")) + r"/verify\?id=[0-9A-Z-]+", page.extract_text() or "")
    assert found, "no verification URL in the PDF"
    return found.group(0), "text"
