"""Certificate text in each language, from ``content/certificates/<lang>.yaml``
(read through ``academy.content``).

A certificate can be issued in every language of the course; the list is the
one ``academy.content`` discovers from the lessons, so a new language works
here before its certificate texts exist (they fall back to English until
``content/certificates/<lang>.yaml`` is written; tests/test_i18n.py lists what
is missing).
"""

from __future__ import annotations

from datetime import date
from typing import Any

from babel.dates import format_date as babel_date

from academy import content
from academy.i18n import babel_locale


def languages() -> tuple[str, ...]:
    """The languages a certificate can be issued in: the course's languages."""
    return content.languages()


def texts(lang: str) -> dict[str, Any]:
    """All strings of one language (``ValueError`` for an unknown language),
    English for a course language that has no certificate texts yet."""
    if lang not in languages():
        raise ValueError(f"unknown certificate language {lang!r}; use one of {languages()}")
    return content.catalog(content.CERTIFICATES, lang) or content.catalog(content.CERTIFICATES, content.DEFAULT_LANG)


def format_date(iso: str, lang: str) -> str:
    """``2025-11-30`` as ``30 November 2025`` / ``2025年11月30日`` / ``30 november 2025``:
    Babel names the months; ``date_pattern`` in the locale file is a CLDR length
    ("long") or pattern ("d MMMM y": the English certificate keeps its day-first date)."""
    # A course language Babel does not know (a new or made-up code) dates in English.
    locale = lang if babel_locale(lang) is not None else content.DEFAULT_LANG
    return babel_date(date.fromisoformat(iso), texts(lang)["date_pattern"], locale=locale)


def format_score(score: float, lang: str) -> str:
    """A percentage: whole numbers without decimals, others to one decimal."""
    score = round(float(score), 1)
    text = f"{score:.0f}" if score.is_integer() else f"{score:.1f}"
    return text.replace(".", texts(lang)["decimal_separator"])
