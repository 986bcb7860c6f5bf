"""Answers that give themselves away by their length (journey review, Minor 8).

A reader who has not learnt a thing can still pass a choice question if its
answer is the one long, careful option among short ones. The checks here
measure options in display columns (an East Asian wide or full-width
character counts two, so one threshold serves every language) and flag a
question whose correct option(s) are by far the widest, in any language;
``python -m quizzes check`` also counts, per language, how often the answer
is the widest option at all. The fix is in the writing: a shorter answer with
its detail moved to the explanation, or wrong options as long and as specific
as the right one.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Any

from academy import lessons

# A correct option more than LENGTH_CUE_RATIO times as wide as the widest wrong
# one, and at least LENGTH_CUE_GAP columns wider, gives the answer away.
LENGTH_CUE_RATIO = 1.25
LENGTH_CUE_GAP = 16

# The functions below take a ``quizzes.bank`` question model (typed Any:
# importing the bank here would make the two modules import each other).


def display_width(text: str) -> int:
    """Columns a text takes on screen: East Asian wide and full-width characters count two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _in(texts: Mapping[str, str], lang: str) -> str:
    """The text in `lang`, or the source language's where it lacks one (as the quiz shows it)."""
    return texts.get(lang) or texts.get(lessons.SOURCE_LANG) or ""


def option_widths(question: Any, lang: str) -> tuple[list[int], list[int]]:
    """The display widths of a choice question's correct and wrong options in `lang`."""
    right = [display_width(_in(o.text, lang)) for o in question.options if o.correct]
    wrong = [display_width(_in(o.text, lang)) for o in question.options if not o.correct]
    return right, wrong


def answer_is_longest(question: Any, lang: str) -> bool:
    """Whether a single-choice question's answer is strictly the widest option in `lang`."""
    right, wrong = option_widths(question, lang)
    return question.type == "single" and bool(right and wrong) and right[0] > max(wrong)


def length_cue_problems(question: Any, where: str, languages: tuple[str, ...]) -> list[str]:
    """A line per language in which the correct option(s) are by far the widest.

    Single choice: the answer is more than LENGTH_CUE_RATIO times as wide as the
    widest other option and LENGTH_CUE_GAP columns wider. Multiple choice: the
    narrowest correct option is that much wider than the widest wrong one.
    Checked in every language, since a translation can tip the balance."""
    if question.type not in ("single", "multiple"):
        return []
    problems = []
    for lang in languages:
        right, wrong = option_widths(question, lang)
        if not right or not wrong:
            continue
        narrowest, widest = min(right), max(wrong)
        if narrowest > LENGTH_CUE_RATIO * widest and narrowest - widest >= LENGTH_CUE_GAP:
            if question.type == "single":
                answer = next(j for j, o in enumerate(question.options) if o.correct)
                field, what = f"option {answer + 1} text.{lang}", "the answer is"
            else:
                field, what = f"options.{lang}", "every correct option is"
            problems.append(f"{where}: {field}: {what} {narrowest / widest:.1f} times as long as the longest "
                            "wrong option, so length gives it away; shorten it or make the others as specific")
    return problems
