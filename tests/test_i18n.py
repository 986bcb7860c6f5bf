"""UI catalogs: every language has every key English has; fallback works;
counts get the language's plural form and numbers its decimal mark."""

import re
import string
from datetime import datetime

import pytest

from academy import content, i18n


def fields(text):
    return {f for _, f, _, _ in string.Formatter().parse(text) if f}


def forms(value):
    """A catalog value's texts: the plain string, or each plural form."""
    return value if isinstance(value, dict) else {"other": value}


def test_three_languages_at_least():
    assert {"en", "zh", "nl"} <= set(i18n.languages())
    assert i18n.languages()["zh"] == "简体中文"


@pytest.mark.parametrize("lang", sorted(i18n.languages()))
def test_catalog_complete(lang):
    assert i18n.missing_keys(lang) == [], f"{lang} lacks keys English has"


def keys(tree, prefix=""):
    """A catalog's keys, dotted; a set of plural forms is one key."""
    if not isinstance(tree, dict) or i18n.is_plural(tree):
        return {prefix[:-1]}
    return {k for key, value in tree.items() for k in keys(value, f"{prefix}{key}.")}


@pytest.mark.parametrize("kind", [content.UI, content.QUIZ, content.CERTIFICATES, content.CREDENTIALS])
def test_every_language_has_every_catalog_with_every_key(kind):
    """One place per kind of text (``academy.content``): ``content/<kind>/<lang>.yaml``
    exists for every course language and has exactly English's keys."""
    assert content.catalog_languages(kind) == content.languages()
    english = keys(content.catalog(kind, "en"))
    for lang in content.languages():
        assert keys(content.catalog(kind, lang)) == english, (kind, lang)


@pytest.mark.parametrize("lang", sorted(i18n.languages()))
def test_placeholders_match_english(lang):
    """Every form has English's placeholders; a singular may leave out the count
    ("the question you missed"), but nothing may appear that English lacks."""
    en = i18n.catalog("en")
    for key, value in i18n.catalog(lang).items():
        if key not in en:
            continue
        expected = fields(forms(en[key])["other"])
        for form, text in forms(value).items():
            if form == "other":
                assert fields(text) == expected, key
            else:
                assert expected - {"count"} <= fields(text) <= expected, (key, form)


@pytest.mark.parametrize("lang", sorted(i18n.languages()))
def test_plural_forms_are_the_languages_own(lang):
    """A plural mapping has exactly the CLDR forms of its language (en/nl: one
    and other), is keyed on ``count``, and a language without plurals (zh) uses
    plain strings."""
    wanted = i18n.plural_forms(lang)
    for key, value in i18n.catalog(lang).items():
        if isinstance(value, dict):
            assert set(value) == wanted, (key, sorted(value))
            assert len(wanted) > 1, f"{lang} has no plural forms, so {key} should be one string"
            assert "count" in fields(value["other"]), key


@pytest.mark.parametrize(
    ("lang", "count", "expected"),
    [("en", 1, "1 lab run recorded."), ("en", 2, "2 lab runs recorded."), ("en", 0, "0 lab runs recorded."),
     ("nl", 1, "1 labrun vastgelegd."), ("nl", 3, "3 labruns vastgelegd."), ("zh", 1, "已记录 1 次实验运行。")],
)
def test_count_picks_the_plural_form(lang, count, expected):
    assert i18n.t("home.labs_runs", lang, count=count) == expected


def test_plural_keys_named_in_the_review_have_a_singular():
    """The review saw "1 lab runs", "1 administrators" and "de 1 onbeantwoorde vragen"."""
    keys = ["home.labs_runs", "admin.learners_count", "quiz.practice_start", "quiz.finish_early", "labs.history_row",
            "labs.queued"]  # a two-core machine runs one lab at a time
    for lang in ("en", "nl"):
        for key in keys:
            assert isinstance(i18n.catalog(lang)[key], dict), (lang, key)
    assert i18n.t("quiz.finish_early", "en", count=1) == "Finish now: the unanswered question counts as wrong"
    assert i18n.t("quiz.practice_start", "nl", count=1) == "De vraag oefenen die je fout had"
    row = i18n.t("labs.history_row", "en", id=1, lab="DDP", count="?", status="done", date="today")
    assert "? ranks" in row  # a count that is not a number takes the general form


def sample(spec):
    """A sample value for a placeholder: a float for float formats, else an int."""
    return 1234.5 if spec and spec[-1] in "eEfFgG%" else 7


@pytest.mark.parametrize("lang", ["nl"])
def test_every_number_prints_with_a_decimal_comma(lang):
    """Render every key with sample numbers: 1234.5 must never print as "1234.5"
    or "1,234" (a Dutch reader takes that for 1.234), and every key with a
    decimal format shows a decimal comma."""
    checked = 0
    for key, value in i18n.catalog(lang).items():
        for text in forms(value).values():
            specs = {f: spec for _, f, spec, _ in string.Formatter().parse(text) if f}
            if not any(spec and spec[-1] in "eEfFgG" for spec in specs.values()):
                continue
            out = i18n.t(key, lang, **{f: sample(spec) for f, spec in specs.items()})
            assert not re.search(r"1234\.\d|1,234\b|1,2345", out), (key, out)
            assert re.search(r"\d,\d", out), (key, out)
            checked += 1
    assert checked >= 10  # the lab results have many decimals


@pytest.mark.parametrize(
    ("lang", "expected"), [("en", "1,234.5"), ("zh", "1,234.5"), ("nl", "1.234,5")],
)
def test_grouping_and_decimal_marks(lang, expected):
    assert i18n.t("x {v:,.1f} y", lang, v=1234.5) == f"x {expected} y"


def test_format_number_for_text_outside_the_catalogs():
    assert i18n.format_number(1234.5678, "nl", ".4g") == "1235"
    assert i18n.format_number(0.0125, "nl", ".3g") == "0,0125"
    assert i18n.format_number(1234.5, "en", ",.1f") == "1,234.5"


def test_numbers_keep_their_format_spec():
    assert i18n.t("labs.done", "nl", seconds=1.5, overhead=0.25).startswith("Klaar in 1,50 s (waarvan 0,25 s")
    assert i18n.t("labs.done", "en", seconds=1.5, overhead=0.25).startswith("Finished in 1.50 s (of which 0.25 s")
    assert i18n.t("labs.bench.ratio", "nl", ratio=0.5, size="16 MiB").startswith("Onze ring haalt 50% ")
    # Text and ids are left alone: only numbers are localised.
    assert i18n.t("admin_certs.revoked", "nl", id="DP-1.2,3") == "DP-1.2,3 is ingetrokken."


def test_english_fallback_still_uses_the_readers_decimal_mark(monkeypatch):
    monkeypatch.setitem(i18n.catalog("en"), "only.in.english", "{x:.1f} s")
    assert i18n.t("only.in.english", "nl", x=2.5) == "2,5 s"


# Each script the name field promises, with a name in it: (sample, en, nl, zh).
PROMISED_SCRIPTS = [
    ("Zoë Łukasiewicz", "Latin", "Latijns", "拉丁"),
    ("Nguyễn Thị Minh Khai", "Vietnamese", "Vietnamees", "越南"),
    ("Αλέξανδρος", "Greek", "Grieks", "希腊"),
    ("Пётр Чайковский", "Cyrillic", "Cyrillisch", "西里尔"),
    ("Արամ", "Armenian", "Armeens", "亚美尼亚"),
    ("ნინო", "Georgian", "Georgisch", "格鲁吉亚"),
    ("张伟", "Chinese", "Chinees", "中文"),
    ("山田 たろう", "Japanese", "Japans", "日文"),
    ("김민준", "Korean", "Koreaans", "韩文"),
    ("محمد", "Arabic", "Arabisch", "阿拉伯"),
    ("דוד", "Hebrew", "Hebreeuws", "希伯来"),
    ("राहुल", "Devanagari", "Devanagari", "天城文"),
    ("রবীন্দ্রনাথ", "Bengali", "Bengaals", "孟加拉"),
    ("தமிழ்", "Tamil", "Tamil", "泰米尔"),
    ("สมชาย", "Thai", "Thais", "泰文"),
    ("አበበ", "Ethiopic", "Ethiopisch", "埃塞俄比亚"),
    ("Ana 🎉", "emoji", "emoji", "表情符号"),
]


def test_name_help_names_the_scripts_the_certificate_prints():
    """The name field promises exactly what the certificate prints: a name
    in each script it lists prints, what it says is refused is refused, and
    nothing is promised for later."""
    from certificates.text import unprintable_chars

    assert [row[0] for row in PROMISED_SCRIPTS if unprintable_chars(row[0])] == []
    assert unprintable_chars("Ann \x07\ue000") == ["\x07", "\ue000"]  # control, private use
    for column, lang in enumerate(["en", "nl", "zh"], start=1):
        text = i18n.t("certificate.name_help", lang)
        assert [row[column] for row in PROMISED_SCRIPTS if row[column] not in text] == [], lang
        assert not any(w in text for w in ("yet", "nog niet", "暂时", "any script", "elk schrift", "各种文字"))


def test_missing_key_falls_back_to_english(monkeypatch):
    monkeypatch.setitem(i18n.catalog("zh"), "only.in.english", "x")
    del i18n.catalog("zh")["only.in.english"]
    i18n.catalog("en")["only.in.english"] = "Only English"
    try:
        assert i18n.t("only.in.english", "zh") == "Only English"
    finally:
        del i18n.catalog("en")["only.in.english"]


def test_unknown_key_shows_the_key():
    assert i18n.t("no.such.key", "nl") == "no.such.key"


@pytest.mark.parametrize(
    ("value", "expected"),
    [("zh", "zh"), ("zh-CN", "zh"), ("NL", "nl"), ("nl_BE", "nl"), ("en-US", "en"), ("xx", None),
     ("", None), (None, None), ("<script>", None)],
)
def test_normalise_lang(value, expected):
    assert i18n.normalise_lang(value) == expected


def test_dates_are_written_the_way_each_language_writes_them():
    """Babel's CLDR data, not an ISO f-string: what the pages' history rows and
    certificate dates show (issue #14)."""
    when = datetime(2025, 3, 7, 15, 4)
    assert i18n.format_date(when, "nl") == "7 mrt 2025"
    assert i18n.format_date(when, "zh") == "2025年3月7日"
    assert i18n.format_datetime(when, "zh") == "2025年3月7日 15:04"
    assert i18n.format_datetime(when, "nl") == "7 mrt 2025, 15:04"
    assert i18n.format_datetime(when, "en").replace("\u202f", " ") == "Mar 7, 2025, 3:04 PM"
    assert i18n.format_date(when, "xx") == i18n.format_date(when, "en")  # no such language: English


def test_a_malformed_catalog_names_its_file(tmp_path, monkeypatch):
    """``academy.content`` reads every catalog: a broken one is named, not a KeyError deep in a page."""
    from academy.settings import get_settings

    broken = tmp_path / content.UI / "en.yaml"
    broken.parent.mkdir()
    broken.write_text("home:\n  title: [unclosed\n", encoding="utf-8")
    with pytest.raises(content.ContentError, match=f"^{re.escape(str(broken))}: not valid YAML"):
        content.load(broken)
    (tmp_path / content.QUIZ).mkdir()
    (tmp_path / content.QUIZ / "en.yaml").write_text("- a list\n", encoding="utf-8")
    monkeypatch.setenv("CONTENT_DIR", str(tmp_path))
    get_settings.cache_clear()
    try:
        with pytest.raises(content.ContentError, match=r"quizzes/en\.yaml: must be a mapping"):
            content.catalog(content.QUIZ, "en")
        with pytest.raises(content.ContentError, match=r"i18n/en\.yaml: not valid YAML"):
            i18n.catalog("en")
    finally:
        monkeypatch.delenv("CONTENT_DIR")
        get_settings.cache_clear()


def test_each_language_declares_its_page_language():
    """``<html lang dir>`` (WCAG 3.1.1): a BCP 47 tag per language, the script named for
    Chinese, and the direction from CLDR (a right-to-left language gets ``rtl``)."""
    assert {code: i18n.page_language(code) for code in i18n.languages()} == {
        "en": ("en", "ltr"), "zh": ("zh-Hans", "ltr"), "nl": ("nl", "ltr")}
    assert i18n.page_language("ar") == ("ar", "rtl")  # no catalog yet: the code, and CLDR's direction
