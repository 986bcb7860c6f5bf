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

Messages, the quiz errors and reading and showing numbers live in
``quizzes.numbers`` (the bank checks numeric questions with them too); they
are re-exported here.
"""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass, field
from typing import Any

from quizzes.bank import (
    PLACEHOLDER,
    Bank,
    Question,
    localized,
    section_titles,
)
from quizzes.formula import compiled, compute_answer, draw_params, evaluate, round_to
from quizzes.numbers import (
    InvalidResponse,
    QuestionUnavailable,
    format_number,
    message,
    parse_number,
    within_tolerance,
)
from quizzes.numbers import NumberParseError as NumberParseError  # re-exported: callers catch it
from quizzes.numbers import QuizError as QuizError  # re-exported: callers catch it

KEYS = string.ascii_lowercase
# Where a cited section is read; the language stays in the URL.
LESSON_LINK = "/lessons?section={section}&lang={lang}"


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
        raise QuestionUnavailable("quiz_errors.question_unavailable", question_id=plan_item.get("question_id"))
    return question


def fill(text: str, values: dict[str, Any], lang: str) -> str:
    """``{name}`` in ``text`` replaced by ``values[name]``, a number as ``format_number``
    writes it in ``lang``; a name without a value stays as it is."""

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
    return fill(text, values, lang)


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
    mistake: str | None = None  # numeric: the bank's words for the usual slip the learner's number is
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
            raise InvalidResponse("quiz_errors.invalid_response")
        if not set(keys) <= set(KEYS[: len(question.options)]) or len(set(keys)) != len(keys):
            raise InvalidResponse("quiz_errors.invalid_response")
        if question.type == "single":
            if len(keys) != 1:
                raise InvalidResponse("quiz_errors.invalid_response")
            return keys[0]
        return sorted(keys)
    if question.type == "ordering":
        if not isinstance(response, list | tuple) or sorted(response) != list(
            KEYS[: len(question.items)]
        ):
            raise InvalidResponse("quiz_errors.invalid_response")
        return list(response)
    if isinstance(response, dict) and set(response) == {"text", "value"}:
        return {"text": str(response["text"]), "value": parse_number(response["value"], lang)}
    if isinstance(response, bool) or not isinstance(response, str | int | float):
        raise InvalidResponse("quiz_errors.invalid_response")
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


def shown_value(value: float, question: Question) -> float:
    """``value`` at the precision the question asks for (3 significant figures: 37.3, not
    37.333): what the feedback shows as the right answer and in its explanation. The
    bank's check holds that this rounding is graded right."""
    rounded = round_to(value, question.precision)
    return rounded[-1] if rounded else value


def diagnose(question: Question, params: dict[str, Any], value: float, lang: str) -> str | None:
    """The bank's words for the first declared mistake (with an ``explain``) whose value the
    learner's number is, within the question's tolerance or as rounded to its precision;
    None when it is none of them (journey review m7: algbw given for busbw)."""
    for mistake in question.mistakes:
        if not mistake.explain:
            continue
        wrong = evaluate(compiled(mistake.formula), params)
        if any(within_tolerance(value, w, question.tolerance) for w in [wrong, *round_to(wrong, question.precision)]):
            values = {**params, "answer": shown_value(compute_answer(question, params), question),
                      "mistake": shown_value(wrong, question)}
            return fill(localized(mistake.explain, lang), values, lang)
    return None


def _grade_numeric(question: Question, plan_item: dict[str, Any], answer: Any, lang: str) -> Feedback:
    expected = compute_answer(question, plan_item["params"])
    value = None if answer is None else answer["value"]
    correct = value is not None and within_tolerance(value, expected, question.tolerance)
    unit = localized(question.unit, lang) if question.unit else ""
    shown = shown_value(expected, question)
    return Feedback(
        question_id=question.id,
        type=question.type,
        correct=correct,
        credit=1.0 if correct else 0.0,
        topic=question.topic,
        correct_answer=[format_number(shown, lang) + (f" {unit}" if unit else "")],
        given=[] if answer is None else [answer["text"]],
        explanation=_with_see(
            _text(question, question.explain, plan_item, lang, answer=shown), question.see, lang
        )
        or None,
        see=question.see,
        expected=expected,
        value=value,
        mistake=None if correct or value is None else diagnose(question, plan_item["params"], value, lang),
    )


# ------------------------------------------------------------------ score


def score_percent(correct: int, total: int) -> float:
    """Score in percent: correct answers over questions asked."""
    return 100.0 * correct / total if total else 0.0


def passed(correct: int, total: int, pass_percent: float) -> bool:
    """score >= pass mark, compared in integers so 4/5 is exactly 80 %."""
    return total > 0 and correct * 100 >= pass_percent * total
