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
key. The files are read through ``labs.content``, the loader of every
catalog (``academy.content`` builds on it; ``labs`` may not import
``academy``), in its folder: ``$CONTENT_DIR`` or the project's ``content/``.

Numbers in a message are written the reader's way (Babel's CLDR data, as
``academy.i18n`` does for the UI): "5,3" and "4.194.304" in Dutch, "5.3" and
"4,194,304" in English. Text values (a call, an exception message, a line of
the learner's code) are left exactly as they are. A message may come in CLDR
plural forms (``one:``, ``other:``...), chosen by its ``count`` value in the
reader's language ("1 all-reduce call", "2 all-reduce calls").

``waiting(row, lang)`` renders one row of a deadlock report (``{"rank",
"op", "peer", "bytes"}``) with its direction: a send waits *to* its peer, a
receive *from* it ("waiting in send to rank 1", "waiting in recv from rank 0").
"""

from __future__ import annotations

import numbers
import string
from functools import cache
from pathlib import Path

from labs import content
from labs.content import DEFAULT_LANG


def root() -> Path:
    return content.root() / content.EXERCISES


def languages() -> list[str]:
    """The languages that have exercise texts (a folder with feedback.yaml)."""
    return sorted(p.name for p in root().iterdir() if (p / "feedback.yaml").is_file())


def exercise(exercise_id: str, lang: str = DEFAULT_LANG) -> dict:
    """The exercise's texts in ``lang`` (falling back to English field by field)."""
    texts: dict = {}
    for language in reversed(content.fallbacks(lang)):
        texts |= content.mapping(root() / language / f"{exercise_id}.yaml")
    return texts


def shared(lang: str = DEFAULT_LANG) -> dict:
    return content.mapping(root() / lang / "feedback.yaml")


class _Keep(dict):
    """Leaves an unknown {placeholder} as it is rather than failing the whole message."""

    def __missing__(self, key):
        return "{" + key + "}"


def template(key: str, lang: str = DEFAULT_LANG, exercise_id: str | None = None,
             count: float | None = None) -> str | None:
    """The message ``key``: the exercise's own wording first, then the shared one, in ``lang``
    or the first fallback that has it; of plural forms, the one ``count`` takes there."""
    for language in content.fallbacks(lang):
        found = None
        if exercise_id:
            found = (exercise(exercise_id, language).get("feedback") or {}).get(key)
        if found is None:
            found = shared(language).get(key)
        if isinstance(found, dict):
            return str(found.get(_plural(language, count), found.get("other", "")))
        if found is not None:
            return str(found)
    return None


def _plural(lang: str, count: float | None) -> str:
    """The CLDR plural category of ``count`` in ``lang`` ("other" without a number)."""
    from babel import Locale, UnknownLocaleError

    if not isinstance(count, numbers.Real) or isinstance(count, bool):
        return "other"
    try:
        return Locale.parse(lang).plural_form(abs(count))
    except (UnknownLocaleError, ValueError):
        return "other"


@cache
def _marks(lang: str) -> tuple[str, str]:
    """(decimal mark, grouping mark) of ``lang`` from CLDR; English's where Babel has none."""
    from babel import Locale, UnknownLocaleError
    from babel.numbers import get_decimal_symbol, get_group_symbol

    try:
        Locale.parse(lang)
    except (UnknownLocaleError, ValueError):
        return ".", ","
    return get_decimal_symbol(lang), get_group_symbol(lang)


def number(value: float, lang: str = DEFAULT_LANG, spec: str = "") -> str:
    """``value`` as ``lang`` writes it: Python formats it (``spec``, else integers of five
    digits or more grouped in thousands and floats as ``str`` gives them), then the
    decimal and grouping marks become the language's."""
    if spec:
        shown = format(value, spec)
    elif isinstance(value, int) and abs(value) >= 10_000:
        shown = format(value, ",")
    else:
        shown = str(value)
    decimal, group = _marks(lang)
    if (decimal, group) == (".", ","):
        return shown
    return shown.translate({ord("."): "\0", ord(","): group}).replace("\0", decimal)


class _Local(string.Formatter):
    """``str.format`` that writes numbers in the reader's marks (``number``), text as it is."""

    def __init__(self, lang: str) -> None:
        self.lang = lang

    def format_field(self, value, format_spec: str) -> str:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return super().format_field(value, format_spec)
        return number(value, self.lang, format_spec)


def text(key: str, lang: str = DEFAULT_LANG, exercise: str | None = None, **values) -> str:
    """The message ``key`` in ``lang`` with ``values`` filled in (text values stay plain
    text; numbers in the language's marks)."""
    found = template(key, lang, exercise, values.get("count"))
    if found is None:
        return key
    return _Local(lang).vformat(found, (), _Keep({k: "" if v is None else v for k, v in values.items()}))


WAITING = {"send": "waiting_send", "isend": "waiting_send", "recv": "waiting_recv", "irecv": "waiting_recv",
           "running": "waiting_running", "finished": "waiting_finished", "raised": "waiting_raised"}


def waiting(row: dict, lang: str = DEFAULT_LANG, exercise: str | None = None) -> str:
    """One rank of a deadlock report (``{"rank", "op", "peer", "bytes"}``, and ``line`` where
    the rank said which line of the learner's file made the blocking call) in ``lang``: a send
    waits *to* its peer, a receive *from* it (or from any rank, with no peer); a collective,
    a barrier, a rank busy in the learner's code, finished or raised each have their own words."""
    key = WAITING.get(row.get("op"), "waiting_other")
    if key == "waiting_recv" and row.get("peer") is None:
        key = "waiting_recv_any"
    said = text(key, lang, exercise, **{k: v for k, v in row.items() if k != "line"})
    line = row.get("line")
    if isinstance(line, int) and not isinstance(line, bool):
        return text("waiting_line", lang, exercise, waiting=said, line=line)
    return said


def placeholders(message: str | dict) -> set[str]:
    """The {names} a message uses, in any of its plural forms (the tests check every one is a
    value the grader gives)."""
    forms = message.values() if isinstance(message, dict) else [message]
    return {name for form in forms for _, name, _, _ in string.Formatter().parse(str(form)) if name}
