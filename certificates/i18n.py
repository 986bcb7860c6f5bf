"""Certificate text in each language, from ``certificates/locales/<lang>.yaml``."""

from __future__ import annotations

from datetime import date
from functools import cache
from pathlib import Path
from typing import Any

import yaml

LOCALES = Path(__file__).resolve().parent / "locales"
LANGS = ("en", "zh", "nl")


@cache
def texts(lang: str) -> dict[str, Any]:
    """All strings of one language (``ValueError`` for an unknown language)."""
    if lang not in LANGS:
        raise ValueError(f"unknown certificate language {lang!r}; use one of {LANGS}")
    return yaml.safe_load((LOCALES / f"{lang}.yaml").read_text(encoding="utf-8"))


def format_date(iso: str, lang: str) -> str:
    """``2025-11-30`` as ``30 November 2025`` / ``2025年11月30日`` / ``30 november 2025``."""
    d = date.fromisoformat(iso)
    t = texts(lang)
    return t["date_format"].format(
        day=d.day, month=t["months"][d.month - 1], month_num=d.month, year=d.year
    )


def format_score(score: float, lang: str) -> str:
    """A percentage: whole numbers without decimals, others to one decimal."""
    score = round(float(score), 1)
    text = f"{score:.0f}" if score.is_integer() else f"{score:.1f}"
    return text.replace(".", texts(lang)["decimal_separator"])
