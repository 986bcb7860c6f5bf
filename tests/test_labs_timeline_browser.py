"""The DDP lab's timeline in a real browser, in en, zh and nl (issue #25).

A guest runs the DDP lab with the form's defaults; the timeline section must
show its swim lanes (naive above, DDP below, a lane per rank and thread),
the overlap and exposed figures beside them, the bucket-cap slider and the
trace download. The section is photographed at 1400 px and at 390 px:
``test-artifacts/lab-timeline-<lang>-<width>.png``. The guest first writes a
predicted step time; it comes back in "predict, then measure" beside the step
model (``test-artifacts/lab-predict-<lang>-1400.png``).
"""

from __future__ import annotations

import contextlib
import re

import pytest

from academy.i18n import t
from tests.browserkit import WAIT, alert, button, main, pattern, wait_app

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_the_timeline_shows_each_rank_s_lanes(server, browser, artifacts, lang):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    try:
        page.goto(f"{server.url}/labs?lang={lang}&lab=ddp")
        wait_app(page)
        m = main(page)
        # Predict, then measure: a guess written before the run comes back beside the model.
        m.get_by_role("spinbutton", name=t("labs.predict.field", lang)).fill("9")
        for attempt in range(2):
            button(m.get_by_test_id("stForm"), "labs.run", lang).click()
            button(m, "labs.cancel", lang).wait_for(timeout=WAIT)
            button(m, "labs.cancel", lang).wait_for(state="detached", timeout=240_000)
            wait_app(page)
            # A worker's first lab imports torch between the claim and its first heartbeat;
            # on a loaded machine that can outlast lab_dead_after_s and the run is reaped as
            # "worker_lost" (academy/labqueue.py). The second run finds torch imported.
            if attempt or not m.get_by_test_id("stAlert").filter(has_text=t("labs.worker_lost", lang)).count():
                break
        alert(page, pattern("labs.done", lang))
        wait_app(page)
        title = m.get_by_text(pattern("labs.timeline.title", lang)).first
        title.wait_for(timeout=WAIT)
        # The lanes: naive's and DDP's, two ranks each, compute and all-reduce.
        chart = m.locator(".js-plotly-plot").filter(
            has=page.locator(".ytick", has_text=t("labs.timeline.naive", lang))).first
        chart.wait_for(timeout=WAIT)
        ticks = [x for x in chart.locator(".yaxislayer-above .ytick").all_text_contents() if x]
        assert len(ticks) == 8, ticks
        assert sum(tick.startswith(t("labs.timeline.naive", lang)) for tick in ticks) == 4, ticks
        assert sum(tick.startswith("DDP") for tick in ticks) == 4, ticks
        assert chart.locator(".bars .point").count() > 8  # spans, not just lanes
        naive = t("labs.timeline.naive", lang)
        m.get_by_test_id("stMetric").filter(has_text=t("labs.timeline.overlap", lang, name=naive)).first.wait_for()
        m.get_by_text(t("labs.timeline.cap", lang)).first.wait_for()
        m.get_by_role("button", name=t("labs.timeline.download", lang)).wait_for()
        for width, height in ((1400, 1300), (390, 2600)):  # on a phone the figures stack under the lanes
            page.set_viewport_size({"width": width, "height": height})
            page.wait_for_timeout(1500)  # plotly relayouts to the new width
            title.evaluate("e => e.scrollIntoView({block: 'start'})")
            page.wait_for_timeout(500)
            page.screenshot(path=str(artifacts / f"lab-timeline-{lang}-{width}.png"))
        page.set_viewport_size({"width": 1400, "height": 1000})
        predict = m.get_by_text(pattern("labs.predict.title", lang)).first
        predict.wait_for(timeout=WAIT)
        guess = m.get_by_test_id("stMetric").filter(has_text=t("labs.predict.guess", lang)).first
        assert "9" in guess.inner_text()
        # This server's database may or may not hold a benchmark: either the fit or how to get one.
        fit_or_not = m.get_by_text(pattern("labs.predict.fit", lang)).or_(
            m.get_by_text(re.compile(re.escape(re.split(r"\{", t("labs.predict.no_fit", lang))[0]))))
        fit_or_not.first.wait_for(timeout=WAIT)
        predict.evaluate("e => e.scrollIntoView({block: 'start'})")
        page.wait_for_timeout(500)
        page.screenshot(path=str(artifacts / f"lab-predict-{lang}-1400.png"))
    except BaseException:
        with contextlib.suppress(Exception):
            page.screenshot(path=str(artifacts / f"lab-timeline-{lang}-FAILED.png"), full_page=True)
        raise
    finally:
        with contextlib.suppress(Exception):
            context.close()
