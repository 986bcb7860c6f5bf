"""UI string catalogs, one YAML file per language in ``content/i18n``, read
through ``academy.content``.

Adding a language is adding ``<code>.yaml`` there beside its lessons (the
language list is discovered from ``content/lessons``, see ``academy.content``)
and its quiz texts; no code changes. A key missing from a language falls back to
English for that string alone.

A string that states a count may be a mapping of CLDR plural forms,
``{one: "{count} lab run", other: "{count} lab runs"}``: ``t`` picks the
form for the ``count`` value by the language's plural rules (Babel's CLDR
data), so no language needs code for its grammar; Chinese simply keeps one
plain string. Numbers are formatted with the reader's decimal and grouping
marks, so ``{seconds:.2f}`` reads "1,50" in Dutch and "1.50" in English,
whatever format spec the catalog uses.
"""

from __future__ import annotations

import numbers
import string
from datetime import date, datetime
from functools import cache
from pathlib import Path
from typing import Any

from babel import Locale, UnknownLocaleError
from babel.dates import format_date as babel_date
from babel.dates import format_time as babel_time
from babel.dates import get_datetime_format
from babel.numbers import get_decimal_symbol, get_group_symbol

from academy import content
from academy.content import DEFAULT_LANG

PLURAL_FORMS = frozenset({"zero", "one", "two", "few", "many", "other"})

# A catalog value: plain text, or plural form -> text.
Message = str | dict[str, str]


def is_plural(value: Any) -> bool:
    """Whether a YAML mapping is a set of plural forms rather than a nested group of keys."""
    return isinstance(value, dict) and "other" in value and set(value) <= PLURAL_FORMS


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Message]:
    flat: dict[str, Message] = {}
    for key, value in tree.items():
        full = f"{prefix}{key}"
        if is_plural(value):
            flat[full] = {form: str(text) for form, text in value.items()}
        elif isinstance(value, dict):
            flat.update(_flatten(value, f"{full}."))
        else:
            flat[full] = str(value)
    return flat


def catalog(lang: str) -> dict[str, Message]:
    """Key -> text of ``lang``'s catalog, flattened (empty for a language without one)."""
    return _flat(content.path(content.UI, f"{lang}.yaml"))


@cache
def _flat(path: Path) -> dict[str, Message]:  # keyed by path: a test may point CONTENT_DIR elsewhere
    return _flatten(content.load(path) or {}) if path.is_file() else {}


def languages() -> dict[str, str]:
    """Language code -> its own name (e.g. ``zh`` -> ``简体中文``), English first.

    The codes are the languages that have lessons (``academy.content``)."""
    return {c: str(catalog(c).get("meta.name", c)) for c in content.languages()}


def page_language(lang: str) -> tuple[str, str]:
    """What a page in ``lang`` declares in ``<html lang dir>``: the BCP 47 tag (``meta.tag``
    in the language's catalog, e.g. ``zh-Hans``; else the code) and the writing direction
    from CLDR, ``"rtl"`` for a language such as Arabic, else ``"ltr"``."""
    tag = str(catalog(lang).get("meta.tag", lang))
    locale = babel_locale(tag.replace("-", "_")) or babel_locale(lang)
    return tag, "rtl" if locale is not None and locale.text_direction == "rtl" else "ltr"


@cache
def babel_locale(lang: str) -> Locale | None:
    """Babel's locale for a language code, or None where Babel has none (a new
    course language may be added before Babel knows it)."""
    try:
        return Locale.parse(lang)
    except (UnknownLocaleError, ValueError):
        return None


def plural_form(lang: str, count: Any) -> str:
    """The CLDR plural category (``one``, ``other``...) of ``count`` in ``lang``;
    ``other`` for anything that is not a number (such as a "?" placeholder)."""
    locale = babel_locale(lang)
    if locale is None or isinstance(count, bool) or not isinstance(count, numbers.Real):
        return "other"
    return locale.plural_form(abs(count))


def plural_forms(lang: str) -> frozenset[str]:
    """The plural categories ``lang`` distinguishes (always including ``other``)."""
    locale = babel_locale(lang)
    return frozenset(locale.plural_form.tags if locale else ()) | {"other"}


@cache
def number_marks(lang: str) -> tuple[str, str]:
    """(decimal mark, grouping mark) of ``lang``, from CLDR; English's if unknown."""
    if babel_locale(lang) is None:
        return ".", ","
    return get_decimal_symbol(lang), get_group_symbol(lang)


class _LocalFormatter(string.Formatter):
    """``str.format`` whose numbers use the language's decimal and grouping marks.

    Python formats the number first (so every format spec keeps its meaning),
    then its "." and "," are swapped for the language's marks.
    """

    def __init__(self, lang: str) -> None:
        self.decimal, self.group = number_marks(lang)

    def format_field(self, value: Any, format_spec: str) -> str:
        text = super().format_field(value, format_spec)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return text
        if (self.decimal, self.group) == (".", ","):
            return text
        return text.translate({ord("."): "\0", ord(","): self.group}).replace("\0", self.decimal)


def format_number(value: float, lang: str, spec: str = "") -> str:
    """``format(value, spec)`` in ``lang``'s marks, for numbers shown outside a
    catalog string (metrics, table cells): Dutch readers get "1,5 MB" there too."""
    return _LocalFormatter(lang).format_field(value, spec)


def format_date(value: date, lang: str, length: str = "medium") -> str:
    """A date as ``lang``'s readers write it (Babel's CLDR data: "Mar 7, 2025",
    "7 mrt 2025", "2025年3月7日"), never a hand-made pattern; English's if unknown."""
    return babel_date(value, length, locale=lang if babel_locale(lang) else DEFAULT_LANG)


def format_datetime(value: datetime, lang: str) -> str:
    """Date and minute (the stored UTC time, as stored) in ``lang``'s order and marks:
    "Mar 7, 2025, 3:04 PM", "7 mrt 2025, 15:04", "2025年3月7日 15:04"."""
    code = lang if babel_locale(lang) else DEFAULT_LANG
    return (get_datetime_format("medium", locale=code)
            .replace("{1}", babel_date(value, "medium", locale=code))
            .replace("{0}", babel_time(value, "short", locale=code)))


def t(key: str, lang: str, /, **values: Any) -> str:
    """The text for ``key`` in ``lang``, English if that language lacks it.

    Plural forms are chosen by the ``count`` value; numbers in ``values`` are
    printed with ``lang``'s decimal mark even when the text is English fallback.
    """
    text_lang = lang
    text = catalog(lang).get(key)
    if text is None:
        text_lang = DEFAULT_LANG
        text = catalog(DEFAULT_LANG).get(key, key)
    if isinstance(text, dict):
        text = text.get(plural_form(text_lang, values.get("count")), text["other"])
    return _LocalFormatter(lang).format(text, **values) if values else text


def normalise_lang(value: str | None) -> str | None:
    """A supported language code for a value such as ``zh-CN`` or ``NL``, else None."""
    if not value:
        return None
    value = value.strip().replace("_", "-").lower()
    if value in languages():
        return value
    base = value.split("-", 1)[0]
    return base if base in languages() else None


def missing_keys(lang: str) -> list[str]:
    """Keys English has that ``lang`` lacks (for tests and the admin page)."""
    return sorted(set(catalog(DEFAULT_LANG)) - set(catalog(lang)))
