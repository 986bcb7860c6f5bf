"""Property tests (hypothesis) over everything a URL or a form hands to a parser: each
parser raises only its documented errors, and every page that reads a URL parameter
(``?lang=`` on all pages, ``?section=``, ``?lab=``, ``?id=``, ``?exercise=``) renders without an exception
for arbitrary values. Examples are bounded so the file stays well under a minute.

The parameters are those ``grep -rn query_params app`` finds; a new one belongs here.
"""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from academy import accounts, i18n
from app import ui
from certificates.ids import InvalidId, parse_id
from tests import apptest

# Text as it arrives in a URL or a form: any Unicode (no surrogates), plus shapes that
# parsers treat specially (links, Markdown, IDs, paths, language tags).
SHAPES = ["http://", "https://x/?id=", "?id=", "DP-", "[a](//0.0.0.0)", "![](//x/a.png)", "**", ":red[",
          "../", "zh-CN", "nl_BE", "<script>", "%00", "\u200b", "\u202e", "ＤＰ－", "@", "xn--"]
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=300)
VALUES = st.one_of(TEXT, st.builds(lambda a, b, c: a + b + c, st.sampled_from(SHAPES), TEXT, st.sampled_from(SHAPES)))
FAST = settings(max_examples=150, deadline=None)
PAGE = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
                derandomize=True)


# --- parsers --------------------------------------------------------------------------------------


@FAST
@given(VALUES)
def test_normalise_lang_returns_a_language_or_none(value):
    assert i18n.normalise_lang(value) in (None, *i18n.languages())


@FAST
@given(VALUES)
def test_parse_id_raises_only_invalid_id(value):
    try:
        parsed = parse_id(value)
    except InvalidId:
        return
    assert parsed == parse_id(parsed)  # canonical


def test_parse_id_with_a_broken_url_is_invalid_id():
    with pytest.raises(InvalidId):
        parse_id("http://[::1/?id=DP-32GY-9968-T9TV-JB45-KH")


@FAST
@given(VALUES)
@example("admin\u200b@example.org")
@example("\u0430dmin@example.org")
def test_check_email_raises_only_account_error(value):
    try:
        address = accounts.check_email(value)
    except accounts.AccountError as err:
        assert err.key == "account.err_email"
        return
    assert address == accounts.normalise_email(address) and "@" in address
    assert not [ch for ch in address if unicodedata.category(ch) in ("Cc", "Cf")]


@FAST
@given(VALUES)
def test_display_names_are_clean(value):
    name = accounts.clean_display_name(value)
    assert len(name) <= 200 and name == name.strip()
    assert not [ch for ch in name if unicodedata.category(ch) in ("Cc", "Cf")]


# --- pages ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """One AppTest per page that reads a parameter, on its own database, reused by the examples."""
    from _pytest.monkeypatch import MonkeyPatch

    from tests.conftest import use_database

    mp = MonkeyPatch()
    db = use_database(mp, DATABASE_URL=f"sqlite:///{tmp_path_factory.mktemp('params') / 'app.db'}")
    next(db)
    opened = {page: apptest.open_page(page) for page in ("home", "lessons", "labs", "verify", "account",
                                                       "exercises")}
    yield opened
    next(db, None)


def _renders(at, **params: str) -> None:
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, (params, at.exception)
    shown = [w.value for w in at.warning]
    for value in params.values():  # a value from the URL is never repeated in a message (F-10)
        if len(value) >= 4:
            assert not [w for w in shown if value[:20] in w], shown


@PAGE
@given(value=VALUES)
@example(value="[Verify](//0.0.0.0)")
def test_any_lang_on_every_page(pages, value):
    for at in pages.values():
        _renders(at, lang=value)
        assert at.query_params["lang"] in ([code] for code in i18n.languages()) or at.query_params["lang"] in i18n.languages()


@PAGE
@given(value=VALUES)
@example(value="../../etc/passwd")
def test_any_section(pages, value):
    _renders(pages["lessons"], section=value)


@PAGE
@given(value=VALUES)
@example(value="ring; rm -rf /")
def test_any_lab(pages, value):
    _renders(pages["labs"], lab=value)


@PAGE
@given(value=VALUES)
@example(value="x" * 10_000)
@example(value="http://[::1/?id=DP-32GY-9968-T9TV-JB45-KH")  # F-12
def test_any_certificate_id(pages, value):
    _renders(pages["verify"], id=value)


@PAGE
@given(value=VALUES)
@example(value="ring-allreduce/../../reference")
@example(value="bucketed_overlap")  # a folder's name, not an exercise id
def test_any_exercise(pages, value):
    _renders(pages["exercises"], exercise=value)
    assert not pages["exercises"].exception


def test_the_parameters_here_are_all_the_app_reads():
    """A new ``st.query_params`` key in app/ must be added to the page tests above."""
    import re
    from pathlib import Path

    root = Path(ui.__file__).parent
    keys = set()
    for path in root.rglob("*.py"):
        keys |= set(re.findall(r"query_params(?:\.get\(|\[)\"(\w+)\"", path.read_text()))
    assert keys == {"lang", "section", "lab", "id", "exercise"}, keys
