"""A real browser: language switch sticks across a reload; an account survives a refresh."""

import re
import time

import pytest

from tests import browserkit as kit

pytestmark = pytest.mark.browser

DRAWN = """() => [...document.querySelectorAll('.js-plotly-plot')].every(el => el.querySelector('svg.main-svg'))
    && [...document.images].every(img => img.complete)"""


def wait_app(page):
    """Wait until Streamlit has finished running the script."""
    page.wait_for_selector('[data-testid="stApp"]', timeout=30000)
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=30000, polling=kit.POLL
    )
    page.wait_for_timeout(300)


def test_switch_to_chinese_and_reload(server, browser, artifacts):
    ctx = browser.new_context(locale="en-US", viewport={"width": 1300, "height": 900})
    page = ctx.new_page()
    page.goto(server.url)
    wait_app(page)
    page.get_by_text("Course map").wait_for()
    page.get_by_test_id("stSidebar").get_by_role("combobox").first.click()
    page.get_by_role("option", name="简体中文").click()
    page.get_by_text("课程地图").wait_for(timeout=20000)
    assert "lang=zh" in page.url
    page.screenshot(path=str(artifacts / "smoke-zh.png"), full_page=True)
    page.reload()
    wait_app(page)
    page.get_by_text("课程地图").wait_for(timeout=20000)
    ctx.close()


def test_browser_locale_is_the_default(server, browser):
    ctx = browser.new_context(locale="nl-NL")
    page = ctx.new_page()
    page.goto(server.url)
    page.get_by_text("Cursusoverzicht").wait_for(timeout=30000)
    ctx.close()


def test_account_survives_refresh(server, browser, artifacts):
    ctx = browser.new_context(locale="en-US", viewport={"width": 1300, "height": 900})
    page = ctx.new_page()
    page.goto(f"{server.url}/account?lang=en")
    wait_app(page)
    page.get_by_role("tab", name="Create an account").click()
    form = page.get_by_test_id("stForm").filter(has_text="Create account")
    form.get_by_role("textbox", name="Name (as it should appear on your certificate)", exact=True).fill("Zoë Ødegård")
    form.get_by_role("textbox", name="E-mail address", exact=True).fill("zoe@example.org")
    form.get_by_role("textbox", name="Password", exact=True).fill("a long enough password")
    form.get_by_role("button", name="Create account").click()
    page.get_by_text("Your account is ready").wait_for(timeout=20000)
    page.wait_for_function("() => document.cookie.includes('dpa_session=')", timeout=10000, polling=kit.POLL)
    cookie = next(c for c in ctx.cookies() if c["name"] == "dpa_session")
    assert "zoe" not in cookie["value"] and "password" not in cookie["value"]
    page.reload()
    wait_app(page)
    page.get_by_text(re.compile("Signed in as Zoë Ødegård")).wait_for(timeout=20000)
    page.screenshot(path=str(artifacts / "smoke-account.png"), full_page=True)
    # Signing out ends the session for good, also after a refresh.
    page.get_by_role("button", name="Sign out").click()
    page.get_by_text("You are signed out.").wait_for(timeout=20000)
    page.reload()
    wait_app(page)
    page.get_by_role("tab", name="Sign in").wait_for(timeout=20000)
    # A new sign-in in a fresh browser finds the account.
    ctx2 = browser.new_context(locale="en-US")
    p2 = ctx2.new_page()
    p2.goto(f"{server.url}/account?lang=en")
    wait_app(p2)
    form = p2.get_by_test_id("stForm").filter(has_text="Sign in")
    form.get_by_role("textbox", name="E-mail address", exact=True).fill("zoe@example.org")
    form.get_by_role("textbox", name="Password", exact=True).fill("a long enough password")
    form.get_by_role("button", name="Sign in").click()
    p2.get_by_text(re.compile("Welcome, Zoë Ødegård")).wait_for(timeout=20000)
    ctx2.close()
    ctx.close()


WIDTHS = (1400, 390)
PAGES = ("", "lessons", "labs", "exercises", "quiz", "review", "certificate", "verify", "account")
SECTION = "ring-allreduce"  # the lesson walked: the ring animation, code listings, tables, calculators


@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_every_page_opens_in_the_browser(server, browser, artifacts, lang):
    """English opens each page by its URL (a fresh load each); Chinese and Dutch load the home
    page and go on through the sidebar, as a learner does (a load costs Chromium twice the CPU
    of a page change). Each page says its language in ``<html lang>``; in English and Chinese,
    axe-core checks it at 1400 px and again narrowed to 390 px (issue #38): any finding that
    ``browserkit.STREAMLITS`` does not accept by name fails, whatever its impact; and no link or
    button label is cut short with "…" at either width."""
    from academy import i18n

    ctx = browser.new_context(viewport={"width": WIDTHS[0], "height": 900})
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    findings: list[dict] = []
    axe_s = 0.0
    checked = lang in ("en", "zh")  # axe-core's languages; Dutch is walked as before, its language read
    for path in PAGES if checked else [p for p in PAGES if p != "exercises"]:
        if lang == "en" or not path:
            query = f"&section={SECTION}" if path == "lessons" else ""
            page.goto(f"{server.url}/{path}?lang={lang}{query}")
            wait_app(page)
        else:
            kit.nav(page, f"nav.{path}", lang, heading=re.compile("."))
            if path == "lessons" and checked:
                page.locator(f".st-key-nav_{SECTION} button").click()
                page.wait_for_url(re.compile(rf"section={SECTION}"), timeout=30000)
        title = i18n.t(f"nav.{path or 'home'}", lang) if path not in ("", "lessons") else None
        if title:
            page.get_by_role("heading", name=title).first.wait_for(timeout=30000)
        else:
            page.locator("h1").first.wait_for(timeout=30000)
        # The rest of the page arrives before the check and the picture: the script has run
        # (browserkit.wait_app), its charts are drawn, its images and frames loaded, nothing moves.
        kit.wait_app(page)
        page.wait_for_function(DRAWN, timeout=30000, polling=kit.POLL)
        for frame in page.frames:
            frame.wait_for_load_state("load", timeout=30000)
        kit.still(page)
        assert not page.get_by_test_id("stException").count(), f"{lang} /{path} shows an exception"
        tag, direction = i18n.page_language(lang)
        page.wait_for_function("([tag, dir]) => document.documentElement.lang === tag"
                               " && document.documentElement.dir === dir", arg=[tag, direction],
                               timeout=30000, polling=kit.POLL)
        page.screenshot(path=str(artifacts / f"page-{lang}-{path or 'home'}.png"))
        if not checked:
            continue
        for width in WIDTHS:
            if width != WIDTHS[0]:
                page.set_viewport_size({"width": width, "height": 900})
                kit.charts_fitted(page)
                kit.still(page)
            started = time.monotonic()
            found = kit.axe(page)
            axe_s += time.monotonic() - started
            findings += [{**f, "page": f"{lang}-{width}/{path or 'home'}"} for f in found]
            assert kit.cut_short(page) == [], (lang, width, path)  # labels wrap, never "…"
        page.set_viewport_size({"width": WIDTHS[0], "height": 900})
    assert errors == []
    if checked:
        print(f"axe: {len(PAGES) * len(WIDTHS)} checks in {axe_s:.1f} s; Streamlit's, accepted: "
              f"{sorted({(f['page'], f['rule']) for f in findings if kit.streamlits(f)})}")
    ours = [f for f in findings if not kit.streamlits(f)]
    assert ours == [], "\n".join(f"{f['page']}: {f['rule']} ({f['impact']}) {f['html'][:160]}" for f in ours)
    ctx.close()


FOCUSED = """() => { const el = document.activeElement;
    return {role: el.getAttribute('role'), name: el.getAttribute('aria-label'), now: el.getAttribute('aria-valuenow'),
            text: el.getAttribute('aria-valuetext'), inChart: !!el.closest('.js-plotly-plot'),
            live: el.closest('.js-plotly-plot')?.querySelector('.dpa-live')?.textContent ?? null}; }"""


def test_keyboard_only_learner_plays_the_ring_and_sees_the_focus(server, browser, artifacts):
    """With the keyboard alone (issue #38): every Tab stop of the ring lesson shows a focus ring of
    3:1 or more against the same place without focus; Tab reaches the ring animation's step
    slider, then Play and Pause; the arrow keys step it and the live region says each step;
    Enter plays it. Screenshots: ``test-artifacts/keyboard-*.png``."""
    from academy import i18n

    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    page = ctx.new_page()
    page.goto(f"{server.url}/lessons?lang=en&section={SECTION}")
    kit.wait_app(page)
    page.wait_for_function(DRAWN, timeout=30000, polling=kit.POLL)
    kit.still(page)
    started = time.monotonic()
    stops = kit.tab_walk(page, stops=120)
    walk_s = time.monotonic() - started
    faint = [s for s in stops if s["contrast"] is not None and s["contrast"] < 3]
    print(f"Tab walk: {len(stops)} stops in {walk_s:.1f} s, indicator contrast "
          f"{min(s['contrast'] for s in stops if s['contrast'])}:1 at the least")
    assert len(stops) > 30 and all(s["visible"] for s in stops), stops
    assert not faint, faint

    step, play, pause = (i18n.t(f"widgets.ring.{k}", "en") for k in ("step", "play", "pause"))
    page.evaluate("() => { document.activeElement?.blur(); }")
    for _ in range(120):
        page.keyboard.press("Tab")
        now = page.evaluate(FOCUSED)
        if now["inChart"]:
            break
    assert (now["role"], now["name"], now["now"]) == ("slider", step, "0"), now
    kit.frames(page)
    page.screenshot(path=str(artifacts / "keyboard-1-ring-slider.png"))
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => document.activeElement.getAttribute('aria-valuenow') === '2'",
                           timeout=10000, polling=kit.POLL)
    now = page.evaluate(FOCUSED)
    assert now["live"] == now["text"] and now["text"].startswith(f"{step} 2/"), now
    page.screenshot(path=str(artifacts / "keyboard-2-ring-step-2.png"))
    page.keyboard.press("Tab")
    assert page.evaluate(FOCUSED)["name"] == play
    kit.frames(page)
    page.screenshot(path=str(artifacts / "keyboard-3-ring-play.png"))
    page.keyboard.press("Enter")  # plays on from step 2 to the last
    page.wait_for_function("""() => { const live = document.querySelector('.js-plotly-plot .dpa-live');
        const steps = document.querySelector('.js-plotly-plot [role=slider]').getAttribute('aria-valuemax');
        return live && live.textContent.includes(`${steps}/${steps}`); }""", timeout=30000, polling=kit.POLL)
    page.keyboard.press("Tab")
    assert page.evaluate(FOCUSED)["name"] == pause
    kit.frames(page)
    page.screenshot(path=str(artifacts / "keyboard-4-ring-played-pause.png"))
    ctx.close()
