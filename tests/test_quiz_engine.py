"""Grading engine: numbers in every locale, each question type, drawing and
what the browser may see."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from academy import content
from quizzes.bank import load_bank
from quizzes.engine import (
    KEYS,
    InvalidResponse,
    NumberParseError,
    QuestionUnavailable,
    draw_attempt,
    format_number,
    grade,
    message,
    parse_number,
    passed,
    plan_question,
    public_question,
    score_percent,
    within_tolerance,
)

FIXTURE = Path(__file__).parent / "fixtures" / "quiz_bank"
LANGS = ("en", "zh", "nl")


@pytest.fixture(scope="module")
def bank():
    return load_bank(FIXTURE, languages=LANGS, topics=("overview", "ring-allreduce", "ddp"))


def _item(bank, qid: str, seed: int = 7) -> dict:
    return plan_question(bank.questions[qid], seed=seed)


def _keys(bank, item: dict, *, correct: bool) -> list[str]:
    options = bank.questions[item["question_id"]].options
    return [KEYS[pos] for pos, idx in enumerate(item["options"]) if options[idx].correct == correct]


# ------------------------------------------------------------------ numbers


@pytest.mark.parametrize(
    ("text", "en", "nl"),
    [
        ("1.5", 1.5, 1.5),
        ("1,5", 1.5, 1.5),
        ("1 536", 1536, 1536),
        ("1,536.5", 1536.5, 1536.5),
        ("1.536,5", 1536.5, 1536.5),
        ("1e3", 1000, 1000),
        ("1 536,5", 1536.5, 1536.5),
        ("1\u2009536", 1536, 1536),  # thin space
        ("1\u202f536,5", 1536.5, 1536.5),  # narrow no-break space
        ("1\u00a0536.5", 1536.5, 1536.5),  # no-break space
        ("  +42  ", 42, 42),
        ("-0.25", -0.25, -0.25),
        ("\u22123", -3, -3),  # typographic minus
        ("- 3", -3, -3),
        ("１２，５", 12.5, 12.5),  # full-width input (zh IME)
        ("2.5E-3", 0.0025, 0.0025),
        ("1,536,000", 1536000, 1536000),
        ("1.536.000", 1536000, 1536000),
        ("0,536", 0.536, 0.536),
        ("1536,500", 1536.5, 1536.5),
        (".5", 0.5, 0.5),
        # The one ambiguous shape follows the language's decimal mark.
        ("1,536", 1536, 1.536),
        ("1.536", 1.536, 1536),
    ],
)
def test_parse_number_locale_formats(text, en, nl):
    assert parse_number(text, "en") == pytest.approx(en)
    assert parse_number(text, "zh") == pytest.approx(en)
    assert parse_number(text, "nl") == pytest.approx(nl)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("", "quiz_errors.empty"),
        ("   ", "quiz_errors.empty"),
        ("abc", "quiz_errors.not_a_number"),
        ("nan", "quiz_errors.not_a_number"),
        ("NaN", "quiz_errors.not_a_number"),
        ("inf", "quiz_errors.not_a_number"),
        ("-Infinity", "quiz_errors.not_a_number"),
        ("1e999", "quiz_errors.not_finite"),
        ("1.2.3", "quiz_errors.not_a_number"),
        ("1,2,3", "quiz_errors.not_a_number"),
        ("12,34,567", "quiz_errors.not_a_number"),
        ("1.536,5.2", "quiz_errors.not_a_number"),
        ("0x1F", "quiz_errors.not_a_number"),
        ("1_000", "quiz_errors.not_a_number"),
        ("3 apples", "quiz_errors.not_a_number"),
        ("1 2", "quiz_errors.multiple_numbers"),
        ("12 and 15", "quiz_errors.multiple_numbers"),
        ("1.5 2.5", "quiz_errors.multiple_numbers"),
        ("--3", "quiz_errors.not_a_number"),
        (".", "quiz_errors.not_a_number"),
    ],
)
def test_parse_number_rejects_with_a_message(text, key):
    with pytest.raises(NumberParseError) as info:
        parse_number(text, "en")
    assert info.value.key == key
    for lang in LANGS:
        text_shown = info.value.text(lang)
        assert text_shown and text_shown != key and "{" not in text_shown


@given(st.floats(min_value=-1e14, max_value=1e14, allow_nan=False), st.sampled_from(LANGS))
def test_format_then_parse_round_trips(value, lang):
    back = parse_number(format_number(value, lang), lang)
    assert back == pytest.approx(value, rel=1e-4, abs=1e-9)


@given(st.integers(min_value=-(10**12), max_value=10**12), st.sampled_from(LANGS))
def test_integers_round_trip_exactly(value, lang):
    assert parse_number(format_number(value, lang), lang) == value


def test_format_number_uses_the_language():
    assert format_number(437.3333333, "en") == "437.33"
    assert format_number(437.3333333, "nl") == "437,33"
    assert format_number(896.0, "zh") == "896"
    assert format_number(25_600_000, "en") == "25\u202f600\u202f000"


# ---------------------------------------------------------------- tolerance


def test_tolerance_bounds_are_inclusive():
    tol = {"rel": 0.01}
    for expected in (150.0, 437.3333333333, 1e-3, 7.0 / 3.0, 1e9 / 7):
        bound = 0.01 * expected
        assert within_tolerance(expected + bound, expected, tol)
        assert within_tolerance(expected - bound, expected, tol)
        assert not within_tolerance(expected + bound * 1.001, expected, tol)
        assert not within_tolerance(expected - bound * 1.001, expected, tol)
    assert within_tolerance(150.5, 150, {"abs": 0.5})
    assert not within_tolerance(150.51, 150, {"abs": 0.5})
    assert within_tolerance(0.0, 0.0, {"rel": 0.01})
    assert not within_tolerance(1e-6, 0.0, {"rel": 0.01})


def _numeric_item(bank, *, S: int = 256, n: int = 4) -> dict:
    item = _item(bank, "ring-allreduce-bytes-sent")
    item["params"] = {"S": S, "n": n}  # 2 * 3 / 4 * 256 = 384
    return item


@pytest.mark.parametrize(
    ("text", "lang", "correct"),
    [
        ("384", "en", True),
        ("387.84", "en", True),  # exactly +1 %
        ("380,16", "nl", True),  # exactly -1 %, Dutch decimal comma
        ("387.85", "en", False),  # just beyond
        ("380.15", "en", False),
        ("384 MiB", "en", True),  # the unit may be typed
        ("384MiB", "zh", True),
        ("384,0", "en", True),
        ("3.84e2", "nl", True),
        ("-384", "en", False),
        ("1e12", "en", False),  # out of range: simply wrong
        ("0", "en", False),
    ],
)
def test_numeric_grading(bank, text, lang, correct):
    feedback = grade(_numeric_item(bank), bank, text, lang)
    assert feedback.correct is correct
    assert feedback.credit == (1.0 if correct else 0.0)
    assert feedback.expected == pytest.approx(384)
    assert feedback.correct_answer == ["384 MiB"]
    assert feedback.given == [text]
    assert feedback.topic == "ring-allreduce"
    assert feedback.explanation.startswith("NUMERIC-EXPLAIN 2(4-1)/4 x 256 = 384 MiB")


def test_numeric_abs_tolerance(bank):
    item = _item(bank, "ring-allreduce-fixed")  # 150 MB, abs 0.5
    assert grade(item, bank, "150.5", "en").correct
    assert grade(item, bank, "149,5", "nl").correct
    assert not grade(item, bank, "150.51", "en").correct
    assert not grade(item, bank, "149.49", "en").correct


@pytest.mark.parametrize("text", ["", "many", "1 2", "nan", "inf", "1e400", "384 GiB"])
def test_numeric_garbage_is_refused_not_graded(bank, text):
    with pytest.raises(NumberParseError):
        grade(_numeric_item(bank), bank, text, "en")


def test_numeric_non_text_response_is_invalid(bank):
    with pytest.raises(InvalidResponse):
        grade(_numeric_item(bank), bank, ["384"], "en")


def test_numeric_answer_in_explanation_is_localised_at_the_asked_precision(bank):
    """The question asks for 3 significant figures: the answer shown is 13.3, not 13.333
    (journey review m7), written the reader's way."""
    item = _numeric_item(bank, S=10, n=3)  # 13.333...
    assert "13,3 MiB" in grade(item, bank, "13,3", "nl").explanation
    assert grade(item, bank, "13.3", "en").correct_answer == ["13.3 MiB"]
    assert grade(_numeric_item(bank, S=100, n=3), bank, "133", "en").correct_answer == ["133 MiB"]


# ------------------------------------------------------------------ choices


def test_single_choice(bank):
    item = _item(bank, "overview-what-is-dp")
    [right] = _keys(bank, item, correct=True)
    wrong = _keys(bank, item, correct=False)[0]
    ok = grade(item, bank, right, "en")
    assert ok.correct and ok.credit == 1.0
    # Every option explains itself, in the order shown, marked chosen and right.
    assert [e.key for e in ok.explanations] == ["a", "b", "c", "d"]
    [mine] = [e for e in ok.explanations if e.chosen]
    assert mine.key == right and mine.correct
    assert mine.explain.startswith("EXPLAIN-A-en See [Overview](/lessons?section=overview&lang=en)")
    assert mine.see == ("overview",)
    assert {e.explain.split(" ")[0] for e in ok.explanations} == {f"EXPLAIN-{c}-en" for c in "ABCD"}
    bad = grade(item, bank, [wrong], "zh")
    assert not bad.correct and bad.credit == 0.0
    assert {(e.key, e.chosen, e.correct) for e in bad.explanations if e.chosen or e.correct} == {
        (wrong, True, False), (right, False, True),
    }
    assert len(bad.explanations) == 4
    # The title comes from the zh table of contents, the link keeps the language.
    assert "EXPLAIN-A-zh 参见「[概览](/lessons?section=overview&lang=zh)」一节。" in [
        e.explain for e in bad.explanations
    ]
    assert bad.correct_answer == ["副本处理不同数据"]
    assert bad.topic == "overview"


@pytest.mark.parametrize("response", ["z", ["a", "b"], [], 3, {"a": 1}, ["a", "a"]])
def test_single_choice_refuses_malformed(bank, response):
    with pytest.raises(InvalidResponse):
        grade(_item(bank, "overview-what-is-dp"), bank, response, "en")


def test_multiple_choice_exact_set_and_partial_credit(bank):
    item = _item(bank, "overview-holds")  # 2 right of 4
    right = _keys(bank, item, correct=True)
    wrong = _keys(bank, item, correct=False)
    exact = grade(item, bank, list(reversed(right)), "en")
    assert exact.correct and exact.credit == 1.0
    one = grade(item, bank, right[:1], "en")
    assert not one.correct and one.credit == 0.5
    assert {e.key for e in one.explanations if e.chosen or e.correct} == set(right)  # chosen + missed
    extra = grade(item, bank, right + wrong[:1], "en")
    assert not extra.correct and extra.credit == 0.5
    assert {e.key for e in extra.explanations if e.chosen} == set(right + wrong[:1])
    assert len(extra.explanations) == 4
    mixed = grade(item, bank, [right[0], wrong[0]], "en")
    assert not mixed.correct and mixed.credit == 0.0
    everything = grade(item, bank, right + wrong, "en")
    assert not everything.correct and everything.credit == 0.0
    nothing = grade(item, bank, [], "en")
    assert not nothing.correct and nothing.credit == 0.0
    assert sorted(nothing.correct_answer) == ["Its own gradients", "The full model"]


def test_unanswered_shows_the_answer(bank):
    feedback = grade(_item(bank, "overview-what-is-dp"), bank, None, "nl")
    assert not feedback.correct and feedback.given == []
    assert sorted(e.correct for e in feedback.explanations) == [False, False, False, True]
    assert not any(e.chosen for e in feedback.explanations)


# ----------------------------------------------------------------- ordering


def _order_keys(item: dict, order: list[int]) -> list[str]:
    """Keys that put the bank items in `order` (bank indices)."""
    position_of = {idx: KEYS[pos] for pos, idx in enumerate(item["items"])}
    return [position_of[i] for i in order]


def test_ordering(bank):
    item = _item(bank, "ddp-step-order")
    assert item["items"] != [0, 1, 2, 3]  # never shown already solved
    right = grade(item, bank, _order_keys(item, [0, 1, 2, 3]), "en")
    assert right.correct and right.credit == 1.0
    assert right.correct_answer == ["Forward", "Backward with hooks", "Bucket all-reduce", "Optimizer step"]
    assert right.explanation == "ORDER-EXPLAIN-en See [How PyTorch DDP hides communication]" \
        "(/lessons?section=ddp&lang=en)."
    swapped = grade(item, bank, _order_keys(item, [0, 2, 1, 3]), "en")
    assert not swapped.correct and swapped.credit == 0.5
    assert swapped.given == ["Forward", "Bucket all-reduce", "Backward with hooks", "Optimizer step"]
    reverse = grade(item, bank, _order_keys(item, [3, 2, 1, 0]), "en")
    assert not reverse.correct and reverse.credit == 0.0


@pytest.mark.parametrize("response", [["a", "b", "c"], ["a", "b", "c", "c"], ["a", "b", "c", "e"], "abcd"])
def test_ordering_refuses_incomplete(bank, response):
    with pytest.raises(InvalidResponse):
        grade(_item(bank, "ddp-step-order"), bank, response, "en")


# ------------------------------------------------------------------ drawing


def test_draw_is_deterministic_and_json_safe(bank):
    plan = draw_attempt(bank, seed=42, k=5)
    assert plan == draw_attempt(bank, seed=42, k=5)
    assert json.loads(json.dumps(plan)) == plan
    plans = {json.dumps(draw_attempt(bank, seed=s, k=5)) for s in range(20)}
    assert len(plans) > 1


def test_draw_covers_topics_first(bank):
    for seed in range(30):
        plan = draw_attempt(bank, seed=seed, k=3)
        topics = [bank.questions[p["question_id"]].topic for p in plan]
        assert topics == ["overview", "ring-allreduce", "ddp"]  # one each, course order
        assert len({p["question_id"] for p in draw_attempt(bank, seed=seed, k=99)}) == 6


def test_draw_on_the_real_bank_covers_every_section():
    real = load_bank()
    # A section without questions is a failure, not a skip: the bank must cover every section.
    assert {q.topic for q in real.questions.values()} == set(real.topics)
    k = len(real.topics)  # one question per section covers them all (QUIZ_QUESTIONS may be fewer)
    for seed in range(10):
        plan = draw_attempt(real, seed=seed, k=k)
        assert len(plan) == k and len({p["question_id"] for p in plan}) == k
        assert {real.questions[p["question_id"]].topic for p in plan} == set(real.topics)


def test_option_keys_do_not_reveal_the_bank_order(bank):
    keys = set()
    for seed in range(40):
        item = _item(bank, "overview-what-is-dp", seed=seed)
        keys.update(_keys(bank, item, correct=True))
    assert len(keys) >= 3


def test_numeric_params_are_drawn_per_seed(bank):
    draws = {json.dumps(_item(bank, "ring-allreduce-bytes-sent", seed=s)["params"]) for s in range(30)}
    assert len(draws) > 5


# ----------------------------------------------------------- public content


def _secrets(question) -> list[str]:
    out = [t for o in question.options for t in o.explain.values()]
    out += list((question.explain or {}).values())
    return out


@pytest.mark.parametrize("lang", LANGS)
def test_public_question_holds_no_answer_key(bank, lang):
    for qid, question in bank.questions.items():
        for seed in range(5):
            item = _item(bank, qid, seed=seed)
            public = public_question(item, bank, lang)
            data = dataclasses.asdict(public)
            assert "correct" not in data and "explain" not in data and "answer" not in data
            shown = repr(public)
            for secret in _secrets(question):
                assert secret.split("{")[0] not in shown
            assert "EXPLAIN" not in shown and "correct" not in shown.lower()
            assert [k for k, _ in public.options] == list(KEYS[: len(question.options)])
            if question.type == "numeric":
                assert "{" not in public.text and public.unit


def test_public_question_fills_params(bank):
    item = _numeric_item(bank, S=512, n=16)
    assert public_question(item, bank, "nl").text == (
        "Een ring all-reduce van 512 MiB over 16 ranks. Hoeveel MiB per rank? "
        "Geef het antwoord in 3 significante cijfers."
    )
    # The precision is asked for in every language, from the question's precision field.
    assert public_question(item, bank, "zh").text.endswith("答案保留 3 位有效数字。")
    assert public_question(_item(bank, "ring-allreduce-fixed"), bank, "en").text.endswith(
        "Give a whole number."
    )


def test_stale_plan_is_reported(bank):
    item = _item(bank, "overview-what-is-dp")
    for broken in (
        {**item, "question_id": "overview-gone"},
        {**item, "options": [0, 1]},
        {**_numeric_item(bank), "params": {"S": 1}},
    ):
        with pytest.raises(QuestionUnavailable):
            public_question(broken, bank, "en")
        with pytest.raises(QuestionUnavailable):
            grade(broken, bank, "a", "en")


# -------------------------------------------------------------------- score


def test_score_and_pass_mark():
    assert score_percent(10, 12) == pytest.approx(83.333, rel=1e-4)
    assert passed(10, 12, 80) and not passed(9, 12, 80)
    assert passed(4, 5, 80) and not passed(3, 5, 80)  # exactly 80 % passes
    assert not passed(0, 0, 80) and score_percent(0, 0) == 0.0


# ----------------------------------------------------------------- messages


def _flatten(node, prefix=""):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _flatten(value, f"{prefix}{key}.")
    else:
        yield prefix[:-1], node


def test_messages_exist_in_every_language():
    tables = {
        lang: dict(_flatten(content.catalog(content.QUIZ, lang)))
        for lang in LANGS
    }
    assert tables["en"].keys() == tables["zh"].keys() == tables["nl"].keys()
    for key, text in tables["en"].items():
        for lang in LANGS:
            assert tables[lang][key].strip()
            assert set(re.findall(r"\{(\w+)\}", tables[lang][key])) == set(re.findall(r"\{(\w+)\}", text))
    assert message("number.decimal", "nl") == "," and message("number.decimal", "en") == "."
    assert message("quiz_errors.empty", "xx") == message("quiz_errors.empty", "en")  # unknown language
