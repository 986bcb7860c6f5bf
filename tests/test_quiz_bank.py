"""The question bank: loading, validation, the formula evaluator and
``python -m quizzes check`` (on a broken bank and on the real one)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from academy import lessons
from quizzes.__main__ import answer_length_problems
from quizzes.bank import bank_dir, load_bank, localized
from quizzes.formula import ExpressionError, evaluate, expression_names, parse_expression

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


def test_the_real_bank_is_for_the_lessons_languages_and_sections():
    bank = load_bank()
    assert bank.languages == lessons.languages()
    assert bank.topics == tuple(lessons.section_ids())


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
        (_choice() + _choice(), "overview-q: duplicate id", 1),
        (_choice(correct=(False, False, False)), "overview-q: single choice with 0 correct options", 0),
        (_choice(correct=(True, True, False)), "overview-q: single choice with 2 correct options", 0),
        (_choice(qtype="multiple", correct=(True, True, False)), None, 1),
        (_choice(qtype="multiple", correct=(False, False, False)), "overview-q: no correct option", 0),
        (_choice(qtype="truefalse"), "overview-q: Input tag 'truefalse' found using 'type'", 0),
        (_choice(correct=(True, False)), "overview-q: options: has 2, needs at least 3", 0),
        (_choice(qid="Overview Q"), "Overview Q: id: 'Overview Q' must be kebab-case", 0),
        (_choice(qid="ddp-q"), "ddp-q: id: should start with its topic 'overview-'", 1),
        (_choice().replace("topic: overview", "topic: nowhere"), "overview-q: topic: 'nowhere' is not a lesson section", 0),
        # A missing translation is a problem, but the question stays (the language falls back to English)...
        (_choice().replace(", nl: 'question nl'", ""), "overview-q: text: lacks nl", 1),
        (_choice().replace("zh: 'why 1 zh'", "zh: ''"), "overview-q: option 2 explain: lacks zh", 1),
        # ... unless English, the text the others fall back to, is missing too.
        (_choice().replace("{en: 'question', ", "{"), "overview-q: text: lacks en", 0),
        (_choice().replace("nl: 'question nl'", "nl: 'question nl', fr: 'question fr'"),
         "overview-q: text: unknown language(s) fr; the course has en, zh, nl", 0),
        (_choice().replace("type: single", "type: single\n  faq: sometimes"),
         "overview-q: faq: Input should be a valid boolean", 0),
        # Each type has its own fields: a choice question's options are unknown to an ordering question.
        (_choice().replace("type: single", "type: ordering"), "overview-q: options: unknown field", 0),
        (_numeric(), None, 1),
        (_numeric(answer="2 * m"), "overview-num: answer uses unknown names m", 0),
        (_numeric(answer="__import__('os')"), "overview-num: answer: \"__import__('os')\": only min, max", 0),
        (_numeric(answer="1 / (n - 2)"), "overview-num: answer: fails for {'n': 2}: division by zero", 0),
        (_numeric(text="n is {n} and {k}"), "overview-num: text.en: unknown placeholders ['k']", 1),
        (_numeric(text="no parameter shown"), "overview-num: text.en: does not show parameters ['n']", 1),
        (_numeric(tolerance="{}"), "overview-num: tolerance: must be {rel: x} or {abs: x}", 0),
        (_numeric(tolerance="{rel: -1}"), "overview-num: tolerance.rel: Input should be greater than or equal to 0", 0),
        (_numeric(tolerance="{rel: 0.0000001}", answer="n / 3"), "widen the tolerance", 1),
        (_numeric(params="n: {min: 1.5, max: 3}"), "overview-num: params.n.min: Input should be a valid integer", 0),
        (_numeric(params="n: {min: 5, max: 2}"), "overview-num: params.n: must be {choices: [...]} or {min", 0),
        (_numeric(params="n: {choices: []}"), "overview-num: params.n.choices: has 0, needs at least 1", 0),
        (_numeric(params="n: {choices: [2, two]}"), "overview-num: params.n.choice 2: must be a finite number, got 'two'", 0),
        (_numeric(params="min: {choices: [1]}"), "overview-num: params.min: parameter name 'min' not allowed", 0),
        # Sections are cited by id, never typed by hand.
        (_choice().replace("\n      see: overview", "", 1), "overview-q: option 1 see: missing", 1),
        (_choice().replace("see: overview", "see: [overview, ddp, ring-allreduce]", 1),
         "overview-q: option 1 see: has 3, at most 2 allowed", 0),
        (_choice().replace("'why 0'", "'why 0. See *Overview*.'"),
         "overview-q: option 1 explain.en: names a section by hand", 1),
        (_choice().replace("'why 0 zh'", "'参见「概览」一节。'"), "overview-q: option 1 explain.zh: names a section by hand", 1),
        (_numeric().replace("\n  see: ring-allreduce", ""), "overview-num: see: missing", 1),
        # An answer that gives itself away by its length, in one language is enough (journey Minor 8).
        (_choice().replace("en: 'option 0'", "en: 'option 0, with every detail that makes it right'"),
         "overview-q: option 1 text.en: the answer is 5.9 times as long as the longest wrong option", 1),
        (_choice().replace("zh: 'option 0 zh'", "zh: '选项零，附上让它正确的全部细节'"),
         "overview-q: option 1 text.zh: the answer is", 1),
        (_choice(qtype="multiple", correct=(True, True, False))
         .replace("en: 'option 0'", "en: 'option 0, stated in full detail'")
         .replace("en: 'option 1'", "en: 'option 1, stated in full detail'"),
         "overview-q: options.en: every correct option is", 1),
        # Longer, but not by far: a few words more is how answers often read.
        (_choice().replace("en: 'option 0'", "en: 'option zero, right'"), None, 1),
        # Numeric questions state their precision and declare their mistakes.
        (_numeric(precision="{}"), "overview-num: precision: must be {sig: 1..6} or {decimals: 0..6}", 0),
        (_numeric(precision="{sig: 0}"), "overview-num: precision.sig: Input should be greater than or equal to 1", 0),
        (_numeric(precision="{sig: 3, decimals: 1}"), "overview-num: precision: must be", 0),
        (_numeric(mistakes="[]"), "overview-num: mistakes: has 0, needs at least 1", 0),
        (_numeric(mistakes='[{formula: "2 * m", label: "x"}]'), "overview-num: mistake 'x' uses unknown names m", 0),
        (_numeric(mistakes='[{formula: "n + n", label: "same as the answer"}]'),
         "overview-num: mistakes: 'same as the answer' (4 for 4) would be graded correct", 1),
        # Two figures of n / 3 (0.67 for 0.667) are 0.5 % off, outside a 0.1 % tolerance.
        (_numeric(answer="n / 3", tolerance="{rel: 0.001}", precision="{sig: 2}"), "is graded wrong", 1),
        # 102.5 is outside +-2 of 100, but a learner rounding it to two figures types 100.
        (_numeric(answer="10 * n", params="n: {choices: [10]}", tolerance="{abs: 2}", precision="{sig: 2}",
                  mistakes='[{formula: "10.25 * n", label: "rounds in"}]'),
         "mistakes: 'rounds in' (102.5 for 100) would be graded correct", 1),
    ],
)
def test_validation_finds(tmp_path, yaml_text, expected, usable):
    bank = _bank_from(tmp_path, yaml_text)
    if expected is None:
        assert bank.problems == ()
    else:
        assert any(expected in p for p in bank.problems), bank.problems
        assert all(p.startswith("overview.yaml: ") for p in bank.problems), bank.problems
    assert len(bank.questions) == usable


@pytest.mark.parametrize(
    ("old", "new", "line"),
    [
        # A missing language.
        (", nl: 'why 1 nl'", "", "overview.yaml: overview-q: option 2 explain: lacks nl"),
        # A wrong type: YAML reads a bare yes as true.
        ("en: 'option 2'", "en: yes", "overview.yaml: overview-q: option 3 text.en: Input should be a valid string, got True"),
        # An unknown field.
        ("  options:", "  hint: {en: x, zh: x, nl: x}\n  options:", "overview.yaml: overview-q: hint: unknown field"),
        # A `see` id the table of contents lacks.
        ("see: overview\n    - text: {en: 'option 2'", "see: overveiw\n    - text: {en: 'option 2'",
         "overview.yaml: overview-q: option 2 see: unknown section(s) overveiw"),
    ],
    ids=["missing-language", "wrong-type", "unknown-field", "unknown-see-id"],
)
def test_a_problem_names_file_question_and_field(tmp_path, old, new, line):
    yaml_text = _choice()
    assert old in yaml_text
    assert _bank_from(tmp_path, yaml_text.replace(old, new, 1)).problems == (line,)


def test_a_question_missing_a_translation_falls_back_to_english(tmp_path):
    bank = _bank_from(tmp_path, _choice().replace(", nl: 'question nl'", ""))
    question = bank.questions["overview-q"]
    assert question.text == {"en": "question", "zh": "question zh"}
    assert localized(question.text, "nl") == "question"
    assert localized(question.options[0].text, "nl") == "option 0 nl"


def test_the_course_languages_decide_what_a_text_needs(monkeypatch):
    """Without explicit languages the bank asks for the lessons' ones: a new
    language folder makes every question lack it."""
    monkeypatch.setattr(lessons, "languages", lambda: ("en", "zh", "nl", "de"))
    problems = load_bank(FIXTURE, topics=TOPICS).problems
    assert problems and all("lacks de" in p for p in problems), problems
    assert "overview.yaml: overview-what-is-dp: text: lacks de" in problems


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
              explain: {_tr("why")}
              see: ddp
            - id: ddp-unexplained
              topic: ddp
              type: ordering
              text: {_tr("order")}
              items: [{_tr("one")}, {_tr("two")}]
            - id: overview-elsewhere
              topic: overview
              type: ordering
              text: {_tr("order")}
              items: [{_tr("one")}, {_tr("two")}]
              explain: {_tr("why")}
              see: overview
            - just a string
            """
        ),
        encoding="utf-8",
    )
    (tmp_path / "broken.yaml").write_text("- id: [unclosed\n", encoding="utf-8")
    (tmp_path / "mapping.yaml").write_text("id: x\n", encoding="utf-8")
    bank = load_bank(tmp_path, languages=LANGS, topics=TOPICS)
    problems = "\n".join(bank.problems)
    assert "ddp.yaml: ddp-unexplained: explain: required field missing" in problems
    assert "ddp.yaml: ddp-order: two items have the same en text" in problems
    assert "ddp.yaml: overview-elsewhere: topic: 'overview' lives in ddp.yaml" in problems
    assert "ddp.yaml: question 4: " in problems
    assert "broken.yaml: cannot read" in problems
    assert "mapping.yaml: must be a YAML list" in problems
    assert list(bank.questions) == ["overview-elsewhere"]


def test_a_bank_where_the_answer_is_usually_the_longest_option_fails(tmp_path):
    """Each answer only a little longer passes one by one; the bank as a whole
    still rewards picking the longest option, and the check says so."""
    longer = "".join(
        _choice(qid=f"overview-q{i}").replace("en: 'option 0'", "en: 'option 0 +'") for i in range(3)
    ) + _choice(qid="overview-q3")
    bank = _bank_from(tmp_path, longer)
    assert bank.problems == ()
    assert answer_length_problems(bank) == [
        "bank: options.en: the answer is the longest option in 3 of 4 single-choice questions, more than 40%: "
        "picking the longest would pay; lengthen some wrong options or shorten some answers"
    ]


def test_the_real_bank_gives_no_answer_away_by_length():
    bank = load_bank()
    assert answer_length_problems(bank) == []
    assert not [p for p in bank.problems if "times as long as the longest wrong option" in p]


def _run_check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "quizzes", "check", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )


def test_check_command_fails_on_a_broken_bank(tmp_path):
    (tmp_path / "overview.yaml").write_text(_choice(correct=(False, False, False)), encoding="utf-8")
    result = _run_check("--bank", str(tmp_path))
    assert result.returncode == 1
    assert "PROBLEM overview.yaml: overview-q: single choice with 0 correct options" in result.stdout
    assert "at least 40 needed" in result.stdout


@pytest.mark.skipif(not list(bank_dir().glob("*.yaml")), reason="content/quiz-bank has no files yet")
def test_check_command_passes_on_the_real_bank():
    result = _run_check()
    assert result.returncode == 0, result.stdout + result.stderr
    for lang in load_bank().languages:
        assert f"\n{lang}" in result.stdout
    assert "numeric" in result.stdout and "OK" in result.stdout


def _real_bank_with(tmp_path: Path, old: str, new: str) -> Path:
    """A copy of the real bank with one edit in ring-allreduce.yaml."""
    for path in bank_dir().glob("*.yaml"):
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
         "mistakes: 'drops the latency term'"),
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
