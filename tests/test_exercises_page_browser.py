"""The Exercises page in Chromium against the real app, worker and grader: write a ring
all-reduce in the editor, Run it, see it pass with the learner's own ring animated, find the
draft again after a refresh, and receive the reference solution only after passing.

The editor is a plain ``st.text_area`` (with a highlighted copy below it):
streamlit-code-editor's iframe cannot load under our own headers
(``X-Frame-Options: DENY``, ``frame-ancestors 'none'`` on every response, app/web.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from academy.i18n import t
from labs.exercises import reference, starter
from tests import browserkit as kit
from tests.test_security import dom, record_frames

pytestmark = pytest.mark.browser

MINE = (Path(__file__).parent / "fixtures" / "exercise_page" / "ring_mine.py").read_text()
GRADING = 180_000  # ms: queue, sandbox start and every hidden case on a busy 2-core machine


def reference_lines() -> list[str]:
    """Lines of the reference that no statement, starter or hint has: what must not arrive early."""
    lines = [line.strip() for line in reference("ring-allreduce").splitlines()]
    public = MINE + starter("ring-allreduce")
    found = [line for line in lines if len(line) > 25 and line not in public]
    assert len(found) >= 3
    return found


def test_write_run_pass_see_the_ring_refresh_and_only_then_the_reference(server, browser, artifacts):
    ctx = browser.new_context(locale="en-US", viewport={"width": 1300, "height": 1000})
    page = ctx.new_page()
    frames = record_frames(page)
    page.goto(f"{server.url}/account?lang=en")
    kit.wait_app(page)
    kit.sign_up(page, "en", name="Rin Gall", email="ring-writer@example.org", password="a long enough password")
    kit.nav(page, "nav.exercises", "en")
    secret = reference_lines()

    def arrived(texts: list[str]) -> list[str]:
        received, shown = b"".join(frames), dom(page)
        return [s for s in texts if s.encode() in received or s in shown]

    editor = kit.main(page).get_by_role("textbox", name=t("exercises.editor", "en"))
    editor.wait_for(timeout=kit.WAIT)
    assert "NotImplementedError" in editor.input_value()  # the starter
    editor.fill(MINE)
    editor.press("Control+Enter")  # Streamlit takes a text area's value on Ctrl+Enter or blur
    kit.wait_app(page)
    assert arrived(secret) == []
    kit.button(kit.main(page), "exercises.run", "en").click()
    kit.alert(page, kit.pattern("exercises.passed", "en"), timeout=GRADING)
    kit.wait_app(page)
    kit.see(page, t("exercises.ring", "en"))
    chart = kit.main(page).locator(".js-plotly-plot").first
    chart.wait_for(timeout=kit.WAIT)
    chart.scroll_into_view_if_needed()
    title = "el => el.querySelector('.gtitle')?.textContent || ''"
    assert page.evaluate(title, chart.element_handle()) == t("widgets.ring.start", "en")
    # Play the learner's ring to its last step: 2(n-1) steps, the sends their ranks made.
    chart.locator("g.updatemenu-button").filter(has_text=t("widgets.ring.play", "en")).click()
    page.wait_for_function(
        "([el, last]) => new RegExp(last).test(el.querySelector('.gtitle')?.textContent || '')",
        arg=[chart.element_handle(), rf"^{t('widgets.ring.step', 'en')} (\d+)/\1 "], timeout=kit.WAIT)
    chart.screenshot(path=str(artifacts / "exercise-ring.png"))
    # Passed: now, and only now, our solution is on the page beside the learner's.
    kit.see(page, t("exercises.reference", "en"))
    assert arrived(secret) == secret

    page.reload()
    kit.wait_app(page)
    editor = kit.main(page).get_by_role("textbox", name=t("exercises.editor", "en"))
    editor.wait_for(timeout=kit.WAIT)
    assert editor.input_value() == MINE
    ctx.close()
