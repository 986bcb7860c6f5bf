"""Quiz messages, the errors a learner may see, and numbers as learners type them.

Pure functions, no database, no Streamlit; imported by both ``bank`` (the
check of numeric questions) and ``engine`` (grading), so neither imports the other.

Reading numbers (``parse_number``): spaces (also thin and no-break spaces)
group thousands; when both ``.`` and ``,`` occur, the last one is the decimal
mark ("1,536.5" and "1.536,5" are both 1536.5); a single separator followed
by anything but exactly three digits is a decimal mark ("1,5" and "1.5" are
both 1.5 in every language). Only "1,536" and "1.536" are ambiguous: they
follow the language's own decimal mark (``number.decimal`` in
``content/quizzes/<lang>.yaml``), so "1,536" is 1536 in English and Chinese
but 1.536 in Dutch, and "1.536" the other way round. We display numbers
without that ambiguity: the language's decimal mark and no thousands
separator below 10 000, narrow no-break spaces above.
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Any

from academy import content
from academy.errors import UserError

# ---------------------------------------------------------------- messages


def message(key: str, lang: str, **values: Any) -> str:
    """A quiz text (``"see.one"``, ``"number.decimal"``) from
    ``content/quizzes/<lang>.yaml`` (``academy.content``), else English."""
    for source in (lang, content.DEFAULT_LANG):
        node: Any = content.catalog(content.QUIZ, source)
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, str):
            return node.format(**values) if values else node
    return key


class QuizError(UserError):
    """An error the learner may see: ``key`` names its text in the UI catalog
    (``quiz_errors.*`` in ``content/i18n``, see ``academy.errors``)."""


class NumberParseError(QuizError, ValueError):
    """The learner's text is not one number (quiz_errors.empty, quiz_errors.not_a_number, ...)."""

    typed = ("text",)


class InvalidResponse(QuizError, ValueError):
    """A response that does not fit the question (unknown option key, ...)."""


class QuestionUnavailable(QuizError, LookupError):
    """The plan names a question the bank no longer has in that shape."""


# ----------------------------------------------------------------- numbers

_SPACES = re.compile(r"\s+")
_GROUPED_SPACES = re.compile(r"^[+-]?\d{1,3}(?: \d{3})+(?:[.,]\d+)?(?:[eE][+-]?\d+)?$")
_NUMBERISH = re.compile(r"\d")


def parse_number(text: str | float | int, lang: str) -> float:
    """Read a number as a learner in `lang` may type it (see module docstring)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        value = float(text)
        if not math.isfinite(value):
            raise NumberParseError("quiz_errors.not_finite")
        return value
    if not isinstance(text, str):
        raise NumberParseError("quiz_errors.not_a_number", text=str(text))
    original = text.strip()
    # NFKC turns full-width digits and punctuation (zh input methods) and the
    # exotic spaces into ASCII; U+2212 is the typographic minus.
    s = unicodedata.normalize("NFKC", original).replace("\u2212", "-").strip()
    s = _SPACES.sub(" ", s)
    if not s:
        raise NumberParseError("quiz_errors.empty")
    s = re.sub(r"^([+-]) ", r"\1", s)  # "- 5"
    if " " in s:
        if not _GROUPED_SPACES.match(s):
            parts = [p for p in s.split(" ") if _NUMBERISH.search(p)]
            raise NumberParseError("quiz_errors.multiple_numbers" if len(parts) > 1 else "quiz_errors.not_a_number",
                                   text=original)
        s = s.replace(" ", "")
    m = re.fullmatch(r"([+-]?)([\d.,]+)(?:[eE]([+-]?\d+))?", s)
    if not m or not re.search(r"\d", m.group(2)):
        raise NumberParseError("quiz_errors.not_a_number", text=original)
    sign, body, exponent = m.groups()
    digits = _plain_digits(body, message("number.decimal", lang))
    if digits is None:
        raise NumberParseError("quiz_errors.not_a_number", text=original)
    try:
        value = float(f"{sign}{digits}" + (f"e{exponent}" if exponent else ""))
    except (ValueError, OverflowError):
        raise NumberParseError("quiz_errors.not_a_number", text=original) from None
    if not math.isfinite(value):
        raise NumberParseError("quiz_errors.not_finite", text=original)
    return value


def _plain_digits(body: str, decimal: str) -> str | None:
    """'1.536,5' -> '1536.5'; None when the separators make no sense."""
    seps = [c for c in body if c in ".,"]
    if not seps:
        return body
    last = seps[-1]
    if len(set(seps)) == 2:
        group = "," if last == "." else "."
        head, _, frac = body.rpartition(last)
        if re.fullmatch(rf"\d{{1,3}}(?:{re.escape(group)}\d{{3}})+", head) and frac.isdigit():
            return head.replace(group, "") + "." + frac
        return None
    if len(seps) > 1:  # "1,536,000": the only reading is grouping
        if re.fullmatch(rf"\d{{1,3}}(?:{re.escape(last)}\d{{3}})+", body):
            return body.replace(last, "")
        return None
    head, _, frac = body.partition(last)
    if not (head + frac).isdigit():
        return None
    grouping_possible = len(frac) == 3 and 1 <= len(head) <= 3 and not head.startswith("0")
    if grouping_possible and last != decimal:
        return head + frac
    return (head or "0") + "." + (frac or "0")


def format_number(value: float, lang: str) -> str:
    """Show a number the way `parse_number` reads it back in `lang`."""
    if not math.isfinite(value):
        return str(value)
    if value != 0 and not 1e-4 <= abs(value) < 1e15:
        mantissa, exponent = f"{value:.4e}".split("e")
        mantissa = mantissa.rstrip("0").rstrip(".")
        return f"{mantissa}e{int(exponent)}".replace(".", message("number.decimal", lang))
    if abs(value - round(value)) <= 1e-9 * max(1.0, abs(value)):
        text = str(round(value))
    else:
        decimals = max(0, 4 - math.floor(math.log10(abs(value))))  # 5 significant digits
        text = f"{value:.{decimals}f}"
        if "." in text:
            text = text.rstrip("0").rstrip(".")
    if text == "-0":
        text = "0"
    whole, _, frac = text.partition(".")
    sign = "-" if whole.startswith("-") else ""
    whole = whole.lstrip("-")
    if len(whole) > 4:
        whole = f"{int(whole):,}".replace(",", "\u202f")
    return sign + whole + (message("number.decimal", lang) + frac if frac else "")


def within_tolerance(value: float, expected: float, tolerance: dict[str, float]) -> bool:
    """|value - expected| within the larger of the rel and abs bounds (inclusive)."""
    bound = max(tolerance.get("abs", 0.0), tolerance.get("rel", 0.0) * abs(expected))
    # The slack keeps a value exactly on the bound from failing on float rounding.
    return abs(value - expected) <= bound * (1 + 1e-9) + 1e-12 * max(1.0, abs(expected))
