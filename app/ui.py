"""Streamlit glue shared by every page: language, signed-in learner, sidebar.

Pages stay thin: they lay out widgets and call plain modules (``academy.accounts``,
``quizzes``, ``certificates``, ``labs``) that import without Streamlit.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from datetime import date, datetime
from functools import cache
from pathlib import Path

import streamlit as st

from academy import i18n
from academy.accounts import (
    client_key,
    close_all_sessions,
    close_session,
    learner_for_token,
    open_session,
)
from academy.db import session_scope
from academy.errors import UserError
from academy.labruns.pages import GUEST_RUNS_DAYS, scaling_points
from academy.lessons import completed, mark_done, mark_undone
from academy.models import Learner
from academy.settings import get_settings

# Text Streamlit draws faded (captions, placeholders, the uploader's limits, slider ends:
# 60 % of the text colour, about 3.8:1 on white, review m9) in a grey that keeps 4.5:1
# on both backgrounds of the theme. tests/test_contrast.py checks these pairs.
MUTED_TEXT = "#57606a"
STYLE_RULES = {
    '[data-testid="stCaptionContainer"], [data-testid="stCaptionContainer"] *': MUTED_TEXT,
    "input::placeholder, textarea::placeholder": MUTED_TEXT,
    '[data-testid="stFileUploaderDropzoneInstructions"] *': MUTED_TEXT,
    '[data-testid="stSliderTickBarMin"], [data-testid="stSliderTickBarMax"]': MUTED_TEXT,
    '[data-testid="stWidgetLabel"] small': MUTED_TEXT,
}
# Code listings: Streamlit's syntax colours stand at 2.2:1 to 3.9:1 on the listing's background
# (accessibility review, colour-contrast); the same hues, darkened to 4.5:1 and more there.
CODE_COLOURS = {
    ".token.keyword, .token.tag, .token.function, .token.class-name, .token.selector": "#0b5cad",
    ".token.attr-name, .token.property, .token.variable": "#0550ae",
    ".token.string, .token.char, .token.attr-value": "#116329",
    ".token.boolean, .token.constant, .token.symbol, .token.inserted": "#1a7f37",
    ".token.number, .token.regex": "#0a6e62",
    ".token.operator, .token.entity, .token.decorator, .token.atrule": "#953800",
    ".token.url": "#6639ba",
    ".token.important, .token.deleted": "#a40e26",
    ".token.comment, .token.prolog, .token.doctype, .token.cdata, .token.punctuation, .token.unchanged":
        MUTED_TEXT,
}
# Where the keyboard is: a solid ring in the theme's primary colour around whatever has
# focus (WCAG 2.4.7, and 3:1 against what it sits on, 1.4.11). Streamlit's own rings are a
# 1.1:1 tint on links and a 2.5:1 halo on buttons (accessibility review). Outside the control,
# so that a filled button keeps its ring visible; inside for what fills the window or sits in a
# scrolled strip (the main area, tabs). Radio buttons, checkboxes and sliders hide their input:
# the label, or the slider's thumb, carries the ring. tests/test_contrast.py checks FOCUS_COLOUR
# on every background it meets; tests/test_browser_smoke.py measures the ring as drawn.
FOCUS_COLOUR = "#1f4e79"
_RING = f"outline:2px solid {FOCUS_COLOUR} !important;box-shadow:none !important"
FOCUS_RULES = {
    ":focus-visible": f"{_RING};outline-offset:2px !important",
    '[data-testid="stMain"]:focus-visible, [role="tab"]:focus-visible':
        f"{_RING};outline-offset:-2px !important",
    "label:has(input:focus-visible)": f"{_RING};outline-offset:2px !important;border-radius:4px",
    '[data-testid="stSlider"] div:has(> div > input[type="range"]:focus-visible)':  # the thumb
        f"{_RING};outline-offset:2px !important",
    # Plotly's animation controls, made focusable by page.js: SVG takes the ring too.
    ".js-plotly-plot g[tabindex]:focus-visible": f"{_RING};outline-offset:3px !important",
}
# Labels wrap instead of ending in "…": a course card's link, a popover's long label (journey review
# Minor 13). Material icons are ligatures ("menu_book") and must stay on one line.
WRAP = ('[data-testid="stPageLink-NavLink"] :not([data-testid="stIconMaterial"]), '
        'button :not([data-testid="stIconMaterial"])')
# A block that holds nothing but a script (page_script's, the session cookie's) takes no room;
# the live region page.js gives an animated chart is for screen readers only.
HIDDEN = ('[data-testid="stElementContainer"]:has(> [data-testid="stHtml"] > script:only-child){display:none}'
          ".dpa-live{position:absolute;width:1px;height:1px;overflow:hidden;clip-path:inset(50%);white-space:nowrap}")
PAGE_SCRIPT = Path(__file__).resolve().parent / "static" / "page.js"


def style() -> None:
    """Our few CSS rules, once per page run (an HTML block Streamlit keeps out of the layout)."""
    rules = "".join(f"{selector}{{color:{colour} !important;opacity:1 !important}}"
                    for selector, colour in STYLE_RULES.items())
    rules += "".join(f"{','.join(f'[data-testid=stCode] {one.strip()}' for one in selector.split(','))}"
                     f"{{color:{colour} !important}}" for selector, colour in CODE_COLOURS.items())
    rules += "".join(f"{selector}{{{rule}}}" for selector, rule in FOCUS_RULES.items())
    rules += f"{WRAP}{{white-space:normal !important;overflow:visible !important;text-overflow:clip !important}}"
    st.html(f"<style>{rules}{HIDDEN}</style>")


def page_script(code: str) -> None:
    """Once per page run: ``<html lang dir>`` in the page's language (WCAG 3.1.1; Streamlit's
    page says ``lang="en"`` whatever the language, streamlit/streamlit#15726), keyboard use of
    Plotly's animation controls with the step said in a live region, and focus for listings and
    tables that scroll sideways (``app/static/page.js``)."""
    tag, direction = i18n.page_language(code)
    st.html(f"<script>({_page_js()})({json.dumps({'lang': tag, 'dir': direction})});</script>",
            unsafe_allow_javascript=True)


@cache
def _page_js() -> str:
    return PAGE_SCRIPT.read_text(encoding="utf-8")


def cookie_name() -> str:
    """``__Host-dpa_session`` over HTTPS (the browser then insists on ``Secure``, path ``/``
    and no ``Domain``, so no sibling host or plain-HTTP page can set it), else ``dpa_session``."""
    return "__Host-dpa_session" if get_settings().https else "dpa_session"


def lang() -> str:
    """The learner's language: ``?lang=`` in the URL, else the last choice, else the browser."""
    state = st.session_state
    asked = st.query_params.get("lang")
    code = i18n.normalise_lang(asked)
    if asked and code is None:
        state["_bad_lang"] = True  # said, never shown: it is the link's author's text (F-10)
    if code is None:
        code = state.get("lang")
    if code is None:
        code = i18n.normalise_lang(st.context.locale) or i18n.DEFAULT_LANG
    state["lang"] = code
    if st.query_params.get("lang") != code:
        st.query_params["lang"] = code  # keeps the choice across refreshes and shared links
    return code


def t(key: str, /, **values) -> str:
    return i18n.t(key, st.session_state.get("lang", i18n.DEFAULT_LANG), **values)


def error_text(err: UserError) -> str:
    """The one way a page shows an error from below: its catalog text in the
    learner's language (``academy.errors``), never ``str(err)``, which is English;
    what the person typed (``err.typed``) in it verbatim."""
    shown = {name: verbatim(err.values[name]) for name in err.typed if name in err.values}
    return err.text(st.session_state.get("lang", i18n.DEFAULT_LANG), **shown)


def verbatim(value: object) -> str:
    """Typed text inside Markdown as an inline code span, fenced by more backticks than
    it holds: nothing in it is read as Markdown, HTML, an emoji or icon code or LaTeX."""
    text = " ".join(str(value).splitlines())
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}"


def date_text(value: date | datetime, *, minutes: bool = False) -> str:
    """A date (with ``minutes``, also the time) as the learner's language writes it, by Babel."""
    code = st.session_state.get("lang", i18n.DEFAULT_LANG)
    return i18n.format_datetime(value, code) if minutes else i18n.format_date(value, code)


def client() -> str:
    """Who is asking, for the per-client limits (sign-in, sign-up, guests' labs):
    ``academy.accounts.client_key`` of the websocket's peer and, with
    ``TRUSTED_PROXY_HOPS`` set, the X-Forwarded-For header our proxy appended to.
    ``UNKNOWN_CLIENT`` for loopback in any spelling: then only the per-address limits apply."""
    return client_key(st.context.ip_address, forwarded=st.context.headers.get("X-Forwarded-For"),
                      hops=get_settings().trusted_proxy_hops)


def learner() -> Learner | None:
    """The signed-in learner, or None.

    The session token is checked against its server-side row on *every* run
    (two primary-key look-ups), so signing out in one tab, "sign out
    everywhere" or a password change ends every other tab and every
    re-attached Streamlit session at its next interaction (review F-5). The
    cookie is read only on a browser session's first run.
    """
    state = st.session_state
    token = state.get("session_token")
    if token is None and "learner_id" not in state:
        token = (st.context.cookies or {}).get(cookie_name())
    found = None
    if token:
        with session_scope() as session:
            found = learner_for_token(session=session, token=token)
    if found is None:
        if state.get("learner_id") is not None:
            state["_session_ended"] = True
        if token:
            state["_cookie_write"] = CookieWrite(token=None)  # a dead token: drop it from the browser too
        for key in ("session_token", "quiz_attempt_id"):
            state.pop(key, None)
        state["learner_id"] = None
        return None
    state["learner_id"], state["session_token"] = found.id, token
    return found


@dataclass(frozen=True)
class CookieWrite:
    """The session cookie this run decided on, written by ``flush_cookie``:
    a token to set, or ``None`` to clear it (a typed value, not an empty string)."""

    token: str | None


def _set_cookie(value: str, max_age: int) -> None:
    # Streamlit cannot set cookies from Python; a tiny script does it in the
    # page. The value is a signed token naming a revocable server session.
    # It cannot be HttpOnly (script-set); see docs/contributors/security-model.md.
    secure = "; Secure" if get_settings().https else ""
    st.html(
        "<script>document.cookie = "
        + json.dumps(f"{cookie_name()}={value}; path=/; max-age={max_age}; SameSite=Strict{secure}")
        + ";</script>",
        unsafe_allow_javascript=True,
    )


def sign_in_as(found: Learner) -> None:
    with session_scope() as session:
        token = open_session(session=session, learner_id=found.id)
    st.session_state["learner_id"] = found.id
    st.session_state["session_token"] = token
    st.session_state["_cookie_write"] = CookieWrite(token=token)


def sign_out(*, everywhere: bool = False) -> None:
    """End this session (or, ``everywhere``, every session of the learner) and clear the cookie."""
    token = st.session_state.get("session_token")
    if token:
        with session_scope() as session:
            if everywhere:
                found = learner_for_token(session=session, token=token)
                if found is not None:
                    close_all_sessions(session=session, learner_id=found.id)
            close_session(session=session, token=token)
    for key in ("learner_id", "session_token", "quiz_attempt_id"):
        st.session_state.pop(key, None)
    st.session_state["learner_id"] = None
    st.session_state["_cookie_write"] = CookieWrite(token=None)


def flush_cookie() -> None:
    """Write (or clear) the session cookie decided during this run."""
    write = st.session_state.pop("_cookie_write", None)
    if write is None:
        return
    if write.token is None:
        _set_cookie("", 0)
    else:
        _set_cookie(write.token, get_settings().session_days * 86400)


def cookie(name: str) -> str | None:
    """A cookie the browser sent when this session began (Streamlit reads them then only)."""
    return (st.context.cookies or {}).get(name)


def guest_runs_cookie_name() -> str:
    """The cookie of a guest's lab runs (``academy.labruns.guest_token``), named as the session's is."""
    return "__Host-dpa_guest_labs" if get_settings().https else "dpa_guest_labs"


def remember_guest_runs(token: str) -> None:
    """Write the guest's signed run list to their cookie (a script, as for the session cookie)."""
    secure = "; Secure" if get_settings().https else ""
    age = GUEST_RUNS_DAYS * 86400
    st.html("<script>document.cookie = " + json.dumps(
        f"{guest_runs_cookie_name()}={token}; path=/; max-age={age}; SameSite=Strict{secure}") + ";</script>",
        unsafe_allow_javascript=True)


def sidebar(code: str, who: Learner | None):
    """The language choice and who is signed in, in the sidebar; returns the place of the
    latter, which :func:`show_who` corrects once the page has run."""
    names = i18n.languages()
    with st.sidebar:
        choice = st.selectbox(
            t("nav.language"), list(names), index=list(names).index(code),
            format_func=lambda c: names[c], key="lang_select",
        )
        if choice != code:
            st.session_state["lang"] = choice
            st.query_params["lang"] = choice
            st.rerun()
        who_slot = st.empty()
        _who_line(who_slot, who)
    if st.session_state.pop("_session_ended", False):
        st.info(t("account.session_ended"))
    if st.session_state.pop("_bad_lang", False):
        st.warning(t("common.unknown_language_link"))
    return who_slot


def _who_line(slot, who: Learner | None) -> None:  # an st.empty()
    if who is None:
        slot.caption(t("account.guest"))
    else:
        # st.text: the name is the learner's own text, never Markdown.
        slot.text(t("account.signed_in_as", name=who.display_name or who.email))


def show_who(slot, who: Learner | None) -> None:  # sidebar()'s place
    """After the page has run (also when it ends with a rerun): a page run that signed the
    learner out says "guest" in the sidebar, not "Signed in as" (review N-18)."""
    if who is not None and st.session_state.get("learner_id") != who.id:
        _who_line(slot, None)


def require_learner(reason_key: str) -> Learner | None:
    """The signed-in learner, or a message with a way to sign in (then None)."""
    who = learner()
    if who is None:
        st.info(t(reason_key))
        st.page_link(PAGE_PATHS["account"], label=t("nav.account"), icon=":material/login:")
    return who


PAGE_PATHS = {
    "home": "views/home.py",
    "lessons": "views/lessons.py",
    "labs": "views/labs.py",
    "exercises": "views/exercises.py",
    "quiz": "views/quiz.py",
    "review": "views/review.py",
    "certificate": "views/certificate.py",
    "verify": "views/verify.py",
    "account": "views/account.py",
    "admin": "views/admin.py",
}


def link(page: str, label: str, icon: str | None = None, **params: str) -> None:
    """A link to one of our pages that keeps the language in the URL."""
    params = {"lang": st.session_state.get("lang", i18n.DEFAULT_LANG), **params}
    st.page_link(PAGE_PATHS[page], label=label, icon=icon, query_params=params)


def done_sections(who: Learner | None) -> set[str]:
    """Finished lesson sections: from the database, or this visit's for a guest."""
    if who is None:
        return set(st.session_state.setdefault("guest_done", set()))
    with session_scope() as session:
        return completed(session=session, learner_id=who.id)


def set_done(who: Learner | None, section_id: str, done: bool) -> None:
    if who is None:
        guest = st.session_state.setdefault("guest_done", set())
        (guest.add if done else guest.discard)(section_id)
        return
    with session_scope() as session:
        (mark_done if done else mark_undone)(session=session, learner_id=who.id, section_id=section_id)


def my_scaling_points(who: Learner | None) -> list[tuple[int, float]]:
    """(world size, scaling efficiency) from the learner's stored DDP lab runs."""
    if who is None:
        return []
    with session_scope() as session:
        return scaling_points(session=session, learner_id=who.id)


def labeler(prefix: str):
    """A ``format_func`` for option keys: ``prefix + key`` translated in today's language.

    The language is bound now, since Streamlit may call the function outside
    this script run (AppTest does).
    """
    code = st.session_state.get("lang", i18n.DEFAULT_LANG)
    return lambda key: i18n.t(f"{prefix}{key}", code)


def person_name(name: str) -> None:
    """A name a learner typed, as text in its own direction: escaped (no Markdown, HTML,
    entities or autolinks) in a ``dir="auto"`` block, so an Arabic or Hebrew name, alone
    or mixed with Latin, reads right to left as it does on the certificate."""
    st.html(f'<div dir="auto" style="font-size:1.25rem;font-weight:600">{html.escape(name)}</div>')
