"""Draw, show and grade quiz questions. Pure functions: no database, no Streamlit.

An attempt is a *plan*: one JSON-able dict per question, stored with the
attempt so that a refresh, a second tab or a review long after shows exactly
the same questions::

    {"question_id": "ring-allreduce-bytes-sent",
     "params": {"S": 256, "n": 8},   # drawn values (numeric questions)
     "options": [2, 0, 3, 1],        # bank option index shown at a, b, c, d
     "items": [3, 1, 0, 2]}          # bank item index shown at a, b, c, d

The browser only ever gets ``public_question``: texts and opaque keys (the
letter of the displayed position, which says nothing about the bank order).
Whether an option is right, and why, leaves the server only in the
``Feedback`` of an answered question; that feedback explains every option,
not only the chosen and the right ones, because a distractor's explanation
often carries the caveat a learner who answered right still needs.

Reading numbers (``parse_number``): spaces (also thin and no-break spaces)
group thousands; when both ``.`` and ``,`` occur, the last one is the decimal
mark ("1,536.5" and "1.536,5" are both 1536.5); a single separator followed
by anything but exactly three digits is a decimal mark ("1,5" and "1.5" are
both 1.5 in every language). Only "1,536" and "1.536" are ambiguous: they
follow the language's own decimal mark (``number.decimal`` in
``quizzes/messages/<lang>.yaml``), so "1,536" is 1536 in English and Chinese
but 1.536 in Dutch, and "1.536" the other way round. We display numbers
without that ambiguity: the language's decimal mark and no thousands
separator below 10 000, narrow no-break spaces above.
"""

from __future__ import annotations

import math
import random
import re
import string
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from quizzes.bank import (
    PLACEHOLDER,
    Bank,
    Question,
    compute_answer,
    draw_params,
    localized,
    section_titles,
)

MESSAGES_DIR = Path(__file__).resolve().parent / "messages"
KEYS = string.ascii_lowercase
# Where a cited section is read; the language stays in the URL.
LESSON_LINK = "/lessons?section={section}&lang={lang}"


# ---------------------------------------------------------------- messages


@lru_cache(maxsize=16)
def _messages(lang: str) -> dict[str, Any]:
    path = MESSAGES_DIR / f"{lang}.yaml"
    if not path.exists():
        return {}
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def message(key: str, lang: str, **values: Any) -> str:
    """A learner-visible message ("number.empty") in `lang`, else English."""
    for source in (lang, "en"):
        node: Any = _messages(source)
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, str):
            return node.format(**values) if values else node
    return key


class QuizError(Exception):
    """An error the learner may see; `key` names its text in the messages."""

    def __init__(self, key: str, **values: Any) -> None:
        super().__init__(key)
        self.key = key
        self.values = values

    def message(self, lang: str) -> str:
        return message(self.key, lang, **self.values)


class NumberParseError(QuizError, ValueError):
    """The learner's text is not one number (number.empty, number.not_a_number, ...)."""


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
            raise NumberParseError("number.not_finite")
        return value
    if not isinstance(text, str):
        raise NumberParseError("number.not_a_number", text=str(text))
    original = text.strip()
    # NFKC turns full-width digits and punctuation (zh input methods) and the
    # exotic spaces into ASCII; U+2212 is the typographic minus.
    s = unicodedata.normalize("NFKC", original).replace("\u2212", "-").strip()
    s = _SPACES.sub(" ", s)
    if not s:
        raise NumberParseError("number.empty")
    s = re.sub(r"^([+-]) ", r"\1", s)  # "- 5"
    if " " in s:
        if not _GROUPED_SPACES.match(s):
            parts = [p for p in s.split(" ") if _NUMBERISH.search(p)]
            key = "number.multiple_numbers" if len(parts) > 1 else "number.not_a_number"
            raise NumberParseError(key, text=original)
        s = s.replace(" ", "")
    m = re.fullmatch(r"([+-]?)([\d.,]+)(?:[eE]([+-]?\d+))?", s)
    if not m or not re.search(r"\d", m.group(2)):
        raise NumberParseError("number.not_a_number", text=original)
    sign, body, exponent = m.groups()
    digits = _plain_digits(body, message("number.decimal", lang))
    if digits is None:
        raise NumberParseError("number.not_a_number", text=original)
    try:
        value = float(f"{sign}{digits}" + (f"e{exponent}" if exponent else ""))
    except (ValueError, OverflowError):
        raise NumberParseError("number.not_a_number", text=original) from None
    if not math.isfinite(value):
        raise NumberParseError("number.not_finite", text=original)
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


# ----------------------------------------------------------------- drawing


def draw_attempt(bank: Bank, *, seed: int, k: int) -> list[dict[str, Any]]:
    """Draw `k` questions covering as many topics as possible.

    Round-robin over the topics (in an order shuffled by the seed, so that
    with fewer than one question per topic the left-out topics vary), a
    random question of each; then shown in course order. Same bank, same
    seed: same plan.
    """
    rng = random.Random(seed)
    by_topic: dict[str, list[str]] = {}
    for qid in sorted(bank.questions):
        by_topic.setdefault(bank.questions[qid].topic, []).append(qid)
    topics = [t for t in bank.topics if t in by_topic] + sorted(set(by_topic) - set(bank.topics))
    for ids in by_topic.values():
        rng.shuffle(ids)
    order = topics[:]
    rng.shuffle(order)
    chosen: list[str] = []
    while len(chosen) < k and any(by_topic[t] for t in order):
        for topic in order:
            if by_topic[topic] and len(chosen) < k:
                chosen.append(by_topic[topic].pop())
    rank = {t: i for i, t in enumerate(topics)}
    chosen.sort(key=lambda qid: rank[bank.questions[qid].topic])  # stable: random within topic
    return [plan_question(bank.questions[qid], seed=seed) for qid in chosen]


def plan_question(question: Question, *, seed: int) -> dict[str, Any]:
    """One plan item: drawn parameters and shuffled options/items.

    The random stream depends on the seed and the question id only, so a
    question looks the same whichever others were drawn with it.
    """
    rng = random.Random(f"{seed}/{question.id}")
    options = list(range(len(question.options)))
    rng.shuffle(options)
    items = list(range(len(question.items)))
    while len(items) > 1 and items == sorted(items):  # never show the answer as the start
        rng.shuffle(items)
    return {
        "question_id": question.id,
        "params": draw_params(question, rng) if question.type == "numeric" else {},
        "options": options,
        "items": items,
    }


# ---------------------------------------------------------------- showing


@dataclass(frozen=True)
class PublicQuestion:
    """All the browser may see before the learner answers."""

    question_id: str
    topic: str  # lesson section id
    type: str  # single | multiple | numeric | ordering
    text: str
    options: list[tuple[str, str]] = field(default_factory=list)  # (key, text), shown order
    items: list[tuple[str, str]] = field(default_factory=list)  # (key, text), shuffled
    unit: str | None = None


def _question(plan_item: dict[str, Any], bank: Bank) -> Question:
    question = bank.questions.get(plan_item.get("question_id", ""))
    if (
        question is None
        or sorted(plan_item.get("options", [])) != list(range(len(question.options)))
        or sorted(plan_item.get("items", [])) != list(range(len(question.items)))
        or set(plan_item.get("params", {})) != set(question.params)
    ):
        raise QuestionUnavailable("question_unavailable", question_id=plan_item.get("question_id"))
    return question


def _fill(text: str, values: dict[str, Any], lang: str) -> str:
    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in values:
            return m.group(0)
        value = values[name]
        return format_number(value, lang) if isinstance(value, int | float) else str(value)

    return PLACEHOLDER.sub(sub, text)


def see_sentence(section_ids: tuple[str, ...], lang: str) -> str:
    """"See [title](link)." for the cited sections, titles from `lang`'s table
    of contents: the bank holds ids only, so a title cannot go stale."""
    if not section_ids:
        return ""
    titles = section_titles(lang)
    links = {
        name: f"[{titles.get(sid, sid)}]({LESSON_LINK.format(section=sid, lang=lang)})"
        for name, sid in zip(("a", "b"), section_ids, strict=False)
    }
    return message("see.two" if len(section_ids) > 1 else "see.one", lang, **links)


def _with_see(text: str, section_ids: tuple[str, ...], lang: str) -> str:
    see = see_sentence(section_ids, lang)
    return f"{text} {see}" if text and see else text or see


def precision_sentence(question: Question, lang: str) -> str:
    """How precisely to answer a numeric question, worded per language."""
    if "sig" in question.precision:
        return message("precision.sig", lang, n=question.precision["sig"])
    if question.precision.get("decimals"):
        return message("precision.decimals", lang, n=question.precision["decimals"])
    return message("precision.whole", lang) if question.precision else ""


def _text(question: Question, texts: dict[str, str] | None, plan_item: dict[str, Any], lang: str,
          answer: float | None = None) -> str:
    text = localized(texts, lang)
    if question.type != "numeric":
        return text
    values: dict[str, Any] = dict(plan_item.get("params", {}))
    if answer is not None:
        values["answer"] = answer
    return _fill(text, values, lang)


def public_question(plan_item: dict[str, Any], bank: Bank, lang: str) -> PublicQuestion:
    question = _question(plan_item, bank)
    text = _text(question, question.text, plan_item, lang)
    if question.type == "numeric" and question.precision:
        text = f"{text} {precision_sentence(question, lang)}"
    return PublicQuestion(
        question_id=question.id,
        topic=question.topic,
        type=question.type,
        text=text,
        options=[
            (KEYS[pos], localized(question.options[idx].text, lang))
            for pos, idx in enumerate(plan_item["options"])
        ],
        items=[
            (KEYS[pos], localized(question.items[idx], lang))
            for pos, idx in enumerate(plan_item["items"])
        ],
        unit=(localized(question.unit, lang) or None) if question.unit else None,
    )


# ---------------------------------------------------------------- grading


@dataclass(frozen=True)
class OptionFeedback:
    key: str
    text: str
    explain: str  # with the "See <section>." sentence, linked
    chosen: bool
    correct: bool
    see: tuple[str, ...] = ()  # the section ids it cites


@dataclass(frozen=True)
class Feedback:
    question_id: str
    type: str
    correct: bool  # counts for the score: exact set / exact order / within tolerance
    credit: float  # 0..1, shown in review (partial sets, items in place)
    topic: str  # the lesson section to link to
    correct_answer: list[str]  # right option texts, "448 MiB", or items in order
    given: list[str]  # the learner's answer as text (empty: unanswered)
    explanations: list[OptionFeedback] = field(default_factory=list)  # every option, shown order
    explanation: str | None = None  # the question's own explanation, values filled in, linked
    see: tuple[str, ...] = ()  # the sections the question's own explanation cites
    expected: float | None = None  # numeric: the exact expected value
    value: float | None = None  # numeric: the learner's number as read
    duplicate: bool = False  # store: a repeated submission; this is the first one's feedback


def normalize_response(plan_item: dict[str, Any], bank: Bank, response: Any, lang: str) -> Any:
    """The response as stored: a key (single), sorted keys (multiple), all
    item keys in the learner's order (ordering), or {"text", "value"}
    (numeric: what was typed and the number read from it in `lang`).

    Raises InvalidResponse, or NumberParseError for numeric text, so that
    nothing is stored for an answer we cannot read.
    """
    return _normalize(_question(plan_item, bank), response, lang)


def _normalize(question: Question, response: Any, lang: str) -> Any:
    if question.type in ("single", "multiple"):
        keys = [response] if isinstance(response, str) else response
        if not isinstance(keys, list | tuple) or not all(isinstance(k, str) for k in keys):
            raise InvalidResponse("invalid_response")
        if not set(keys) <= set(KEYS[: len(question.options)]) or len(set(keys)) != len(keys):
            raise InvalidResponse("invalid_response")
        if question.type == "single":
            if len(keys) != 1:
                raise InvalidResponse("invalid_response")
            return keys[0]
        return sorted(keys)
    if question.type == "ordering":
        if not isinstance(response, list | tuple) or sorted(response) != list(
            KEYS[: len(question.items)]
        ):
            raise InvalidResponse("invalid_response")
        return list(response)
    if isinstance(response, dict) and set(response) == {"text", "value"}:
        return {"text": str(response["text"]), "value": parse_number(response["value"], lang)}
    if isinstance(response, bool) or not isinstance(response, str | int | float):
        raise InvalidResponse("invalid_response")
    text = str(response).strip()
    return {"text": text, "value": _read_numeric(question, text, lang)}


def _read_numeric(question: Question, text: str, lang: str) -> float:
    """parse_number after dropping a unit the learner may have typed."""
    for unit in sorted((question.unit or {}).values(), key=len, reverse=True):
        if unit and text.lower().endswith(unit.lower()) and len(text) > len(unit):
            text = text[: -len(unit)].strip()
            break
    return parse_number(text, lang)


def grade(plan_item: dict[str, Any], bank: Bank, response: Any, lang: str) -> Feedback:
    """Grade one answer; `response` as the page sends it or as stored.

    single: a key ("b"); multiple: a list of keys; ordering: all item keys in
    the learner's order; numeric: the text typed (read in `lang`). None
    means unanswered (review). Raises InvalidResponse or NumberParseError
    for an answer that cannot be read.
    """
    question = _question(plan_item, bank)
    answer = None if response is None else _normalize(question, response, lang)
    if question.type in ("single", "multiple"):
        return _grade_choice(question, plan_item, answer, lang)
    if question.type == "ordering":
        return _grade_ordering(question, plan_item, answer, lang)
    return _grade_numeric(question, plan_item, answer, lang)


def _grade_choice(question: Question, plan_item: dict[str, Any], answer: Any, lang: str) -> Feedback:
    chosen = set() if answer is None else {answer} if isinstance(answer, str) else set(answer)
    shown = [(KEYS[pos], question.options[idx]) for pos, idx in enumerate(plan_item["options"])]
    right = {key for key, opt in shown if opt.correct}
    # Partial credit, for review only: right picks minus wrong picks, per
    # right option; 1 exactly when the chosen set is the right set.
    credit = max(0, len(chosen & right) - len(chosen - right)) / len(right)
    return Feedback(
        question_id=question.id,
        type=question.type,
        correct=chosen == right,
        credit=credit,
        topic=question.topic,
        correct_answer=[localized(opt.text, lang) for _, opt in shown if opt.correct],
        given=[localized(opt.text, lang) for key, opt in shown if key in chosen],
        explanations=[
            OptionFeedback(
                key=key,
                text=localized(opt.text, lang),
                explain=_with_see(localized(opt.explain, lang), opt.see, lang),
                chosen=key in chosen,
                correct=opt.correct,
                see=opt.see,
            )
            for key, opt in shown
        ],
        explanation=_with_see(_text(question, question.explain, plan_item, lang), question.see, lang)
        or None,
        see=question.see,
    )


def _grade_ordering(question: Question, plan_item: dict[str, Any], answer: Any, lang: str) -> Feedback:
    key_to_item = {KEYS[pos]: idx for pos, idx in enumerate(plan_item["items"])}
    indices = [key_to_item[key] for key in answer or []]
    in_place = sum(1 for pos, idx in enumerate(indices) if pos == idx)
    correct = indices == list(range(len(question.items)))
    return Feedback(
        question_id=question.id,
        type=question.type,
        correct=correct,
        credit=in_place / len(question.items),
        topic=question.topic,
        correct_answer=[localized(item, lang) for item in question.items],
        given=[localized(question.items[idx], lang) for idx in indices],
        explanation=_with_see(_text(question, question.explain, plan_item, lang), question.see, lang)
        or None,
        see=question.see,
    )


def _grade_numeric(question: Question, plan_item: dict[str, Any], answer: Any, lang: str) -> Feedback:
    expected = compute_answer(question, plan_item["params"])
    value = None if answer is None else answer["value"]
    correct = value is not None and within_tolerance(value, expected, question.tolerance)
    unit = localized(question.unit, lang) if question.unit else ""
    return Feedback(
        question_id=question.id,
        type=question.type,
        correct=correct,
        credit=1.0 if correct else 0.0,
        topic=question.topic,
        correct_answer=[format_number(expected, lang) + (f" {unit}" if unit else "")],
        given=[] if answer is None else [answer["text"]],
        explanation=_with_see(
            _text(question, question.explain, plan_item, lang, answer=expected), question.see, lang
        )
        or None,
        see=question.see,
        expected=expected,
        value=value,
    )


# ------------------------------------------------------------------ score


def score_percent(correct: int, total: int) -> float:
    """Score in percent: correct answers over questions asked."""
    return 100.0 * correct / total if total else 0.0


def passed(correct: int, total: int, pass_percent: float) -> bool:
    """score >= pass mark, compared in integers so 4/5 is exactly 80 %."""
    return total > 0 and correct * 100 >= pass_percent * total
