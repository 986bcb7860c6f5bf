"""UI catalogs: every language has every key English has; fallback works."""

import pytest

from app import i18n


def test_three_languages_at_least():
    assert {"en", "zh", "nl"} <= set(i18n.languages())
    assert i18n.languages()["zh"] == "简体中文"


@pytest.mark.parametrize("lang", sorted(i18n.languages()))
def test_catalog_complete(lang):
    assert i18n.missing_keys(lang) == [], f"{lang} lacks keys English has"


@pytest.mark.parametrize("lang", sorted(i18n.languages()))
def test_placeholders_match_english(lang):
    import string

    fields = lambda text: {f for _, f, _, _ in string.Formatter().parse(text) if f}  # noqa: E731
    en = i18n.catalog("en")
    for key, text in i18n.catalog(lang).items():
        if key in en:
            assert fields(text) == fields(en[key]), key


def test_missing_key_falls_back_to_english(monkeypatch):
    monkeypatch.setitem(i18n.catalog("zh"), "only.in.english", "x")  # noqa: B909
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
