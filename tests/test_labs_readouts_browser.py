"""Every lab's result, run from the Labs page in a real browser, in en, zh and nl (issue #22).

A guest runs the ring lab (chunked and naive), the benchmark and DDP with
the form's defaults, in each language, and the result is photographed at
1400 px and at 390 px wide: ``test-artifacts/lab-result-<lab>-<lang>-<width>.png``.
The checks are the readouts' own: the result opens with "what to look for",
and the figures named in issue #22 are on the page. English runs first, so
its ring shows the default model line (no benchmark yet); zh and nl run
after a benchmark on the same machine, so theirs come from its fit.
"""

from __future__ import annotations

import contextlib

import pytest

from academy.i18n import t
from tests.browserkit import WAIT, alert, button, main, pattern, wait_app

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# (name in the file, lab, algorithm to pick or None, what the result must show)
RUNS = [("ring", "ring", None, "labs.ring.noise"),
        ("naive", "ring", "naive", "labs.ring.noise"),
        ("bench", "bench", None, "labs.bench.noise"),
        ("ddp", "ddp", None, "labs.ddp.bucketing_why")]
WIDTHS = (1400, 390)
HEIGHT = """() => Math.max(...['stMain', 'stAppViewContainer', 'stMainBlockContainer']
    .map(id => document.querySelector(`[data-testid="${id}"]`)?.scrollHeight || 0))"""


@pytest.fixture
def context(browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    yield ctx
    with contextlib.suppress(Exception):
        ctx.close()


def choose(page, lang: str, label_key: str, option: str) -> None:
    form = main(page).get_by_test_id("stForm")
    box = form.get_by_test_id("stSelectbox").filter(has_text=t(label_key, lang))
    box.scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    wanted = page.get_by_role("option", name=option, exact=True)
    for _ in range(3):
        box.get_by_role("combobox").click()
        with contextlib.suppress(Exception):
            wanted.wait_for(timeout=5_000)
            break
    wanted.click()


@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_every_lab_result_reads_true_in_each_language(server, context, artifacts, lang):
    page = context.new_page()
    for name, lab, algo, must_show in RUNS:
        page.set_viewport_size({"width": 1400, "height": 1000})
        page.goto(f"{server.url}/labs?lang={lang}&lab={lab}")
        wait_app(page)
        m = main(page)
        try:
            if algo:
                choose(page, lang, "labs.algo", t(f"labs.algo_{algo}", lang))
            button(m.get_by_test_id("stForm"), "labs.run", lang).click()
            button(m, "labs.cancel", lang).wait_for(timeout=WAIT)
            button(m, "labs.cancel", lang).wait_for(state="detached", timeout=240_000)
            alert(page, pattern("labs.done", lang))
            wait_app(page)
            look = m.get_by_test_id("stAlert").first
            key = {"ring": "labs.look.ring", "naive": "labs.look.ring_naive", "bench": "labs.look.bench",
                   "ddp": "labs.look.ddp"}[name]
            opening = t(key, lang, count=3, steps=4)[:6]  # "What t", "看点：环形算", "Waar j"
            assert opening in look.text_content(), look.text_content()  # after the icon's name
            m.get_by_text(pattern(must_show, lang)).first.wait_for(timeout=WAIT)
            for width in WIDTHS:
                page.set_viewport_size({"width": width, "height": 1000})
                page.wait_for_timeout(1500)  # plotly relayouts to the new width
                # Streamlit scrolls inside the app, not the document: make the window
                # as tall as the page, so that one picture holds the whole result.
                tall = page.evaluate(HEIGHT)
                page.set_viewport_size({"width": width, "height": min(tall + 40, 16000)})
                page.wait_for_timeout(1500)
                page.screenshot(path=str(artifacts / f"lab-result-{name}-{lang}-{width}.png"))
        except BaseException:
            with contextlib.suppress(Exception):
                page.screenshot(path=str(artifacts / f"lab-result-{name}-{lang}-FAILED.png"), full_page=True)
            raise
