"""A real browser: language switch sticks across a reload; an account survives a refresh."""

import re

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


@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_every_page_opens_in_the_browser(server, browser, artifacts, lang):
    """English opens each page by its URL (a fresh load each); Chinese and Dutch load the home
    page and go on through the sidebar, as a learner does (a load costs Chromium twice the CPU
    of a page change)."""
    from academy import i18n

    ctx = browser.new_context(viewport={"width": 1300, "height": 900})
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    for path in ("", "lessons", "labs", "quiz", "review", "certificate", "verify", "account"):
        if lang == "en" or not path:
            page.goto(f"{server.url}/{path}?lang={lang}")
            wait_app(page)
        else:
            kit.nav(page, f"nav.{path}", lang, heading=re.compile("."))
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
        page.screenshot(path=str(artifacts / f"page-{lang}-{path or 'home'}.png"))
    assert errors == []
    ctx.close()
