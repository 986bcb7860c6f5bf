"""Each ring algorithm, run from the Labs page in a real browser, and its animation played.

A guest opens /labs, picks the algorithm in the form, presses Run, waits for
the result, plays the animation to its last step and checks what it shows:
chunks for the ring and the pipelined ring, whole buffers for the naive one.
Screenshots: ``test-artifacts/lab-ring-<algo>.png``.
"""

from __future__ import annotations

import contextlib
import re

import pytest

from academy.i18n import t
from tests.browserkit import WAIT, alert, button, main, nav, pattern, see, wait_app

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LANG = "en"
# algo -> steps with the form's default 3 ranks, and what the last frame's arrows say travels
RANKS = 3
ALGOS = {"ring": (4, "widgets.ring.chunk"), "pipelined": (4, "widgets.ring.chunk"),
         "naive": (2, "widgets.ring.rank")}  # a naive arrow names the rank whose buffer it carries


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1300, "height": 900}, locale="en-US")
    yield ctx.new_page()
    with contextlib.suppress(Exception):
        ctx.close()


def choose(form, page, label_key: str, option: str) -> None:
    """Pick ``option`` in the form's select box labelled ``label_key``."""
    box = form.get_by_test_id("stSelectbox").filter(has_text=t(label_key, LANG))
    box.scroll_into_view_if_needed()
    page.wait_for_timeout(300)  # a list opened while the page still scrolls closes again
    wanted = page.get_by_role("option", name=option, exact=True)
    for _ in range(3):
        box.get_by_role("combobox").click()
        with contextlib.suppress(Exception):
            wanted.wait_for(timeout=5_000)
            break
    wanted.click()


def test_each_ring_algorithm_runs_from_the_page_and_animates(server, page, artifacts):
    page.goto(f"{server.url}/?lang={LANG}")
    wait_app(page)
    nav(page, "nav.labs", LANG)
    m = main(page)
    for algo, (steps, travels) in ALGOS.items():
        shot = artifacts / f"lab-ring-{algo}.png"
        shot.unlink(missing_ok=True)
        try:
            form = m.get_by_test_id("stForm")
            choose(form, page, "labs.algo", t(f"labs.algo_{algo}", LANG))
            button(form, "labs.run", LANG).click()
            # The run's own live view, then its result (not the previous run's).
            button(m, "labs.cancel", LANG).wait_for(timeout=WAIT)
            button(m, "labs.cancel", LANG).wait_for(state="detached", timeout=150_000)
            alert(page, pattern("labs.done", LANG))
            wait_app(page)
            caption = t("labs_naive.animation" if algo == "naive" else "labs.ring.animation", LANG)
            see(page, caption)
            chart = m.locator(".js-plotly-plot").first
            chart.wait_for(timeout=WAIT)
            chart.scroll_into_view_if_needed()
            assert chart.locator(".gtitle").text_content() == t("widgets.ring.start", LANG)
            chart.locator("g.updatemenu-button").filter(has_text=t("widgets.ring.play", LANG)).click()
            last = rf"^{re.escape(t('widgets.ring.step', LANG))} {steps}/{steps} "
            # The last step shows, and its transition has ended before the picture.
            page.wait_for_function(
                "([el, last]) => new RegExp(last).test(el.querySelector('.gtitle')?.textContent || '')"
                " && !el._transitioning", arg=[chart.element_handle(), last], timeout=WAIT)
            arrows = chart.locator("g.annotation").all_text_contents()
            assert len(arrows) == RANKS and all(t(travels, LANG) in a for a in arrows), arrows
            if algo == "naive":
                assert t("labs_naive.pass_around", LANG) in chart.locator(".gtitle").text_content()
            page.screenshot(path=str(shot))
        except BaseException:
            with contextlib.suppress(Exception):
                page.screenshot(path=str(artifacts / f"lab-ring-{algo}-FAILED.png"), full_page=True)
            raise
        assert shot.exists()
