"""The one loader of learner-visible text: the files under ``content/``.

Every kind of learner-visible text has one folder there:

- ``lessons/<lang>/``: ``toc.yaml``, ``glossary.yaml``, ``outlines.yaml`` and
  one Markdown file per section (``academy.lessons``);
- ``i18n/<lang>.yaml``: the app's UI strings (``academy.i18n``);
- ``exercises/<lang>/``: each exercise's texts and the shared ``feedback.yaml``
  (``labs.exercises.messages``);
- ``quiz-bank/<section>.yaml``: the questions, every language inside (``quizzes.bank``);
- ``quiz-templates/<lab>.yaml``: questions built from a learner's own lab runs,
  every language inside (``quizzes.templates``);
- ``quizzes/<lang>.yaml``: the quiz engine's words (``quizzes.numbers``);
- ``certificates/<lang>.yaml``: the certificate PDF and the Verify page
  (``certificates.i18n``);
- ``credentials/<lang>.yaml``: the Open Badges credential's texts
  (``certificates.openbadges``).

Every file is read here: `load` for YAML, `text` for Markdown, `mapping`
for a file of keys to texts, `catalog` for ``<kind>/<lang>.yaml``. YAML is
read safely and cached per absolute path (so a test that points the folder
elsewhere never sees another tree's files), and a file that cannot be read
or parsed raises `ContentError` naming it. A missing translation falls back
to English (`fallbacks`); each reader says at what grain (a key, a field, a
whole catalog).

It sits in ``labs``, the bottom layer, so that ``labs.exercises.messages``
(which may not import ``academy``) and ``academy.content`` (which gives the
platform's folder, ``Settings.content_dir``, to the rest) share it. `root`
is the folder as the labs' own processes find it: ``$CONTENT_DIR`` in the
environment, else the project's ``content/``. Imports neither torch nor
``academy``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent  # the project
DEFAULT_ROOT = ROOT / "content"
DEFAULT_LANG = "en"

# The folders of content/, one per kind of text (see the list above).
LESSONS = "lessons"
UI = "i18n"
EXERCISES = "exercises"
QUIZ_BANK = "quiz-bank"
QUIZ_TEMPLATES = "quiz-templates"
QUIZ = "quizzes"
CERTIFICATES = "certificates"
CREDENTIALS = "credentials"


class ContentError(ValueError):
    """A content file that cannot be read or does not match its schema; the message names the file."""


def root() -> Path:
    """The content folder of a ``labs`` process: ``$CONTENT_DIR``, else the project's ``content/``
    (the web app reads the same variable, also from ``.env``, as ``Settings.content_dir``)."""
    return Path(os.environ.get("CONTENT_DIR") or DEFAULT_ROOT)


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


def mapping(file: Path) -> dict[str, Any]:
    """A YAML file of keys to texts: empty where there is no such file (a language
    without it); ``ContentError`` naming it when it holds something else."""
    found = load(file) if file.is_file() else None
    if found is not None and not isinstance(found, dict):
        raise ContentError(f"{where(file)}: must be a mapping of keys to texts")
    return found or {}


@cache  # keyed by the folder too: a test may point CONTENT_DIR elsewhere
def catalog(folder: Path, kind: str, lang: str) -> dict[str, Any]:
    """``<folder>/<kind>/<lang>.yaml`` as a `mapping`."""
    return mapping(folder / kind / f"{lang}.yaml")


def fallbacks(lang: str) -> tuple[str, ...]:
    """The languages to look in for a text of ``lang``: it, then English."""
    return (lang,) if lang == DEFAULT_LANG else (lang, DEFAULT_LANG)


def english_first(codes: Iterable[str]) -> tuple[str, ...]:
    """Language codes sorted, English first."""
    return tuple(sorted(sorted(codes), key=lambda code: code != DEFAULT_LANG))
