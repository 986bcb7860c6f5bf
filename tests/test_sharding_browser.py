"""The sharding lab, run from the Labs page in a real browser, in every language.

A guest opens /labs with the sharding lab chosen, presses Run with the form's
defaults (2 ranks), waits for the result and checks what it shows: the line of
what to look for, the three checks, the ledger and the wire bytes drawn.
Screenshots: ``test-artifacts/lab-sharding-<lang>.png`` (the ledger) and
``lab-sharding-<lang>-wire.png`` (the bytes on the wire) and
``lab-sharding-<lang>-map.png`` (the shard map, played to its last phase).
"""

from __future__ import annotations

import contextlib

import pytest

from academy.i18n import languages, t
from tests.browserkit import WAIT, alert, button, main, pattern, see, wait_app

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1300, "height": 1000}, locale="en-US")
    yield ctx.new_page()
    with contextlib.suppress(Exception):
        ctx.close()


@pytest.mark.parametrize("lang", sorted(languages()))
def test_the_sharding_lab_runs_from_the_page(server, page, artifacts, lang):
    shot = artifacts / f"lab-sharding-{lang}.png"
    shot.unlink(missing_ok=True)
    try:
        page.goto(f"{server.url}/labs?lang={lang}&lab=sharding")
        wait_app(page)
        m = main(page)
        form = m.get_by_test_id("stForm")
        see(page, t("sharding.width", lang))
        button(form, "labs.run", lang).click()
        button(m, "labs.cancel", lang).wait_for(timeout=WAIT)
        button(m, "labs.cancel", lang).wait_for(state="detached", timeout=240_000)
        alert(page, pattern("labs.done", lang))
        wait_app(page)
        alert(page, t("labs.look.sharding", lang))
        alert(page, t("sharding.check_order", lang, count=2))
        alert(page, pattern("sharding.check_ledger", lang))
        alert(page, pattern("sharding.check_weights", lang))
        see(page, t("sharding.ledger_title", lang, count=2), timeout=WAIT).scroll_into_view_if_needed()
        charts = m.locator(".js-plotly-plot")
        charts.nth(1).wait_for(timeout=WAIT)
        legend = charts.first.locator("g.legend").text_content()
        assert t("sharding.series", lang, part=t("sharding.part.optimizer", lang),
                 kind=t("sharding.predicted", lang)) in legend
        assert t("sharding.sent", lang) in charts.nth(1).locator("g.legend").text_content()
        page.wait_for_timeout(600)
        page.screenshot(path=str(shot))
        charts.nth(1).scroll_into_view_if_needed()
        page.wait_for_timeout(300)
        page.screenshot(path=str(artifacts / f"lab-sharding-{lang}-wire.png"))
        shard_map = charts.nth(2)  # the shard map of DDP: played to its last phase
        shard_map.scroll_into_view_if_needed()
        shard_map.locator("g.updatemenu-button").filter(has_text=t("widgets.ring.play", lang)).click()
        last = t("sharding.phase.step_all", lang)
        page.wait_for_function("([el, last]) => (el.querySelector('.gtitle')?.textContent || '').startsWith(last)",
                               arg=[shard_map.element_handle(), last], timeout=WAIT)
        page.wait_for_timeout(400)
        page.screenshot(path=str(artifacts / f"lab-sharding-{lang}-map.png"))
    except BaseException:
        with contextlib.suppress(Exception):
            page.screenshot(path=str(artifacts / f"lab-sharding-{lang}-FAILED.png"), full_page=True)
        raise
    assert shot.exists()
