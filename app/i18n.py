"""UI string catalogs, one YAML file per language in ``app/content/i18n``.

Adding a language is adding ``<code>.yaml`` there (and lesson and quiz
texts); no code changes. A key missing from a language falls back to
English for that string alone.
"""

from __future__ import annotations

from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import yaml

CATALOG_DIR = Path(__file__).resolve().parent / "content" / "i18n"
DEFAULT_LANG = "en"


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for key, value in tree.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{full}."))
        else:
            flat[full] = str(value)
    return flat


@cache
def catalog(lang: str) -> dict[str, str]:
    path = CATALOG_DIR / f"{lang}.yaml"
    if not path.is_file():
        return {}
    return _flatten(yaml.safe_load(path.read_text(encoding="utf-8")) or {})


@lru_cache(maxsize=1)
def languages() -> dict[str, str]:
    """Language code -> its own name (e.g. ``zh`` -> ``简体中文``), English first."""
    codes = sorted(p.stem for p in CATALOG_DIR.glob("*.yaml"))
    codes.sort(key=lambda c: c != DEFAULT_LANG)
    return {c: catalog(c).get("meta.name", c) for c in codes}


def t(key: str, lang: str, /, **values: Any) -> str:
    """The text for ``key`` in ``lang``, English if that language lacks it."""
    text = catalog(lang).get(key)
    if text is None:
        text = catalog(DEFAULT_LANG).get(key, key)
    return text.format(**values) if values else text


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
