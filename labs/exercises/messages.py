"""The exercises' texts, per language: statements, hints and every feedback message.

    from labs.exercises import messages
    messages.text("forbidden_call", "zh", exercise="ring-allreduce", call="dist.all_reduce")
    messages.exercise("broadcast", "nl")["statement"]

Content is data (STYLE.md 5): ``content/exercises/<lang>/<exercise-id>.yaml``
holds an exercise's title, summary, statement, hints and its own
``feedback:`` messages; ``content/exercises/<lang>/feedback.yaml`` holds the
messages every exercise shares (and the command line's few words). A key
is looked up in the exercise's feedback first, then the shared file, then
the same in English, so a missing translation shows English, never a bare
key. ``labs`` may read ``content/`` but not import ``academy``, so the
folder is found here: ``$CONTENT_DIR`` (the app's setting) or the repo's.
"""

from __future__ import annotations

import os
import string
from functools import cache
from pathlib import Path

import yaml

DEFAULT_LANG = "en"


def root() -> Path:
    return Path(os.environ.get("CONTENT_DIR") or Path(__file__).resolve().parents[2] / "content") / "exercises"


def languages() -> list[str]:
    """The languages that have exercise texts (a folder with feedback.yaml)."""
    return sorted(p.name for p in root().iterdir() if (p / "feedback.yaml").is_file())


@cache
def _read(path: Path) -> dict:
    if not path.is_file():
        return {}
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def exercise(exercise_id: str, lang: str = DEFAULT_LANG) -> dict:
    """The exercise's texts in ``lang`` (falling back to English field by field)."""
    own = _read(root() / lang / f"{exercise_id}.yaml")
    if lang == DEFAULT_LANG:
        return own
    return {**exercise(exercise_id, DEFAULT_LANG), **own}


def shared(lang: str = DEFAULT_LANG) -> dict:
    return _read(root() / lang / "feedback.yaml")


class _Keep(dict):
    """Leaves an unknown {placeholder} as it is rather than failing the whole message."""

    def __missing__(self, key):
        return "{" + key + "}"


def template(key: str, lang: str = DEFAULT_LANG, exercise_id: str | None = None) -> str | None:
    for language in (lang, DEFAULT_LANG):
        if exercise_id:
            found = (exercise(exercise_id, language).get("feedback") or {}).get(key)
            if found is not None:
                return str(found)
        found = shared(language).get(key)
        if found is not None:
            return str(found)
    return None


def text(key: str, lang: str = DEFAULT_LANG, exercise: str | None = None, **values) -> str:
    """The message ``key`` in ``lang`` with ``values`` filled in (``values`` stay plain text)."""
    found = template(key, lang, exercise)
    if found is None:
        return key
    return string.Formatter().vformat(found, (), _Keep({k: "" if v is None else v for k, v in values.items()}))


def placeholders(message: str) -> set[str]:
    """The {names} a message uses (the tests check every one is a value the grader gives)."""
    return {name for _, name, _, _ in string.Formatter().parse(message) if name}
