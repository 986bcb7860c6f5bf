"""Question templates over a learner's own lab runs: their schema, loading and checks (issue #42).

A template (``content/quiz-templates/<lab>.yaml``, format in ``quizzes/README.md``)
is a numeric question whose values are the figures of a finished run
(``quizzes.figures``) and, optionally, values drawn for the question as the
bank draws them. It is asked as a choice among numbers: the answer, computed
from the figures by its formula (``quizzes.formula``), and one distractor per
declared mistake (busbw for algbw, a dropped 2(n-1)/n, the latency term left
out), each with an explanation of the mistake that gives it.

What the bank requires of a numeric question, a template requires of every
question built from it, with the learner's numbers (`values_problems`): the
answer as shown, rounded to the stated precision, is within the tolerance;
no distractor is, exactly or as shown; and no two options read the same. A
run whose figures make that impossible for every draw (a busbw question on
2 ranks, where busbw equals algbw) gets no question from that template.
``python -m quizzes check`` checks the templates with the bank: the schema,
placeholders, ``see:`` ids, and that every ``examples:`` entry (figures of a
real run) builds a question.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import AfterValidator, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from academy import content, lessons
from academy.lessons import error_lines, schema_errors
from quizzes.bank import (
    HAND_TYPED_SECTION,
    PLACEHOLDER,
    Answer,
    Mistake,
    Number,
    OnePrecision,
    Params,
    QuestionBase,
    SomeTolerance,
    Text,
    localized,
    see_problems,
)
from quizzes.figures import FIGURES
from quizzes.formula import (
    ExpressionError,
    compiled,
    evaluate,
    expression_names,
    parse_expression,
    round_to,
)
from quizzes.numbers import format_number, parse_number, within_tolerance

MIN_DISTRACTORS = 2  # with the answer, three options at least
# Options closer than this (relative) ask for arithmetic, not for the idea: a distractor
# must lie further from the answer and from every other option, as shown.
SEPARATION = 0.05
MAX_DRAWS = 256  # combinations of drawn values a template may offer


def _fail(kind: str, message: str) -> PydanticCustomError:
    """A validation error in our words (as ``quizzes.bank`` words its own)."""
    return PydanticCustomError(kind, message)


def _known_lab(value: str) -> str:
    if value not in FIGURES:
        raise _fail("unknown_lab", f"{value!r} is not a lab with figures ({', '.join(FIGURES)})")
    return value


class RunMistake(Mistake):
    """A wrong way to the answer, asked as a distractor: ``explain`` says which mistake
    gives it, with the learner's numbers, once they answered."""

    explain: Text


class Template(QuestionBase):
    """A question built from the figures of a run of ``lab`` (the bank's question fields, and these)."""

    lab: Annotated[str, AfterValidator(_known_lab)]
    figures: Annotated[tuple[str, ...], Field(min_length=1)]  # read from the run (quizzes.figures)
    examples: Annotated[tuple[dict[str, Number], ...], Field(min_length=1)]  # figures of real runs
    params: Params = {}  # drawn for the question, as the bank draws them
    answer: Answer
    tolerance: SomeTolerance
    precision: OnePrecision
    mistakes: Annotated[tuple[RunMistake, ...], Field(min_length=MIN_DISTRACTORS)]
    unit: Text | None = None
    explain: Text  # the working, with the learner's numbers and {answer}
    options: ClassVar[tuple[()]] = ()  # what the bank's see_problems reads of every question

    @model_validator(mode="after")
    def _names(self) -> Template:
        known = FIGURES[self.lab][1]
        unknown = [f for f in self.figures if f not in known]
        if unknown:
            raise _fail("figures", f"the {self.lab} lab has no figure(s) {', '.join(unknown)} ({', '.join(known)})")
        both = sorted(set(self.figures) & set(self.params))
        if both:
            raise _fail("params", f"{', '.join(both)} are figures of the run, not drawn values")
        for i, example in enumerate(self.examples, 1):
            if set(example) != set(self.figures):
                raise _fail("examples", f"example {i} must give exactly the figures {', '.join(self.figures)}")
        names = self.names
        for what, formula in (("answer", self.answer), *((f"mistake {m.label!r}", m.formula) for m in self.mistakes)):
            extra = sorted(expression_names(parse_expression(formula)) - names)
            if extra:
                raise _fail("formula", f"{what} uses unknown names {', '.join(extra)}")
        return self

    @property
    def names(self) -> set[str]:
        """The values a question of this template has: the run's figures and the drawn ones."""
        return set(self.figures) | set(self.params)


@dataclass(frozen=True)
class Templates:
    templates: dict[str, Template]  # by id, in file and list order
    languages: tuple[str, ...]
    problems: tuple[str, ...] = ()

    def of(self, lab: str) -> list[Template]:
        """The templates asked of a run of ``lab``."""
        return [t for t in self.templates.values() if t.lab == lab]


# ------------------------------------------------------------------- values


def draws(template: Template) -> list[dict[str, float]]:
    """Every combination of the drawn values, in the order the template lists them."""
    spaces = [(name, list(spec["choices"]) if "choices" in spec else list(range(spec["min"], spec["max"] + 1)))
              for name, spec in template.params.items()]
    return [dict(zip([n for n, _ in spaces], combo, strict=True))
            for combo in itertools.product(*(values for _, values in spaces))]


def shown(value: float, template: Template) -> float:
    """A value as an option shows it: rounded to the template's precision (the lower neighbour on a tie)."""
    return round_to(value, template.precision)[0]


def option_values(template: Template, values: Mapping[str, float]) -> list[float]:
    """The exact answer, then each mistake's value, in the template's order.

    Raises ExpressionError where a formula fails on these values."""
    return [evaluate(compiled(f), values) for f in (template.answer, *(m.formula for m in template.mistakes))]


def values_problems(template: Template, values: Mapping[str, float], languages: tuple[str, ...]) -> list[str]:
    """Why the question of ``template`` with ``values`` (figures and drawn values) cannot be
    asked; empty when it can. The bank's rules for a numeric answer and its mistakes
    (the quiz engine's rounding and tolerance), and options `SEPARATION` apart."""
    try:
        answer, *wrong = option_values(template, values)
    except ExpressionError as exc:
        return [f"a formula fails: {exc}"]
    problems = []
    right = shown(answer, template)
    for lang in languages:
        if not within_tolerance(parse_number(format_number(right, lang), lang), answer, template.tolerance):
            problems.append(f"the answer as shown in {lang}, {format_number(right, lang)}, is outside the tolerance")
    for mistake, value in zip(template.mistakes, wrong, strict=True):
        if within_tolerance(value, answer, template.tolerance) or within_tolerance(
                shown(value, template), answer, template.tolerance):
            problems.append(f"mistake {mistake.label!r} ({value:g}) would be right ({answer:g})")
    options = [shown(v, template) for v in (answer, *wrong)]
    for (i, a), (j, b) in itertools.combinations(enumerate(options), 2):
        if abs(a - b) <= SEPARATION * max(abs(a), abs(b)):
            problems.append(f"options {i + 1} and {j + 1} ({a:g}, {b:g}) lie within {SEPARATION:.0%} of each other")
    return problems


def build(template: Template, figures: Mapping[str, float], *, seed: str,
          languages: tuple[str, ...] | None = None) -> dict[str, float] | None:
    """The values of the question ``template`` asks of a run with ``figures``: its
    figures and the first draw, in an order shuffled by ``seed``, for which the question
    can be asked (`values_problems`); None when the run lacks a figure or no draw will do.
    Same template, figures and seed: same values (``quizzes.own.audit`` relies on it)."""
    if any(name not in figures for name in template.figures):
        return None
    mine = {name: figures[name] for name in template.figures}
    candidates = draws(template)
    random.Random(seed).shuffle(candidates)
    langs = languages or lessons.languages()
    for drawn in candidates:
        values = {**mine, **drawn}
        if not values_problems(template, values, langs):
            return values
    return None


# ------------------------------------------------------------------ loading


def templates_dir() -> Path:
    """The course's templates: ``content/quiz-templates``."""
    return content.path(content.QUIZ_TEMPLATES)


def load_templates(directory: Path | str | None = None, *, languages: tuple[str, ...] | None = None,
                   topics: tuple[str, ...] | None = None) -> Templates:
    """Read and check every ``*.yaml`` file of a templates folder (the course's unless
    given), for the course's languages and sections (the lessons' unless given). Like
    the bank: never raises on bad content, every problem a line, a broken template left
    out; cached per argument set."""
    return _load(Path(directory if directory is not None else templates_dir()).resolve(),
                 languages if languages is not None else lessons.languages(),
                 topics if topics is not None else tuple(lessons.section_ids()))


@lru_cache(maxsize=8)
def _load(directory: Path, languages: tuple[str, ...], topics: tuple[str, ...]) -> Templates:
    problems: list[str] = []
    found: dict[str, Template] = {}
    files = sorted(directory.glob("*.yaml"))
    if not files:
        problems.append(f"{directory}: no *.yaml files")
    for path in files:
        try:
            data = content.load(path)
        except content.ContentError as exc:
            problems.append(f"{path.name}: cannot read: {str(exc).removeprefix(content.where(path) + ': ')}")
            continue
        if not isinstance(data, list):
            problems.append(f"{path.name}: must be a YAML list of templates")
            continue
        for i, raw in enumerate(data):
            tid = raw.get("id") if isinstance(raw, dict) else None
            where = f"{path.name}: {tid}" if isinstance(tid, str) else f"{path.name}: template {i + 1}"
            if isinstance(tid, str) and tid in found:
                problems.append(f"{where}: duplicate id")
                continue
            template, found_schema = validate_template(raw, where, languages, topics)
            problems.extend(found_schema)
            if template is None:
                continue
            found_here = template_problems(template, where, path.stem, languages, topics)
            problems.extend(found_here)
            if not any(": examples:" in p for p in found_here):
                found[template.id] = template
    return Templates(templates=found, languages=languages, problems=tuple(problems))


def validate_template(raw: object, where: str, languages: tuple[str, ...],
                      topics: tuple[str, ...]) -> tuple[Template | None, list[str]]:
    """The model of one raw template, or None, with a line per schema error. As in the bank,
    a template whose only errors are missing translations is kept (the English stands in)."""
    context: dict[str, object] = {"languages": languages, "topics": topics}
    try:
        return Template.model_validate(raw, context=context), []
    except ValidationError as exc:
        errors = schema_errors(exc)
    problems = error_lines(where, errors)
    if all(err["type"] == "missing_language" for err in errors):
        try:
            return Template.model_validate(raw, context={**context, "partial": True}), problems
        except ValidationError:
            pass
    return None, problems


def template_problems(template: Template, where: str, file_lab: str, languages: tuple[str, ...],
                      topics: tuple[str, ...]) -> list[str]:
    """What the schema cannot see: the id and file, ``see:`` ids and hand-typed sections,
    placeholders, a text that hides a value, the number of draws, and the examples (a
    problem there, ``examples:``, leaves the template out: it would build no question)."""
    problems = []
    if not template.id.startswith(f"{template.topic}-"):
        problems.append(f"{where}: id: should start with its topic '{template.topic}-'")
    if template.lab != file_lab:
        problems.append(f"{where}: lab: {template.lab!r} lives in {template.lab}.yaml")
    problems.extend(see_problems(template, where, topics))
    names = template.names
    texts = [("text", template.text, names), ("explain", template.explain, names | {"answer"}),
             ("unit", template.unit or {}, set())]
    texts += [(f"mistake {j} explain", m.explain, names | {"answer"}) for j, m in enumerate(template.mistakes, 1)]
    for what, texts_by_lang, allowed in texts:
        for lang, text in texts_by_lang.items():
            bad = sorted(set(PLACEHOLDER.findall(text)) - allowed)
            if bad:
                problems.append(f"{where}: {what}.{lang}: unknown placeholders {bad}")
            if HAND_TYPED_SECTION.search(text):
                problems.append(f"{where}: {what}.{lang}: names a section by hand; use see:")
    for lang in languages:
        hidden = sorted(names - set(PLACEHOLDER.findall(localized(template.text, lang))))
        if hidden:
            problems.append(f"{where}: text.{lang}: does not show {hidden}: the learner needs every value")
    if len(draws(template)) > MAX_DRAWS:
        problems.append(f"{where}: params: {len(draws(template))} combinations, at most {MAX_DRAWS}")
    for i, example in enumerate(template.examples, 1):
        if build(template, example, seed=template.id, languages=languages) is None:
            why = "; ".join(values_problems(template, {**example, **(draws(template) or [{}])[0]}, languages))
            problems.append(f"{where}: examples: example {i} builds no question for any draw (first draw: {why})")
    return problems

