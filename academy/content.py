"""The one reader of learner-visible text: ``content/`` (or ``CONTENT_DIR``).

Every kind of learner-visible text has one folder here:

- ``lessons/<lang>/``: ``toc.yaml``, ``glossary.yaml``, ``outlines.yaml`` and
  one Markdown file per section (``academy.lessons``);
- ``i18n/<lang>.yaml``: the app's UI strings (``academy.i18n``);
- ``exercises/<lang>/``: each exercise's texts and the shared ``feedback.yaml``
  (``labs.exercises.messages``);
- ``quiz-bank/<section>.yaml``: the questions, every language inside (``quizzes.bank``);
- ``quizzes/<lang>.yaml``: the quiz engine's words (``quizzes.numbers``);
- ``certificates/<lang>.yaml``: the certificate PDF and the Verify page
  (``certificates.i18n``);
- ``credentials/<lang>.yaml``: the Open Badges credential's texts
  (``certificates.openbadges``).

Every file is read here (``load`` for YAML, ``text`` for Markdown): safe YAML,
cached per absolute path, and a file that cannot be read or parsed raises
``ContentError`` naming it.

The one reader outside is ``labs.exercises.messages``: ``labs`` sits beside
``academy`` and may not import it (``academy`` imports ``labs``), so the
exercise texts are read there, from the same folder.

The language list is discovered, not declared: a language is a folder under
``content/lessons`` with a ``toc.yaml``, so adding one is adding files.
Because reads are cached per absolute path, pointing ``CONTENT_DIR`` elsewhere
(a test with a fourth language) never sees another tree's files.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

from academy.settings import ROOT, get_settings

DEFAULT_LANG = "en"

# The folders of content/, one per kind of text (see the list above).
LESSONS = "lessons"
UI = "i18n"
EXERCISES = "exercises"
QUIZ_BANK = "quiz-bank"
QUIZ = "quizzes"
CERTIFICATES = "certificates"
CREDENTIALS = "credentials"


class ContentError(ValueError):
    """A content file that cannot be read or does not match its schema; the message names the file."""


def root() -> Path:
    """The content folder in use (``Settings.content_dir``)."""
    return get_settings().content_dir


def path(*parts: str) -> Path:
    """A path inside the content folder, e.g. ``path("lessons", "en", "toc.yaml")``."""
    return root().joinpath(*parts)


def where(file: Path) -> str:
    """``file`` as an error message names it: relative to the project where it lies inside."""
    return str(file.relative_to(ROOT)) if file.is_relative_to(ROOT) else str(file)


@cache
def load(file: Path) -> Any:
    """The parsed YAML file ``file`` (safe YAML; cached per path; None for an
    empty file); ``ContentError`` naming it when it cannot be read or parsed.

    The value is shared by every caller: read it, never change it."""
    try:
        return yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ContentError(f"{where(file)}: not valid YAML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ContentError(f"{where(file)}: cannot read: {exc}") from None


@cache
def text(file: Path) -> str:
    """A text file of ``content/`` (a lesson's Markdown), cached per path;
    ``ContentError`` naming it when it cannot be read."""
    try:
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ContentError(f"{where(file)}: cannot read: {exc}") from None


def read_yaml(*parts: str, default: Any = None) -> Any:
    """The parsed YAML file at ``parts`` inside the content folder, ``default`` if there is none."""
    file = path(*parts)
    return load(file) if file.is_file() else default


def catalog(kind: str, lang: str) -> dict[str, Any]:
    """``content/<kind>/<lang>.yaml`` as a mapping; empty where that language has
    no such file (each reader decides how it falls back to English)."""
    return _catalog(root(), kind, lang)


@cache  # also keyed by the folder: a test may point CONTENT_DIR elsewhere
def _catalog(folder: Path, kind: str, lang: str) -> dict[str, Any]:
    file = folder / kind / f"{lang}.yaml"
    found = load(file) if file.is_file() else None
    if found is not None and not isinstance(found, dict):
        raise ContentError(f"{where(file)}: must be a mapping of keys to texts")
    return found or {}


def catalog_languages(kind: str) -> tuple[str, ...]:
    """The languages that have a ``content/<kind>/<lang>.yaml`` file, English first."""
    return _english_first(p.stem for p in path(kind).glob("*.yaml"))


def _english_first(codes: Any) -> tuple[str, ...]:
    return tuple(sorted(sorted(codes), key=lambda code: code != DEFAULT_LANG))


@cache
def _languages(lessons: Path) -> tuple[str, ...]:
    return _english_first(p.parent.name for p in lessons.glob("*/toc.yaml"))


def languages() -> tuple[str, ...]:
    """Language codes that have lessons (a folder with ``toc.yaml``), English first."""
    return _languages(path(LESSONS))
