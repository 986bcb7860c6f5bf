"""The platform's reader of learner-visible text: ``content/`` (or ``CONTENT_DIR``).

The loader itself is ``labs.content`` (the folders, safe YAML cached per
path, ``ContentError`` naming the file, the English fallback), which
``labs.exercises.messages`` reads the exercise texts through as well: ``labs``
sits below ``academy`` and may not import it. This module gives it the
platform's folder (``Settings.content_dir``) and offers the same names, so the
platform's readers (``academy.lessons``, ``academy.i18n``, ``quizzes``,
``certificates``) import this one module.

The language list is discovered, not declared: a language is a folder under
``content/lessons`` with a ``toc.yaml``, so adding one is adding files.
Because reads are cached per absolute path, pointing ``CONTENT_DIR`` elsewhere
(a test with a fourth language) never sees another tree's files.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from academy.settings import get_settings
from labs import content as loader
from labs.content import (
    CERTIFICATES,
    CREDENTIALS,
    DEFAULT_LANG,
    EXERCISES,
    LESSONS,
    QUIZ,
    QUIZ_BANK,
    QUIZ_TEMPLATES,
    UI,
    ContentError,
    load,
    text,
    where,
)

__all__ = ["CERTIFICATES", "CREDENTIALS", "DEFAULT_LANG", "EXERCISES", "LESSONS", "QUIZ", "QUIZ_BANK", "QUIZ_TEMPLATES", "UI",
           "ContentError", "catalog", "catalog_languages", "languages", "load", "path", "read_yaml", "root",
           "text", "where"]


def root() -> Path:
    """The content folder in use (``Settings.content_dir``)."""
    return get_settings().content_dir


def path(*parts: str) -> Path:
    """A path inside the content folder, e.g. ``path("lessons", "en", "toc.yaml")``."""
    return root().joinpath(*parts)


def read_yaml(*parts: str, default: Any = None) -> Any:
    """The parsed YAML file at ``parts`` inside the content folder, ``default`` if there is none."""
    file = path(*parts)
    return load(file) if file.is_file() else default


def catalog(kind: str, lang: str) -> dict[str, Any]:
    """``content/<kind>/<lang>.yaml`` as a mapping; empty where that language has
    no such file (each reader decides how it falls back to English)."""
    return loader.catalog(root(), kind, lang)


def catalog_languages(kind: str) -> tuple[str, ...]:
    """The languages that have a ``content/<kind>/<lang>.yaml`` file, English first."""
    return loader.english_first(p.stem for p in path(kind).glob("*.yaml"))


@cache
def _languages(lessons: Path) -> tuple[str, ...]:
    return loader.english_first(p.parent.name for p in lessons.glob("*/toc.yaml"))


def languages() -> tuple[str, ...]:
    """Language codes that have lessons (a folder with ``toc.yaml``), English first."""
    return _languages(path(LESSONS))
