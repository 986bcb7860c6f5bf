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


# --- accessibility: axe-core and the keyboard -----------------------------------------------

# axe-core, the engine of the accessibility audit, from npm: `make test` installs the version
# tests/axe/package-lock.json pins (`make axe`). The rules: WCAG 2.0 and 2.1, A and AA, and
# Deque's best practices.
AXE_JS = Path(__file__).resolve().parent / "axe" / "node_modules" / "axe-core" / "axe.min.js"
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]


# axe-core's findings in Streamlit's own markup, accepted here by name: rule -> the element it
# is found on. Any other finding, of ours or of a rule not listed, fails (``axe_ours``).
# docs/contributors/accessibility.md lists them with the upstream issue where there is one.
STREAMLITS = {
    # st.file_uploader's dropzone (Verify): react-dropzone's role="presentation" beside the
    # aria-label Streamlit gives it from our label; minor, best practice; nothing we can change.
    "presentation-role-conflict": 'data-testid="stFileUploaderDropzone"',
}


def streamlits(finding: dict) -> bool:
    """Whether an ``axe`` finding is one of Streamlit's, accepted in ``STREAMLITS``."""
    return finding["rule"] in STREAMLITS and STREAMLITS[finding["rule"]] in finding["html"]


def axe_ours(page) -> str:
    """The page's axe findings that ``STREAMLITS`` does not accept, one line each ("" if none)."""
    return "\n".join(f"{f['rule']} ({f['impact']}) {f['html'][:160]}" for f in axe(page) if not streamlits(f))


def axe(page) -> list[dict]:
    """axe-core's violations on the page as it stands, one entry per element: ``rule``,
    ``impact``, ``html`` (the element's opening tag) and ``target`` (its CSS path)."""
    assert AXE_JS.is_file(), f"axe-core is not installed at {AXE_JS}: `make test` installs it (npm)"
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(AXE_JS.read_text(encoding="utf-8"))
    result = page.evaluate(
        "tags => axe.run(document, {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']})", AXE_TAGS)
    return [{"rule": v["id"], "impact": v["impact"], "html": node["html"], "target": " ".join(map(str, node["target"]))}
            for v in result["violations"] for node in v["nodes"]]



_CUT_SHORT = """() => [...document.querySelectorAll('a *, button *')].filter(el =>
    el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).textOverflow === 'ellipsis'
    && el.getBoundingClientRect().width > 0).map(el => el.closest('a, button').innerText.trim())"""


def cut_short(page) -> list[str]:
    """The labels of links and buttons that end in "…" because they do not fit (journey review
    Minor 13: a course card's link, the quiz's "Finish now" popover)."""
    return page.evaluate(_CUT_SHORT)


# What has focus, and the box its indicator is drawn around: the input of a radio button, a
# checkbox or a slider is hidden (1 px), the nearest box around it carries the ring (app.ui.FOCUS_RULES).
_FOCUSED = """() => {
    const el = document.activeElement;
    if (!el || el === document.body) return null;
    const again = el.dataset.kitSeen === '1';
    el.dataset.kitSeen = '1';
    let shown = el;
    while (shown.parentElement && shown.getBoundingClientRect().width < 4) shown = shown.parentElement;
    const box = shown.getBoundingClientRect();
    const name = (el.getAttribute('aria-label') || el.innerText || el.value || '').trim().slice(0, 60);
    return {again, tag: el.tagName.toLowerCase(), role: el.getAttribute('role') || '', name,
            testid: el.closest('[data-testid]')?.dataset.testid || '', visible: el.matches(':focus-visible'),
            x: box.x, y: box.y, width: box.width, height: box.height};
}"""


def _luminance(pixel: tuple[int, ...]) -> float:
    def channel(v: int) -> float:
        c = v / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (channel(v) for v in pixel[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def indicator_contrast(focused: bytes, blurred: bytes) -> float:
    """How visible a focus indicator is: the WCAG contrast, at the pixel that changed most,
    between the control with focus and without (two PNGs of the same box). 1.0: no change."""
    import io

    from PIL import Image, ImageChops

    a = Image.open(io.BytesIO(focused)).convert("RGB")
    b = Image.open(io.BytesIO(blurred)).convert("RGB")
    if a.size != b.size:
        return 1.0
    diff = ImageChops.difference(a, b).convert("L")
    if diff.getbbox() is None:
        return 1.0
    best = 1.0
    width = a.size[0]
    # The few most-changed pixels (a ring is a line: the brightest differences are on it).
    ranked = sorted(enumerate(diff.tobytes()), key=lambda item: item[1], reverse=True)[:200]
    for index, _ in ranked:
        xy = (index % width, index // width)
        high, low = sorted((_luminance(a.getpixel(xy)), _luminance(b.getpixel(xy))), reverse=True)
        best = max(best, (high + 0.05) / (low + 0.05))
    return best


def tab_walk(page, stops: int = 80, margin: int = 6) -> list[dict]:
    """Press Tab from the top of the page up to ``stops`` times, until focus comes back to a
    control already visited; each stop: what has focus and, for the first control of each kind
    (tag, role, test id), its ``contrast`` (``indicator_contrast`` of its box plus ``margin`` px,
    shot with focus and after a ``blur()``; None for the others and for what is off screen)."""
    page.evaluate("() => { document.activeElement?.blur(); window.scrollTo(0, 0);"
                  " document.querySelectorAll('[data-kit-seen]').forEach(el => delete el.dataset.kitSeen); }")
    seen: list[dict] = []
    kinds: set[tuple] = set()
    for _ in range(stops):
        page.keyboard.press("Tab")
        frames(page)
        stop = page.evaluate(_FOCUSED)
        if stop is None:
            continue
        if stop.pop("again"):  # round the page once
            break
        clip = {"x": max(stop["x"] - margin, 0), "y": max(stop["y"] - margin, 0),
                "width": stop["width"] + 2 * margin, "height": stop["height"] + 2 * margin}
        kind = (stop["tag"], stop["role"], stop["testid"])
        stop["contrast"] = None
        if kind not in kinds and stop["width"] and stop["height"] and stop["y"] >= 0:
            kinds.add(kind)
            with_focus = page.screenshot(clip=clip, animations="disabled", caret="hide")
            page.evaluate("() => document.activeElement.dataset.kitFocus = '1'")
            page.evaluate("() => document.activeElement.blur()")
            frames(page)
            without = page.screenshot(clip=clip, animations="disabled", caret="hide")
            page.evaluate("() => { const el = document.querySelector('[data-kit-focus]');"
                          " delete el.dataset.kitFocus; el.focus({focusVisible: true}); }")
            frames(page)
            stop["contrast"] = round(indicator_contrast(with_focus, without), 2)
        seen.append(stop)
    return seen
