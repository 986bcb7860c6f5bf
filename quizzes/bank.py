"""Load and validate the question bank (``content/quiz-bank/*.yaml``, read
through ``academy.content``).

The format is described in ``quizzes/README.md``; the pydantic models below
are its one definition: ``Question`` is a union of the four question types,
told apart by ``type``, and each model forbids fields it does not know. What
a model cannot say about one value alone (a formula that fails on some
draws, a mistake the tolerance would accept, a ``see:`` id the table of
contents lacks, a topic with no question) is a check function over the
validated models.

Loading never raises on bad content: every mistake becomes a line in
``Bank.problems`` that names the file, the question id and the field, and a
question that does not match its model is left out. The one exception is a
missing translation: a question whose only fault is that some language lacks
a text stays in (that language falls back to English), so one missing
sentence does not take a question away from the other languages;
``python -m quizzes check`` fails on both.

The course languages and section ids come from the lessons' tables of
contents (``academy.lessons``), never from a list here. Every explanation cites
the lesson section(s) it comes from by id (``see``); the title is read from
each language's ``toc.yaml`` when the explanation is shown, so a renamed
section can never leave a stale title behind.

A choice question must not give its answer away by length: the answer (or,
for multiple choice, every correct option) may not be far wider than every
wrong option in any language (``quizzes.lengths``).

A numeric question states the precision it wants (``precision``: {sig: 3}
or {decimals: 0}; the engine words it in every language) and lists its
common ``mistakes`` as formulas. The check evaluates the answer and every
mistake on every parameter draw (all of them, or a large seeded sample when
there are too many): a correctly rounded answer must be accepted, and no
mistake, exact or rounded, may be.

Numeric answers are formulas over the drawn parameters, evaluated by
``quizzes.formula``: nothing from the bank is ever handed to ``eval``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    StrictInt,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    model_validator,
    with_config,
)
from pydantic_core import ErrorDetails, PydanticCustomError
from typing_extensions import TypedDict  # pydantic needs it for TypedDicts before Python 3.12

from academy import content, lessons
from academy.lessons import SECTION_ID, error_lines, schema_errors
from quizzes.formula import (
    FUNCTIONS,
    ExpressionError,
    all_draws,
    compiled,
    compute_answer,
    evaluate,
    expression_names,
    parse_expression,
    round_to,
)
from quizzes.lengths import length_cue_problems
from quizzes.numbers import format_number, parse_number, within_tolerance

MAX_SEE = 2  # sections one explanation may cite (the wording has one and two)
MAX_KEYS = 26  # options and ordering items are keyed a, b, c, ...

_ID = re.compile(SECTION_ID)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
# A section named by hand instead of by `see:` (review X11): it drifts.
HAND_TYPED_SECTION = re.compile(r"\bSee \*|\bZie \*|参见「")


@dataclass(frozen=True)
class Bank:
    questions: dict[str, Question]  # by id, in file and list order
    languages: tuple[str, ...]  # every text must exist in each of these
    topics: tuple[str, ...]  # lesson section ids, in course order
    problems: tuple[str, ...] = ()




# ------------------------------------------------------------------ schema
#
# Validators that need the course (its languages and section ids) read them
# from the validation context that `load_bank` passes; without one they use
# the lessons on disk. "partial" is the second pass that lets a question
# lacking translations in.


def _fail(kind: str, message: str) -> PydanticCustomError:
    """A validation error with our wording (no "Value error, " prefix)."""
    return PydanticCustomError(kind, message)


def _course_languages(info: ValidationInfo) -> tuple[str, ...]:
    return (info.context or {}).get("languages") or lessons.languages()


def _localised(value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
    """Exactly the course languages, none blank; the first (the source
    language) may not be missing even in the partial pass."""
    languages = _course_languages(info)
    unknown = sorted(set(value) - set(languages))
    if unknown:
        raise _fail("unknown_language", f"unknown language(s) {', '.join(unknown)}; "
                    f"the course has {', '.join(languages)}")
    present = {lang: value[lang] for lang in languages if value.get(lang, "").strip()}
    missing = [lang for lang in languages if lang not in present]
    if missing and (not (info.context or {}).get("partial") or languages[0] in missing):
        raise _fail("missing_language", f"lacks {', '.join(missing)}")
    return present


def _known_topic(value: str, info: ValidationInfo) -> str:
    topics = (info.context or {}).get("topics") or tuple(lessons.section_ids())
    if value not in topics:
        raise _fail("unknown_topic", f"{value!r} is not a lesson section ({', '.join(topics)})")
    return value


def _kebab(value: str) -> str:
    if not _ID.match(value):
        raise _fail("id_format", f"{value!r} must be kebab-case (lower-case words joined by -)")
    return value


def _one_or_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


def _parses(source: str) -> str:
    try:
        parse_expression(source)
    except ExpressionError as exc:
        raise _fail("formula", f"{source!r}: {exc}") from None
    return source


def _number_as_formula(value: Any) -> Any:
    """A constant answer (``answer: 42``) is a formula too."""
    return repr(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _finite_number(value: Any) -> int | float:
    """An int stays an int (a drawn 64 is shown as 64); one error, not one per member of int | float."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail("number", f"must be a finite number, got {value!r}")
    return value


def _param_name(name: str) -> str:
    if not _NAME.match(name) or name in FUNCTIONS or name == "answer":
        raise _fail("param_name", f"parameter name {name!r} not allowed (an identifier, not a function or 'answer')")
    return name


# A learner-visible text: a mapping with exactly the course languages.
Text = Annotated[dict[str, str], AfterValidator(_localised)]
# Lesson section ids cited by an explanation: one, or a list of up to MAX_SEE
# (whether the table of contents has them is `see_problems`'s job).
See = Annotated[tuple[str, ...], BeforeValidator(_one_or_list), Field(min_length=1, max_length=MAX_SEE)]
Formula = Annotated[str, AfterValidator(_parses)]
Number = Annotated[int | float, PlainValidator(_finite_number)]
NonNegative = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]


def _param_kind(spec: Param) -> Param:
    if set(spec) == {"choices"}:
        return spec
    if set(spec) == {"min", "max"} and spec["min"] <= spec["max"]:
        return spec
    raise _fail("param", "must be {choices: [...]} or {min: .., max: ..} with integer min <= max")


def _some_tolerance(tolerance: Tolerance) -> Tolerance:
    if not tolerance:
        raise _fail("tolerance", "must be {rel: x} or {abs: x} (or both)")
    return tolerance


def _one_precision(precision: Precision) -> Precision:
    if len(precision) != 1:
        raise _fail("precision", "must be {sig: 1..6} or {decimals: 0..6}")
    return precision


# Tolerance, Precision and Param are TypedDicts, not BaseModels: the engine
# reads them as mappings (tolerance.get("abs"), "sig" in precision).
@with_config(ConfigDict(extra="forbid"))
class Tolerance(TypedDict, total=False):
    """How far a numeric answer may be off: the larger bound applies."""

    rel: NonNegative
    abs: NonNegative


@with_config(ConfigDict(extra="forbid"))
class Precision(TypedDict, total=False):
    """What the question asks for: significant figures or decimal places (one of them)."""

    sig: Annotated[StrictInt, Field(ge=1, le=6)]
    decimals: Annotated[StrictInt, Field(ge=0, le=6)]


@with_config(ConfigDict(extra="forbid"))
class Param(TypedDict, total=False):
    """A drawn parameter: one of `choices`, or an integer in [min, max]."""

    choices: Annotated[list[Number], Field(min_length=1)]
    min: StrictInt
    max: StrictInt


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Mistake(_Model):
    """A wrong way to compute a numeric answer that must never be graded right; with
    ``explain``, the feedback names it to a learner whose number is this mistake's
    (placeholders: the parameters, ``{answer}`` and ``{mistake}``, the mistake's value)."""

    formula: Formula
    label: Annotated[str, Field(min_length=1)]  # for the check's report; never shown to learners
    explain: Text | None = None


class Option(_Model):
    text: Text
    correct: StrictBool
    explain: Text  # why this option is right or wrong, shown once the learner answered
    see: See = ()  # lesson section ids the explanation cites


def _distinct(texts: tuple[dict[str, str], ...], what: str) -> None:
    """Two identical options or items would make grading ambiguous."""
    for lang in sorted({lang for t in texts for lang in t}):
        values = [t[lang].strip() for t in texts if lang in t]
        if len(values) != len(set(values)):
            raise _fail("duplicate_text", f"two {what}s have the same {lang} text")


class QuestionBase(_Model):
    """The fields every question has (a run template's too, ``quizzes.templates``)."""

    id: Annotated[str, AfterValidator(_kebab)]
    topic: Annotated[str, AfterValidator(_known_topic)]
    text: Text
    faq: StrictBool = False  # one of the course brief's FAQ questions
    explain: Text | None = None  # optional for choice questions
    see: See = ()  # sections the question's own explanation cites


class _ChoiceQuestion(QuestionBase):
    options: Annotated[tuple[Option, ...], Field(min_length=3, max_length=5)]
    # What the engine reads on every question, whatever its type.
    items: ClassVar[tuple[dict[str, str], ...]] = ()
    params: ClassVar[dict[str, Param]] = {}
    unit: ClassVar[dict[str, str] | None] = None

    @model_validator(mode="after")
    def _options_distinct(self) -> _ChoiceQuestion:
        _distinct(tuple(o.text for o in self.options), "option")
        return self


class SingleQuestion(_ChoiceQuestion):
    type: Literal["single"]

    @model_validator(mode="after")
    def _one_correct(self) -> SingleQuestion:
        n = sum(o.correct for o in self.options)
        if n != 1:
            raise _fail("correct", f"single choice with {n} correct options; exactly one must be")
        return self


class MultipleQuestion(_ChoiceQuestion):
    """Graded all-or-nothing on the exact set of correct options."""

    type: Literal["multiple"]

    @model_validator(mode="after")
    def _some_correct(self) -> MultipleQuestion:
        if not any(o.correct for o in self.options):
            raise _fail("correct", "no correct option")
        return self


# A numeric question's own fields, which a run template (quizzes.templates) declares too.
Params = dict[Annotated[str, AfterValidator(_param_name)], Annotated[Param, AfterValidator(_param_kind)]]
Answer = Annotated[Formula, BeforeValidator(_number_as_formula)]
SomeTolerance = Annotated[Tolerance, AfterValidator(_some_tolerance)]
OnePrecision = Annotated[Precision, AfterValidator(_one_precision)]


class NumericQuestion(QuestionBase):
    """A formula over parameters drawn per attempt (see README.md)."""

    type: Literal["numeric"]
    params: Params = {}
    answer: Answer
    tolerance: SomeTolerance
    precision: OnePrecision
    mistakes: Annotated[tuple[Mistake, ...], Field(min_length=1)]
    unit: Text | None = None
    explain: Text
    options: ClassVar[tuple[Option, ...]] = ()
    items: ClassVar[tuple[dict[str, str], ...]] = ()

    @model_validator(mode="after")
    def _formulas_use_params(self) -> NumericQuestion:
        for what, formula in (("answer", self.answer), *((f"mistake {m.label!r}", m.formula) for m in self.mistakes)):
            unknown = sorted(expression_names(parse_expression(formula)) - set(self.params))
            if unknown:
                raise _fail("formula", f"{what} uses unknown names {', '.join(unknown)}")
        return self


class OrderingQuestion(QuestionBase):
    type: Literal["ordering"]
    items: Annotated[tuple[Text, ...], Field(min_length=2, max_length=MAX_KEYS)]  # in the correct order
    explain: Text
    options: ClassVar[tuple[Option, ...]] = ()
    params: ClassVar[dict[str, Param]] = {}
    unit: ClassVar[dict[str, str] | None] = None

    @model_validator(mode="after")
    def _items_distinct(self) -> OrderingQuestion:
        _distinct(self.items, "item")
        return self


Question = Annotated[
    SingleQuestion | MultipleQuestion | NumericQuestion | OrderingQuestion, Field(discriminator="type")
]
_QUESTION: TypeAdapter[Question] = TypeAdapter(Question)
# The question types, in the order `python -m quizzes check` counts them.
TYPES = tuple(
    tag for model in get_args(get_args(Question)[0]) for tag in get_args(model.model_fields["type"].annotation)
)


# ------------------------------------------------------- course structure


def section_titles(lang: str) -> dict[str, str]:
    """Section id -> title from `lang`'s table of contents (English where the
    language has none): what a ``see:`` id is shown as."""
    return {s.id: s.title for s in lessons.sections(lang)}


# ----------------------------------------------------------------- loading


def localized(texts: Mapping[str, str] | None, lang: str) -> str:
    """A text in `lang`, falling back to English (validation flags the gap)."""
    if not texts:
        return ""
    return texts.get(lang) or texts.get(lessons.SOURCE_LANG) or next(iter(texts.values()), "")


def bank_dir() -> Path:
    """The course's question bank: ``content/quiz-bank``."""
    return content.path(content.QUIZ_BANK)


def load_bank(
    directory: Path | str | None = None,
    *,
    languages: tuple[str, ...] | None = None,
    topics: tuple[str, ...] | None = None,
) -> Bank:
    """Read and validate every ``*.yaml`` file of a bank folder (the course's,
    ``bank_dir()``, unless given), for the course's languages and sections
    (the lessons' unless given).

    Cached per argument set: the bank is read once per process, so restart
    the app to pick up edited files.
    """
    return _load_bank(
        Path(directory if directory is not None else bank_dir()).resolve(),
        languages if languages is not None else lessons.languages(),
        topics if topics is not None else tuple(lessons.section_ids()),
    )


@lru_cache(maxsize=8)
def _load_bank(directory: Path, languages: tuple[str, ...], topics: tuple[str, ...]) -> Bank:
    problems: list[str] = []
    questions: dict[str, Question] = {}
    seen: set[str] = set()
    files = sorted(directory.glob("*.yaml")) + sorted(directory.glob("*.yml"))
    if not files:
        problems.append(f"{directory}: no *.yaml files")
    for path in files:
        try:
            data = content.load(path)
        except content.ContentError as exc:  # named by file name, as every line here is
            problems.append(f"{path.name}: cannot read: {str(exc).removeprefix(content.where(path) + ': ')}")
            continue
        if data is None:
            problems.append(f"{path.name}: empty file")
            continue
        if not isinstance(data, list):
            problems.append(f"{path.name}: must be a YAML list of questions")
            continue
        for i, raw in enumerate(data):
            qid = raw.get("id") if isinstance(raw, dict) else None
            where = f"{path.name}: {qid}" if isinstance(qid, str) else f"{path.name}: question {i + 1}"
            if isinstance(qid, str):
                if qid in seen:
                    problems.append(f"{where}: duplicate id")
                    continue
                seen.add(qid)
            question, found = validate_question(raw, where, languages, topics)
            problems.extend(found)
            if question is None:
                continue
            problems.extend(placement_problems(question, where, path.stem, topics))
            problems.extend(see_problems(question, where, topics))
            problems.extend(length_cue_problems(question, where, languages))
            if isinstance(question, NumericQuestion):
                gradable, found = numeric_problems(question, where, languages)
                problems.extend(found)
                if not gradable:
                    continue
            questions[question.id] = question
    return Bank(questions=questions, languages=languages, topics=topics, problems=tuple(problems))


def validate_question(
    raw: Any, where: str, languages: tuple[str, ...], topics: tuple[str, ...]
) -> tuple[Question | None, list[str]]:
    """The model for one raw question, or None, with a line per schema error.

    A question whose only errors are missing translations is validated a
    second time in the partial pass and kept (see the module docstring)."""
    context: dict[str, Any] = {"languages": languages, "topics": topics}
    try:
        return _QUESTION.validate_python(raw, context=context), []
    except ValidationError as exc:
        errors = schema_errors(exc)
    tag = raw.get("type") if isinstance(raw, dict) else None
    problems = error_lines(where, [_untagged(err, tag) for err in errors])
    if all(err["type"] == "missing_language" for err in errors):
        try:
            return _QUESTION.validate_python(raw, context={**context, "partial": True}), problems
        except ValidationError:
            pass
    return None, problems


def _untagged(err: ErrorDetails, tag: Any) -> ErrorDetails:
    """Drop the union's tag ("single", ...) from an error's location: the
    writer knows the type, and the field reads `option 2 text`, not `single.option 2 text`."""
    return {**err, "loc": err["loc"][1:]} if tag is not None and err["loc"][:1] == (tag,) else err


# ------------------------------------------------------------------ checks


def placement_problems(question: Question, where: str, file_topic: str, topics: tuple[str, ...]) -> list[str]:
    """The id starts with the topic, and the question sits in its topic's file."""
    problems = []
    if not question.id.startswith(f"{question.topic}-"):
        problems.append(f"{where}: id: should start with its topic '{question.topic}-'")
    if question.topic != file_topic and file_topic in topics:
        problems.append(f"{where}: topic: {question.topic!r} lives in {file_topic}.yaml")
    return problems


def see_problems(question: Question, where: str, topics: tuple[str, ...]) -> list[str]:
    """Every explanation cites known sections with `see:` and names none by hand."""
    cited: list[tuple[str, dict[str, str] | None, tuple[str, ...]]] = [("", question.explain, question.see)]
    cited += [(f"option {j + 1} ", o.explain, o.see) for j, o in enumerate(question.options)]
    problems = []
    for prefix, explain, see in cited:
        for lang, body in (explain or {}).items():
            if HAND_TYPED_SECTION.search(body):
                problems.append(f"{where}: {prefix}explain.{lang}: names a section by hand; use see:")
        if explain is None and see:
            problems.append(f"{where}: {prefix}see: without explain")
        elif explain is not None and not see:
            problems.append(f"{where}: {prefix}see: missing; name the lesson section(s) the explanation comes from")
        unknown = [sid for sid in see if sid not in topics]
        if unknown:
            problems.append(f"{where}: {prefix}see: unknown section(s) {', '.join(unknown)}")
    return problems


def numeric_problems(question: NumericQuestion, where: str, languages: tuple[str, ...]) -> tuple[bool, list[str]]:
    """Placeholders name parameters; the answer evaluates on every draw, is
    accepted as displayed and as rounded to the stated precision, and no
    mistake is. Returns (gradable, problems): only an answer that fails to
    evaluate makes the question unusable; a tolerance too strict or too lax
    fails the check but still grades."""
    problems: list[str] = []

    names = set(question.params)
    for what, texts, allowed in (
        ("text", question.text, names),
        ("explain", question.explain or {}, names | {"answer"}),
        ("unit", question.unit or {}, set()),
        *((f"mistake {m.label!r}", m.explain, names | {"answer", "mistake"}) for m in question.mistakes
          if m.explain),
    ):
        for lang, text in texts.items():
            bad = sorted(set(PLACEHOLDER.findall(text)) - allowed)
            if bad:
                problems.append(f"{where}: {what}.{lang}: unknown placeholders {bad}")
    source = languages[0]
    unused = sorted(names - set(PLACEHOLDER.findall(localized(question.text, source))))
    if unused:
        problems.append(f"{where}: text.{source}: does not show parameters {unused}")

    shown_ok = rounded_ok = True
    caught: set[str] = set()
    for values in all_draws(question):
        try:
            expected = compute_answer(question, values)
        except ExpressionError as exc:
            problems.append(f"{where}: answer: fails for {values}: {exc}")
            return False, problems
        for lang in languages if shown_ok else ():
            shown = format_number(expected, lang)
            if not within_tolerance(parse_number(shown, lang), expected, question.tolerance):
                problems.append(
                    f"{where}: tolerance: the displayed answer {shown!r} ({lang}) falls outside the "
                    f"tolerance for {values}; widen the tolerance"
                )
                shown_ok = False
        for rounded in round_to(expected, question.precision) if rounded_ok else ():
            if not within_tolerance(rounded, expected, question.tolerance):
                problems.append(
                    f"{where}: tolerance: {rounded:g}, {expected:g} rounded to {question.precision}, is graded "
                    f"wrong for {values}; widen the tolerance or ask for more precision"
                )
                rounded_ok = False
        for mistake in question.mistakes:
            if mistake.label in caught:
                continue
            try:
                wrong = evaluate(compiled(mistake.formula), values)
            except ExpressionError as exc:
                problems.append(f"{where}: mistakes: {mistake.label!r} fails for {values}: {exc}")
                caught.add(mistake.label)
                continue
            if any(
                within_tolerance(v, expected, question.tolerance)
                for v in [wrong, *round_to(wrong, question.precision)]
            ):
                problems.append(
                    f"{where}: mistakes: {mistake.label!r} ({wrong:g} for {expected:g}) would be "
                    f"graded correct for {values}"
                )
                caught.add(mistake.label)
    return True, problems
