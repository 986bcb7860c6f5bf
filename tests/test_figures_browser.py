"""The figures and captions in a real browser (issue #22): caption text keeps 4.5:1 as
the browser computes it, and screenshots of the lessons' figures at 1400 and 390 px in
every language go to ``test-artifacts/`` (looked at by a person, not compared)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from app import charts
from tests.browserkit import still, wait_app

pytestmark = [pytest.mark.browser, pytest.mark.slow]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
RGB = "(c) => { const m = c.match(/\\d+(\\.\\d+)?/g).map(Number); return m; }"


def hex_of(rgb: list[float]) -> str:
    return "#" + "".join(f"{round(v):02x}" for v in rgb[:3])


def test_captions_computed_colour_has_4_5_to_1(server, browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 900}, locale="en-US")
    page = ctx.new_page()
    try:
        page.goto(f"{server.url}/?lang=en")
        wait_app(page)
        captions = page.locator('[data-testid="stCaptionContainer"]')
        captions.first.wait_for()
        colours = captions.evaluate_all(
            "els => els.map(e => { const s = getComputedStyle(e.querySelector('p') || e);"
            " return [s.color, s.opacity, getComputedStyle(e).opacity]; })")
        assert colours
        for colour, opacity, outer in colours:
            assert float(opacity) == 1 and float(outer) == 1, colours
            rgb = [float(v) for v in colour[colour.index("(") + 1:-1].split(",")]
            assert len(rgb) == 3 or rgb[3] == 1, colours
            assert charts.contrast(hex_of(rgb), "#ffffff") >= 4.5, colours
    finally:
        with contextlib.suppress(Exception):
            ctx.close()


@pytest.mark.parametrize("lang", ["en", "zh", "nl"])
def test_screenshots_of_the_lessons_figures(server, browser, lang):
    """One page per language; each section is loaded at each width (a resize is no phone:
    the ring figure, drawn wide and then narrowed, keeps its wide scale and loses its title).
    English at both widths; Chinese and Dutch at the phone's, where their longer or wider
    labels are the ones to wrap or overflow."""
    ARTIFACTS.mkdir(exist_ok=True)
    ctx = browser.new_context(viewport={"width": 1400, "height": 900}, locale="en-US")
    page = ctx.new_page()
    try:
        for width in (1400, 390) if lang == "en" else (390,):
            page.set_viewport_size({"width": width, "height": 900})
            for section in ("training-step", "ring-allreduce", "ddp"):
                page.goto(f"{server.url}/lessons?lang={lang}&section={section}")
                wait_app(page)
                charts_on_page = page.locator(".js-plotly-plot")
                charts_on_page.first.wait_for(timeout=60_000)
                for i in range(charts_on_page.count()):
                    chart = charts_on_page.nth(i)
                    chart.scroll_into_view_if_needed()
                    still(page)
                    box = chart.bounding_box()
                    assert box and box["width"] <= width, (section, i, box)
                    chart.locator("xpath=../../..").screenshot(
                        path=str(ARTIFACTS / f"figure-{section}-{i}-{lang}-{width}.png"))
    finally:
        with contextlib.suppress(Exception):
            ctx.close()
