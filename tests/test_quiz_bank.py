"""The question bank: loading, validation, the formula evaluator and
``python -m quizzes check`` (on a broken bank and on the real one)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from quizzes.bank import (
    BANK_DIR,
    ExpressionError,
    evaluate,
    expression_names,
    lesson_languages,
    lesson_topics,
    load_bank,
    parse_expression,
)

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = Path(__file__).parent / "fixtures" / "quiz_bank"
LANGS = ("en", "zh", "nl")
TOPICS = ("overview", "ring-allreduce", "ddp")


def _bank_from(tmp_path: Path, yaml_text: str, name: str = "overview.yaml"):
    (tmp_path / name).write_text(textwrap.dedent(yaml_text), encoding="utf-8")
    return load_bank(tmp_path, languages=LANGS, topics=TOPICS)


def _tr(text: str) -> str:
    return f"{{en: '{text}', zh: '{text} zh', nl: '{text} nl'}}"


def _choice(qid: str = "overview-q", qtype: str = "single", correct=(True, False, False)) -> str:
    options = "".join(
        f"""
    - text: {_tr(f"option {i}")}
      correct: {str(c).lower()}
      explain: {_tr(f"why {i}")}
      see: overview"""
        for i, c in enumerate(correct)
    )
    return f"""
- id: {qid}
  topic: overview
  type: {qtype}
  text: {_tr("question")}
  options:{options}
"""


def _numeric(answer: str = "2 * n", tolerance: str = "{rel: 0.01}", text: str = "n is {n}",
             params: str = "n: {min: 2, max: 8}", precision: str = "{sig: 3}",
             mistakes: str = '[{formula: "n", label: "forgets the 2"}]') -> str:
    return f"""
- id: overview-num
  topic: overview
  type: numeric
  params:
    {params}
  text: {{en: "{text}", zh: "{text}", nl: "{text}"}}
  answer: "{answer}"
  tolerance: {tolerance}
  unit: {_tr("MB")}
  precision: {precision}
  mistakes: {mistakes}
  explain: {_tr("because")}
  see: ring-allreduce
"""


def test_fixture_bank_is_clean():
    bank = load_bank(FIXTURE, languages=LANGS, topics=TOPICS)
    assert bank.problems == ()
    assert {q.type for q in bank.questions.values()} == {"single", "multiple", "numeric", "ordering"}


def test_lesson_structure_is_found():
    assert set(lesson_languages()) >= {"en"}
    topics = lesson_topics()
    assert topics[0] == "overview" and "faq" in topics


@pytest.mark.parametrize(
    ("source", "values", "expected"),
    [
        ("2 * (n - 1) / n * S", {"n": 4, "S": 100}, 150.0),
        ("-x + 2 ** 3", {"x": 1}, 7.0),
        ("min(a, b) + max(a, b)", {"a": 1, "b": 5}, 6.0),
        ("round(log2(n)) + sqrt(16)", {"n": 9}, 7.0),
        ("round(x, 1)", {"x": 1.26}, 1.3),
        ("1e3 / 8", {}, 125.0),
    ],
)
def test_evaluator_computes(source, values, expected):
    assert evaluate(parse_expression(source), values) == pytest.approx(expected)


@pytest.mark.parametrize(
    "source",
    [
        "__import__('os').system('true')",
        "n.__class__",
        "(lambda: 1)()",
        "[1, 2][0]",
        "n if n else 1",
        "n > 1",
        "n // 2",
        "n % 2",
        "abs(n)",
        "'a' * 3",
        "True + 1",
        "f(n)",
        "min(n, key=n)",
        "n; 1",
        "",
    ],
)
def test_evaluator_rejects(source):
    with pytest.raises(ExpressionError):
        evaluate(parse_expression(source), {"n": 2})


@pytest.mark.parametrize("source", ["10 ** 10 ** 10", "1 / (n - n)", "sqrt(-n)", "log2(0)", "2.0 ** 2000"])
def test_evaluator_fails_cleanly_at_runtime(source):
    with pytest.raises(ExpressionError):
        evaluate(parse_expression(source), {"n": 2})


def test_expression_names_exclude_functions():
    assert expression_names(parse_expression("max(a, b) * sqrt(c)")) == {"a", "b", "c"}


@pytest.mark.parametrize(
    ("yaml_text", "expected", "usable"),
    [
        (_choice() + _choice(), "duplicate id", 1),
        (_choice(correct=(False, False, False)), "no correct option", 0),
        (_choice(correct=(True, True, False)), "single choice with 2 correct", 0),
        (_choice(qtype="multiple", correct=(True, True, False)), None, 1),
        (_choice(qtype="truefalse"), "type 'truefalse'", 0),
        (_choice(correct=(True, False)), "expected 3 to 5", 1),
        (_choice(qid="Overview Q"), "kebab-case", 0),
        (_choice(qid="ddp-q"), "should start with its topic", 1),
        (_choice().replace("topic: overview", "topic: nowhere"), "not a lesson section", 0),
        (_choice().replace(", nl: 'question nl'", ""), "text lacks nl", 1),
        (_choice().replace("zh: 'why 1 zh'", "zh: ''"), "option 2 explain lacks zh", 1),
        (_choice().replace("en: 'option 0'", "en: yes"), "not a string", 1),
        (_choice().replace("  text: {en: 'question'", "  txt: 1\n  text: {en: 'question'"), "unknown keys txt", 1),
        (_numeric(), None, 1),
        (_numeric(answer="2 * m"), "unknown names m", 0),
        (_numeric(answer="__import__('os')"), "answer", 0),
        (_numeric(answer="1 / (n - 2)"), "answer fails", 0),
        (_numeric(text="n is {n} and {k}"), "unknown placeholders ['k']", 1),
        (_numeric(text="no parameter shown"), "does not show parameters ['n']", 1),
        (_numeric(tolerance="{}"), "tolerance must be", 0),
        (_numeric(tolerance="{rel: 0.0000001}", answer="n / 3"), "widen the tolerance", 1),
        (_numeric(params="n: {min: 1.5, max: 3}"), "integer min <= max", 0),
        (_numeric(params="n: {choices: []}"), "non-empty list of numbers", 0),
        (_numeric(params="min: {choices: [1]}"), "parameter name 'min' not allowed", 0),
        # Sections are cited by id, never typed by hand.
        (_choice().replace("see: overview", "see: nowhere", 1), "see names unknown section(s) nowhere", 1),
        (_choice().replace("\n      see: overview", "", 1), "option 1 needs see:", 1),
        (_choice().replace("see: overview", "see: [overview, ddp, ring-allreduce]", 1), "at most 2", 1),
        (_choice().replace("'why 0'", "'why 0. See *Overview*.'"), "names a section by hand", 1),
        (_choice().replace("'why 0 zh'", "'参见「概览」一节。'"), "names a section by hand", 1),
        (_numeric().replace("\n  see: ring-allreduce", ""), "question needs see:", 1),
        # Numeric questions state their precision and declare their mistakes.
        (_numeric(precision="{}"), "precision must be", 1),
        (_numeric(precision="{sig: 0}"), "precision must be", 1),
        (_numeric(precision="{sig: 3, decimals: 1}"), "precision must be", 1),
        (_numeric(mistakes="[]"), "needs mistakes", 1),
        (_numeric(mistakes='[{formula: "2 * m", label: "x"}]'), "uses unknown names m", 1),
        (_numeric(mistakes='[{formula: "n + n", label: "same as the answer"}]'),
         "mistake 'same as the answer' (4 for 4) would be graded correct", 1),
        # Two figures of n / 3 (0.67 for 0.667) are 0.5 % off, outside a 0.1 % tolerance.
        (_numeric(answer="n / 3", tolerance="{rel: 0.001}", precision="{sig: 2}"), "is graded wrong", 1),
        # 102.5 is outside +-2 of 100, but a learner rounding it to two figures types 100.
        (_numeric(answer="10 * n", params="n: {choices: [10]}", tolerance="{abs: 2}", precision="{sig: 2}",
                  mistakes='[{formula: "10.25 * n", label: "rounds in"}]'),
         "mistake 'rounds in' (102.5 for 100) would be graded correct", 1),
    ],
)
def test_validation_finds(tmp_path, yaml_text, expected, usable):
    bank = _bank_from(tmp_path, yaml_text)
    if expected is None:
        assert bank.problems == ()
    else:
        assert any(expected in p for p in bank.problems), bank.problems
    assert len(bank.questions) == usable


def test_validation_of_ordering_and_files(tmp_path):
    (tmp_path / "ddp.yaml").write_text(
        textwrap.dedent(
            f"""
            - id: ddp-order
              topic: ddp
              type: ordering
              text: {_tr("order")}
              items:
                - {_tr("same")}
                - {_tr("same")}
            - id: overview-elsewhere
              topic: overview
              type: ordering
              text: {_tr("order")}
              items: [{_tr("one")}, {_tr("two")}]
              explain: {_tr("why")}
            """
        ),
        encoding="utf-8",
    )
    (tmp_path / "broken.yaml").write_text("- id: [unclosed\n", encoding="utf-8")
    (tmp_path / "mapping.yaml").write_text("id: x\n", encoding="utf-8")
    problems = "\n".join(load_bank(tmp_path, languages=LANGS, topics=TOPICS).problems)
    assert "ordering question needs explain" in problems
    assert "two items have the same en text" in problems
    assert "topic 'overview' lives in ddp.yaml" in problems
    assert "broken.yaml: cannot read" in problems
    assert "mapping.yaml: must be a YAML list" in problems


def _run_check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "quizzes", "check", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )


def test_check_command_fails_on_a_broken_bank(tmp_path):
    (tmp_path / "overview.yaml").write_text(_choice(correct=(False, False, False)), encoding="utf-8")
    result = _run_check("--bank", str(tmp_path))
    assert result.returncode == 1
    assert "PROBLEM" in result.stdout and "no correct option" in result.stdout
    assert "at least 40 needed" in result.stdout


@pytest.mark.skipif(not list(BANK_DIR.glob("*.yaml")), reason="quizzes/bank has no files yet")
def test_check_command_passes_on_the_real_bank():
    result = _run_check()
    assert result.returncode == 0, result.stdout + result.stderr
    for lang in load_bank().languages:
        assert f"\n{lang}" in result.stdout
    assert "numeric" in result.stdout and "OK" in result.stdout


def _real_bank_with(tmp_path: Path, old: str, new: str) -> Path:
    """A copy of the real bank with one edit in ring-allreduce.yaml."""
    for path in BANK_DIR.glob("*.yaml"):
        text = path.read_text(encoding="utf-8")
        if path.name == "ring-allreduce.yaml":
            assert old in text, old
            text = text.replace(old, new, 1)
        (tmp_path / path.name).write_text(text, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        # A mistake formula equal to the answer: it would be graded right.
        ('{formula: "2 * (n - 1) / n * S / B", label: "drops the latency term"}',
         '{formula: "2 * (n - 1) * a / 1000 + 2 * (n - 1) / n * S / B", label: "drops the latency term"}',
         "mistake 'drops the latency term'"),
        # A tolerance that rejects a correctly rounded three-figure answer.
        ("tolerance: {rel: 0.006}", "tolerance: {rel: 0.0001}", "is graded wrong"),
        # A section id the table of contents does not have.
        ("see: ring-allreduce", "see: ring-all-reduce", "unknown section(s) ring-all-reduce"),
        # A section title typed by hand.
        ('en: "True. That is the definition', 'en: "See *Ring all-reduce*. True. That is the definition',
         "names a section by hand"),
    ],
)
def test_check_command_fails_on_a_broken_item_in_the_real_bank(tmp_path, old, new, expected):
    result = _run_check("--bank", str(_real_bank_with(tmp_path, old, new)))
    assert result.returncode == 1, result.stdout
    assert expected in result.stdout, result.stdout


def test_every_numeric_question_states_precision_and_mistakes():
    for question in load_bank().questions.values():
        if question.type == "numeric":
            assert question.precision and question.mistakes, question.id
