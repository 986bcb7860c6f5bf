"""The Exercises page in Chromium against the real app, worker and grader: write a ring
all-reduce in the editor, Run it, see it pass with the learner's own ring animated, find the
draft again after a refresh, and receive the reference solution only after passing.

The editor is streamlit-code-editor (Ace) in a component iframe of our own origin, which
app/web.py lets our pages frame: the solution is typed into it with the keyboard, and its
text is read back with Ace's own API in that frame.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from academy.i18n import t
from labs.exercises import messages, reference, starter
from tests import browserkit as kit
from tests.test_security import dom, record_frames

pytestmark = pytest.mark.browser

MINE = (Path(__file__).parent / "fixtures" / "exercise_page" / "ring_mine.py").read_text()
GRADING = 180_000  # ms: queue, sandbox start and every hidden case on a busy 2-core machine
EDITOR = 'iframe[title="code_editor.code_editor"]'  # Streamlit titles a component's iframe by its name


def editor_frame(page):
    """The editor's frame once Ace is up in it (the component's page loads after ours)."""
    kit.main(page).locator(EDITOR).wait_for(timeout=kit.WAIT)
    frame = kit.main(page).locator(EDITOR).element_handle().content_frame()
    frame.wait_for_selector(".ace_editor .ace_content", timeout=kit.WAIT)
    return frame


def editor_text(frame) -> str:
    """All of the editor's text (Ace draws only the lines in view, so not read from the DOM)."""
    return frame.evaluate("() => ace.edit(document.querySelector('.ace_editor')).getValue()")


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

    frame = editor_frame(page)
    assert "NotImplementedError" in editor_text(frame)  # the starter
    # Typed as a learner would: focus the editor, select all, then the text through the keyboard.
    frame.click(".ace_content")
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(MINE)
    assert editor_text(frame) == MINE  # verbatim: no auto-indent or closing brackets added
    shot = kit.main(page).locator(EDITOR)
    shot.scroll_into_view_if_needed()
    shot.screenshot(path=str(artifacts / "exercise-editor.png"))
    assert arrived(secret) == []
    # Run takes the focus from the editor, which sends its text first: what is graded is MINE.
    kit.button(kit.main(page), "exercises.run", "en").click()
    passed = messages.template("passed", "en", "ring-allreduce")  # the exercise's own words
    kit.alert(page, re.compile(".+?".join(re.escape(p) for p in re.split(r"\{[^{}]*\}", passed))),
              timeout=GRADING)
    kit.wait_app(page)
    kit.see(page, t("exercises.ring", "en"))
    # Beside the animation, the family the grader found in the router's log of the same case.
    family = kit.see(page, messages.text("pattern_shown", "en", "ring-allreduce", case="w4-n10-float32", world_size=4,
                                         family=messages.text("family_ring", "en", "ring-allreduce")))
    family.scroll_into_view_if_needed()
    family.screenshot(path=str(artifacts / "exercise-ring-family.png"))
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
    assert editor_text(editor_frame(page)) == MINE  # the draft, back in the editor
    ctx.close()
