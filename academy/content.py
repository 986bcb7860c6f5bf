"""The one reader of course content: ``content/`` (or ``CONTENT_DIR``).

``content/lessons/<lang>/`` holds a language's lessons (``toc.yaml``,
``glossary.yaml``, one Markdown file per section) and ``content/i18n/<lang>.yaml``
its UI strings. The language list is discovered, not declared: a language is
a folder under ``content/lessons`` with a ``toc.yaml``, so adding one is adding
files. Everything that reads content (i18n, lessons, the quiz bank's section
titles, certificate languages, tests) goes through here.

Reads are cached per absolute path, so pointing ``CONTENT_DIR`` elsewhere (a
test with a fourth language) never sees another tree's files.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

from academy.settings import get_settings

DEFAULT_LANG = "en"


def root() -> Path:
    """The content folder in use (``Settings.content_dir``)."""
    return get_settings().content_dir


def path(*parts: str) -> Path:
    """A path inside the content folder, e.g. ``path("lessons", "en", "toc.yaml")``."""
    return root().joinpath(*parts)


@cache
def _read_yaml(file: Path) -> Any:
    return yaml.safe_load(file.read_text(encoding="utf-8"))


def read_yaml(*parts: str, default: Any = None) -> Any:
    """The parsed YAML file at ``parts``, ``default`` if there is none; cached."""
    file = path(*parts)
    return _read_yaml(file) if file.is_file() else default


@cache
def _languages(lessons: Path) -> tuple[str, ...]:
    found = sorted(p.parent.name for p in lessons.glob("*/toc.yaml"))
    return tuple(sorted(found, key=lambda code: code != DEFAULT_LANG))


def languages() -> tuple[str, ...]:
    """Language codes that have lessons (a folder with ``toc.yaml``), English first."""
    return _languages(path("lessons"))
