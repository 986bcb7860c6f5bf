"""Answers from the bank's key, for the load benchmark and the tests that play a
learner (never used by the app). It lives here, not in tests/, because nothing
may import the tests; the app never imports benchmarks, so no key reaches it."""

from __future__ import annotations

from typing import Any

from quizzes.bank import Bank
from quizzes.engine import KEYS, format_number
from quizzes.formula import compute_answer


def right_answer(plan_item: dict[str, Any], bank: Bank, lang: str) -> Any:
    q = bank.questions[plan_item["question_id"]]
    if q.type in ("single", "multiple"):
        keys = [KEYS[pos] for pos, idx in enumerate(plan_item["options"]) if q.options[idx].correct]
        return keys[0] if q.type == "single" else keys
    if q.type == "ordering":
        shown = plan_item["items"]  # bank index per shown position
        return [KEYS[shown.index(i)] for i in range(len(shown))]
    return format_number(compute_answer(q, plan_item["params"]), lang)


def wrong_answer(plan_item: dict[str, Any], bank: Bank, lang: str) -> Any:
    q = bank.questions[plan_item["question_id"]]
    if q.type == "single":
        return next(KEYS[pos] for pos, idx in enumerate(plan_item["options"]) if not q.options[idx].correct)
    if q.type == "multiple":
        return [KEYS[pos] for pos, idx in enumerate(plan_item["options"]) if not q.options[idx].correct][:1]
    if q.type == "ordering":
        right = right_answer(plan_item, bank, lang)
        return right[1:] + right[:1]  # every item one place off: no partial credit
    return format_number(compute_answer(q, plan_item["params"]) * 3 + 7, lang)
