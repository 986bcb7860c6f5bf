"""The sharding lab, run from the Labs page in a real browser, read in every language.

A guest opens /labs with the sharding lab chosen, presses Run with the form's
defaults (2 ranks), waits for the result and reads it in each language through
the sidebar's language box (the run stays in the session): the form, the line
of what to look for, the three checks, the ledger and the wire bytes drawn.
Screenshots: ``test-artifacts/lab-sharding-<lang>.png`` (the ledger) and
``lab-sharding-<lang>-wire.png`` (the bytes on the wire) and
``lab-sharding-<lang>-map.png`` (the shard map, played to its last phase).
"""

from __future__ import annotations

import contextlib

import pytest

from academy.i18n import languages, t
from tests.browserkit import (
    WAIT,
    alert,
    button,
    charts_fitted,
    main,
    pattern,
    see,
    switch_language,
    wait_app,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

FIRST = "en"  # the run's language; then each other one

# The animation shows its last phase, and that frame's transition has ended.
LAST_FRAME = """([el, last]) => (el.querySelector('.gtitle')?.textContent || '').startsWith(last)
    && !el._transitioning"""


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1300, "height": 1000}, locale="en-US")
    yield ctx.new_page()
    with contextlib.suppress(Exception):
        ctx.close()


def read(page, artifacts, lang: str) -> None:
    """Check the result in ``lang`` and photograph the ledger, the wire bytes and the played shard map."""
    m = main(page)
    see(page, t("sharding.width", lang))  # the form's own field
    alert(page, pattern("labs.done", lang))
    alert(page, t("labs.look.sharding", lang))
    alert(page, t("sharding.check_order", lang, count=2))
    alert(page, pattern("sharding.check_ledger", lang))
    alert(page, pattern("sharding.check_weights", lang))
    see(page, t("sharding.ledger_title", lang, count=2), timeout=WAIT).scroll_into_view_if_needed()
    charts = m.locator(".js-plotly-plot")
    charts.nth(1).wait_for(timeout=WAIT)
    series = t("sharding.series", lang, part=t("sharding.part.optimizer", lang), kind=t("sharding.predicted", lang))
    charts.first.locator("g.legend").get_by_text(series).first.wait_for(timeout=WAIT)  # redrawn in this language
    charts.nth(1).locator("g.legend").get_by_text(t("sharding.sent", lang)).first.wait_for(timeout=WAIT)
    charts_fitted(page)
    page.screenshot(path=str(artifacts / f"lab-sharding-{lang}.png"))
    charts.nth(1).scroll_into_view_if_needed()
    page.wait_for_timeout(200)  # a frame for the scrolled page to be painted
    page.screenshot(path=str(artifacts / f"lab-sharding-{lang}-wire.png"))
    shard_map = charts.nth(2)  # the shard map of DDP: played to its last phase
    shard_map.scroll_into_view_if_needed()
    shard_map.locator("g.updatemenu-button").filter(has_text=t("widgets.ring.play", lang)).click()
    last = t("sharding.phase.step_all", lang)
    page.wait_for_function(LAST_FRAME, arg=[shard_map.element_handle(), last], timeout=WAIT)
    page.screenshot(path=str(artifacts / f"lab-sharding-{lang}-map.png"))


def test_the_sharding_lab_runs_from_the_page_and_reads_in_each_language(server, page, artifacts):
    order = [FIRST, *sorted(set(languages()) - {FIRST})]
    for lang in order:
        (artifacts / f"lab-sharding-{lang}.png").unlink(missing_ok=True)
    lang = FIRST
    try:
        page.goto(f"{server.url}/labs?lang={FIRST}&lab=sharding")
        wait_app(page)
        m = main(page)
        button(m.get_by_test_id("stForm"), "labs.run", FIRST).click()
        button(m, "labs.cancel", FIRST).wait_for(timeout=WAIT)
        button(m, "labs.cancel", FIRST).wait_for(state="detached", timeout=240_000)
        wait_app(page)
        for lang in order:
            if lang != FIRST:
                switch_language(page, lang)
            read(page, artifacts, lang)
    except BaseException:
        with contextlib.suppress(Exception):
            page.screenshot(path=str(artifacts / f"lab-sharding-{lang}-FAILED.png"), full_page=True)
        raise
    for lang in order:
        assert (artifacts / f"lab-sharding-{lang}.png").exists()
