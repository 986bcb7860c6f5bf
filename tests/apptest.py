"""Opening the app's pages in Streamlit's AppTest, as the page tests share it."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

MAIN = str(Path(__file__).resolve().parent.parent / "app" / "main.py")


def open_page(page: str, lang: str = "en", learner_id: int | None = None, *,
              state: dict | None = None, **params: str) -> AppTest:
    """Run main.py with ``?lang=`` and params, signed in as ``learner_id`` and with
    ``state`` preset in the session, then switch to ``page``."""
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.query_params["lang"] = lang
    for key, value in params.items():
        at.query_params[key] = value
    if learner_id is not None:
        at.session_state["session_token"] = login_token(learner_id)
    for key, value in (state or {}).items():
        at.session_state[key] = value
    at.run()
    if page != "home":
        at.switch_page(f"views/{page}.py")
        at.run()
    return at


def login_token(learner_id: int) -> str:
    """A real session token for the learner, as signing in leaves in the session state
    (pages check it on every run; a bare ``learner_id`` signs nobody in)."""
    from academy.accounts import open_session
    from academy.db import session_scope

    with session_scope() as session:
        return open_session(session=session, learner_id=learner_id)


def press(at: AppTest, label: str) -> None:
    """Click the button with this label and run the script again."""
    [b for b in at.button if b.label == label][0].click()
    at.run()


def record_cadence(monkeypatch, of: str = "live") -> list[float | None]:
    """The ``run_every`` of each fragment ``of`` (its function's name: the run a page watches
    is ``live``, the labs page's list of runs ``history``) the pages start, newest last
    (AppTest runs fragments inline and has no timer, so this is how a test sees the cadence)."""
    import streamlit as st

    chosen: list[float | None] = []
    original = st.fragment

    def fragment(func=None, *, run_every=None, **kwargs):
        if getattr(func, "__name__", None) == of:
            chosen.append(run_every)
        return original(func, run_every=run_every, **kwargs)

    monkeypatch.setattr(st, "fragment", fragment)
    return chosen


def heading_levels(at: AppTest) -> list[tuple[int, str]]:
    """(level, text) of every heading in the main area, in page order: ``st.title`` (1),
    ``st.header`` (2), ``st.subheader`` (3) and Markdown's ``#`` lines outside code fences.
    Collapsed expanders and hidden tabs count: their headings are in the page."""
    import re

    from streamlit.testing.v1.element_tree import Block, HeadingBase, Markdown

    found: list[tuple[int, str]] = []

    def walk(node) -> None:
        if isinstance(node, Block):
            for _, child in sorted(node.children.items()):
                walk(child)
        elif isinstance(node, HeadingBase):
            found.append((int(node.tag[1]), str(node.value)))
        elif isinstance(node, Markdown):
            fenced = False
            for line in str(node.value).splitlines():
                if line.lstrip().startswith(("```", "~~~")):
                    fenced = not fenced
                elif not fenced and (m := re.match(r"^(#{1,6})\s+(.*)", line)):
                    found.append((len(m.group(1)), m.group(2)))

    walk(at.main)
    return found


def assert_headings_in_order(at: AppTest) -> None:
    """One h1 first, and no heading more than one level below the one before it (WCAG 1.3.1;
    axe's heading-order: a screen reader's list of headings is the page's outline)."""
    levels = heading_levels(at)
    assert levels and levels[0][0] == 1, levels
    skips = [(before, after) for before, after in zip(levels, levels[1:], strict=False) if after[0] > before[0] + 1]
    assert not skips, skips
