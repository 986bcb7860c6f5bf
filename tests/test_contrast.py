"""Every text at least 4.5:1 against its background (WCAG 2 AA; issue #22, review m9), and
the focus ring at least 3:1 against whatever it is drawn on (WCAG 1.4.11, issue #38).

Pure Python over what sets the colours: the theme in ``.streamlit/config.toml``
(body text, links, alerts, the primary button, code listings), the CSS rules of ``app.ui``
(captions and the other text Streamlit draws faded, code listings' syntax colours, the focus
ring) and the charts' palette (``tests/test_charts.py`` checks each figure's own text). A
browser check of the computed colours is in ``tests/test_figures_browser.py``; the focus
ring as drawn, measured at every Tab stop, in ``tests/test_browser_smoke.py``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from app import charts, ui

ROOT = Path(__file__).resolve().parent.parent
THEME = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))["theme"]
BACKGROUNDS = {"page": THEME["backgroundColor"], "sidebar": THEME["secondaryBackgroundColor"]}


def pairs():
    """(what, text colour, background) for every text colour we set."""
    for where, background in BACKGROUNDS.items():
        yield f"body text on {where}", THEME["textColor"], background
        yield f"link on {where}", THEME["linkColor"], background
        for selector, colour in ui.STYLE_RULES.items():
            yield f"{selector} on {where}", colour, background
    for selector, colour in ui.CODE_COLOURS.items():
        yield f"code listing {selector}", colour, THEME["codeBackgroundColor"]
    yield "code listing text", THEME["textColor"], THEME["codeBackgroundColor"]
    yield "primary button text", "#ffffff", THEME["primaryColor"]
    for hue in ("blue", "green", "yellow", "orange", "red", "violet", "gray"):
        yield f"{hue} alert", THEME[f"{hue}TextColor"], THEME[f"{hue}BackgroundColor"]
    yield "chart text", charts.INK, charts.PAPER


@pytest.mark.parametrize(("what", "text", "background"), list(pairs()), ids=lambda v: v if " " in str(v) else "")
def test_text_has_at_least_4_5_to_1(what, text, background):
    assert charts.contrast(text, background) >= 4.5, (what, text, background, charts.contrast(text, background))


def test_streamlit_s_faded_text_is_overridden():
    """Streamlit draws captions at 60 % of the text colour: with the theme's text that is
    below 4.5:1 on the sidebar, so the CSS must set captions' colour (and opacity) itself."""
    faded = blend(THEME["textColor"], THEME["secondaryBackgroundColor"], 0.6)
    assert charts.contrast(faded, THEME["secondaryBackgroundColor"]) < 4.5  # why the CSS is needed
    assert any("stCaptionContainer" in selector for selector in ui.STYLE_RULES)
    assert all(charts.contrast(c, bg) >= 4.5 for c in ui.STYLE_RULES.values() for bg in BACKGROUNDS.values())


def blend(colour: str, background: str, alpha: float) -> str:
    a = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    b = [int(background[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(alpha * x + (1 - alpha) * y):02x}" for x, y in zip(a, b, strict=True))


def test_code_listings_colours_cover_streamlit_s_token_classes():
    """Every token class Streamlit colours in a listing (its Prism theme) gets one of ours."""
    ours = {part.strip() for selector in ui.CODE_COLOURS for part in selector.split(",")}
    streamlit_s = {".token.keyword", ".token.tag", ".token.function", ".token.class-name", ".token.selector",
                   ".token.attr-name", ".token.property", ".token.variable", ".token.string", ".token.char",
                   ".token.attr-value", ".token.boolean", ".token.constant", ".token.symbol", ".token.inserted",
                   ".token.number", ".token.regex", ".token.operator", ".token.entity", ".token.decorator",
                   ".token.atrule", ".token.url", ".token.important", ".token.deleted", ".token.comment",
                   ".token.prolog", ".token.doctype", ".token.cdata", ".token.punctuation", ".token.unchanged"}
    assert streamlit_s <= ours, streamlit_s - ours


@pytest.mark.parametrize("where", ["backgroundColor", "secondaryBackgroundColor", "codeBackgroundColor",
                                   *(f"{hue}BackgroundColor" for hue in ("blue", "green", "yellow", "orange",
                                                                        "red", "violet", "gray"))])
def test_focus_ring_has_3_to_1_on_every_background(where):
    """The ring is drawn outside a control (on the page, the sidebar, a listing or an alert that
    holds a link) or inside one that fills the window: 3:1 against each (WCAG 1.4.11)."""
    assert charts.contrast(ui.FOCUS_COLOUR, THEME[where]) >= 3, (where, charts.contrast(ui.FOCUS_COLOUR, THEME[where]))
