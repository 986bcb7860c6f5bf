"""Load and validate the question bank (``quizzes/bank/*.yaml``).

The format is described in ``quizzes/README.md``. Loading never raises on bad
content: every mistake becomes a line in ``Bank.problems`` and the question it
belongs to is left out when it could not be graded (no correct option, an
answer formula that does not evaluate, ...). A question that only lacks a
translation stays in, so one missing sentence does not take a question away
from the other languages; ``python -m quizzes check`` fails on both.

Every explanation cites the lesson section(s) it comes from by id (``see``);
the title is read from each language's ``toc.yaml`` when the explanation is
shown, so a renamed section can never leave a stale title behind, and an id
the table of contents lacks is a problem.

A numeric question states the precision it wants (``precision``: {sig: 3}
or {decimals: 0}; the engine words it in every language) and lists its
common ``mistakes`` as formulas. The check evaluates the answer and every
mistake on every parameter draw (all of them, or a large seeded sample when
there are too many): a correctly rounded answer must be accepted, and no
mistake, exact or rounded, may be.

Numeric answers are formulas over the drawn parameters. They are parsed with
``ast`` and walked by a tiny evaluator that knows numbers, the parameter
names, ``+ - * / **`` and the functions min, max, round, log2 and sqrt:
nothing from the bank is ever handed to ``eval``.
"""

from __future__ import annotations

import ast
import math
import operator
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from academy import content
from quizzes.numbers import format_number, parse_number, within_tolerance

ROOT = Path(__file__).resolve().parent.parent
BANK_DIR = ROOT / "quizzes" / "bank"

TYPES = ("single", "multiple", "numeric", "ordering")
# `check` evaluates every parameter draw when there are at most ALL_DRAWS of
# them, else CHECK_DRAWS seeded ones.
ALL_DRAWS = 20_000
CHECK_DRAWS = 2_000
PRECISIONS = ("sig", "decimals")
MAX_SEE = 2  # sections one explanation may cite (the wording has one and two)
MAX_KEYS = 26  # options and ordering items are keyed a, b, c, ...

_ID = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")

_COMMON_KEYS = {"id", "topic", "type", "text", "faq", "explain", "see"}
_KEYS = {
    "single": _COMMON_KEYS | {"options"},
    "multiple": _COMMON_KEYS | {"options"},
    "numeric": _COMMON_KEYS | {"params", "answer", "tolerance", "unit", "precision", "mistakes"},
    "ordering": _COMMON_KEYS | {"items"},
}


# A section named by hand instead of by `see:` (review X11): it drifts.
HAND_TYPED_SECTION = re.compile(r"\bSee \*|\bZie \*|参见「")


@dataclass(frozen=True)
class Option:
    text: dict[str, str]
    correct: bool
    explain: dict[str, str]
    see: tuple[str, ...] = ()  # lesson section ids the explanation cites


@dataclass(frozen=True)
class Mistake:
    """A wrong way to compute a numeric answer that must never be graded right."""

    formula: str
    label: str  # for the check's report; never shown to learners


@dataclass(frozen=True)
class Question:
    id: str
    topic: str
    type: str  # single | multiple | numeric | ordering
    text: dict[str, str]
    source: str = ""  # the bank file it came from
    faq: bool = False
    # Choice questions.
    options: tuple[Option, ...] = ()
    # Numeric questions: parameter specs ({choices: [...]} or {min, max}),
    # the answer formula and its tolerance ({rel: 0.01} and/or {abs: 0.5}).
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    answer: str = ""
    tolerance: dict[str, float] = field(default_factory=dict)
    unit: dict[str, str] | None = None
    precision: dict[str, int] = field(default_factory=dict)  # {sig: 3} or {decimals: 0}
    mistakes: tuple[Mistake, ...] = ()
    # Ordering questions: the items in their correct order.
    items: tuple[dict[str, str], ...] = ()
    # Numeric and ordering questions (optional for choice questions).
    explain: dict[str, str] | None = None
    see: tuple[str, ...] = ()  # sections the question's own explanation cites


@dataclass(frozen=True)
class Bank:
    questions: dict[str, Question]  # by id, in file and list order
    languages: tuple[str, ...]  # every text must exist in each of these
    topics: tuple[str, ...]  # lesson section ids, in course order
    problems: tuple[str, ...] = ()


# --------------------------------------------------------------- formulas


class ExpressionError(ValueError):
    """An answer formula uses something the evaluator does not allow."""


def _pow(base: float, exp: float) -> float:
    if abs(exp) > 64:  # keeps 10 ** 10 ** 10 from eating the server
        raise ExpressionError(f"exponent {exp} too large")
    return base**exp


_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: _pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": min,
    "max": max,
    "round": round,
    "log2": math.log2,
    "sqrt": math.sqrt,
}


def parse_expression(source: str) -> ast.expr:
    """Parse an answer formula and reject anything outside the whitelist."""
    try:
        tree = ast.parse(source.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ExpressionError(f"syntax error: {exc.msg}") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp):
            if type(node.op) not in _BINOPS:
                raise ExpressionError(f"operator {type(node.op).__name__} not allowed")
        elif isinstance(node, ast.UnaryOp):
            if type(node.op) not in _UNARY:
                raise ExpressionError(f"operator {type(node.op).__name__} not allowed")
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                raise ExpressionError("only min, max, round, log2 and sqrt may be called")
            if node.keywords:
                raise ExpressionError("keyword arguments not allowed")
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float):
                raise ExpressionError(f"constant {node.value!r} not allowed")
        elif isinstance(node, ast.Name):
            if not isinstance(node.ctx, ast.Load):
                raise ExpressionError("assignment not allowed")
        elif not isinstance(node, ast.operator | ast.unaryop | ast.expr_context):
            raise ExpressionError(f"{type(node).__name__} not allowed")
    return tree


def expression_names(tree: ast.expr) -> set[str]:
    """The variable names a formula reads (function names excluded)."""
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in called}


def evaluate(tree: ast.expr, values: Mapping[str, float]) -> float:
    """Evaluate a parsed formula; raises ExpressionError on any failure."""

    def walk(node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in values:
                raise ExpressionError(f"unknown name {node.id!r}")
            return values[node.id]
        if isinstance(node, ast.BinOp):
            return _BINOPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp):
            return _UNARY[type(node.op)](walk(node.operand))
        if isinstance(node, ast.Call):
            return FUNCTIONS[node.func.id](*(walk(a) for a in node.args))  # type: ignore[union-attr]
        raise ExpressionError(f"{type(node).__name__} not allowed")

    try:
        result = walk(tree)
    except ExpressionError:
        raise
    except (ArithmeticError, ValueError, TypeError) as exc:
        raise ExpressionError(str(exc) or type(exc).__name__) from None
    if isinstance(result, bool) or not isinstance(result, int | float):
        raise ExpressionError(f"result {result!r} is not a number")
    result = float(result)
    if not math.isfinite(result):
        raise ExpressionError(f"result {result} is not finite")
    return result


@lru_cache(maxsize=1024)
def _compiled(source: str) -> ast.expr:
    return parse_expression(source)


def compute_answer(question: Question, params: Mapping[str, float]) -> float:
    """The expected value of a numeric question for drawn parameter values."""
    return evaluate(_compiled(question.answer), params)


def round_to(value: float, precision: Mapping[str, int]) -> list[float]:
    """The correctly rounded values at `precision`: one, or both neighbours
    when `value` sits (within float noise) on a tie; none without a precision."""
    if not precision:
        return []
    if "decimals" in precision:
        unit = 10.0 ** -precision["decimals"]
    elif value == 0:
        return [0.0]
    else:
        unit = 10.0 ** (math.floor(math.log10(abs(value))) - precision["sig"] + 1)
    low = math.floor(value / unit) * unit
    out = [c for c in (low, low + unit) if abs(c - value) <= unit / 2 * (1 + 1e-9)]
    return [float(f"{c:.12g}") for c in out]


def all_draws(question: Question) -> list[dict[str, float]]:
    """Every parameter combination, or CHECK_DRAWS seeded ones when there are
    more than ALL_DRAWS: what `check` grades the answer and mistakes on."""
    spaces = [
        (name, list(spec["choices"]) if "choices" in spec else list(range(spec["min"], spec["max"] + 1)))
        for name, spec in question.params.items()
    ]
    if math.prod(len(values) for _, values in spaces) > ALL_DRAWS:
        rng = random.Random(question.id)
        return [draw_params(question, rng) for _ in range(CHECK_DRAWS)]
    draws: list[dict[str, float]] = [{}]
    for name, values in spaces:
        draws = [{**d, name: v} for d in draws for v in values]
    return draws


def draw_params(question: Question, rng: random.Random) -> dict[str, float]:
    """Draw one value per parameter, in the order the bank lists them."""
    values: dict[str, float] = {}
    for name, spec in question.params.items():
        if "choices" in spec:
            values[name] = rng.choice(list(spec["choices"]))
        else:
            values[name] = rng.randint(int(spec["min"]), int(spec["max"]))
    return values


# ------------------------------------------------------- course structure


def lesson_languages() -> tuple[str, ...]:
    """Languages that have lessons, English first (discovered by ``academy.content``)."""
    return content.languages()


def section_titles(lang: str) -> dict[str, str]:
    """Section id -> title from `lang`'s table of contents (English where the
    language has none): what a ``see:`` id is shown as."""
    for code in (lang, "en"):
        try:
            data = content.read_yaml("lessons", code, "toc.yaml")
            return {str(s["id"]): str(s["title"]) for s in data["sections"]}
        except (OSError, yaml.YAMLError, KeyError, TypeError):
            continue
    return {}


def lesson_topics() -> tuple[str, ...]:
    """Section ids from the English table of contents, in course order."""
    try:
        data = content.read_yaml("lessons", "en", "toc.yaml")
        return tuple(str(s["id"]) for s in data["sections"])
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return ()


# ----------------------------------------------------------------- loading


def localized(texts: Mapping[str, str] | None, lang: str) -> str:
    """A text in `lang`, falling back to English (validation flags the gap)."""
    if not texts:
        return ""
    return texts.get(lang) or texts.get("en") or next(iter(texts.values()), "")


def load_bank(
    directory: Path | str = BANK_DIR,
    *,
    languages: tuple[str, ...] | None = None,
    topics: tuple[str, ...] | None = None,
) -> Bank:
    """Read and validate every ``*.yaml`` file of a bank folder.

    Cached per argument set: the bank is read once per process, so restart
    the app to pick up edited files.
    """
    return _load_bank(
        Path(directory).resolve(),
        languages if languages is not None else lesson_languages(),
        topics if topics is not None else lesson_topics(),
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
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            problems.append(f"{path.name}: cannot read: {exc}")
            continue
        if data is None:
            problems.append(f"{path.name}: empty file")
            continue
        if not isinstance(data, list):
            problems.append(f"{path.name}: must be a YAML list of questions")
            continue
        for i, raw in enumerate(data):
            where = f"{path.name}[{i}]"
            if isinstance(raw, dict) and isinstance(raw.get("id"), str):
                where = f"{path.name}: {raw['id']}"
                if raw["id"] in seen:
                    problems.append(f"{where}: duplicate id")
                    continue
                seen.add(raw["id"])
            question, found = _parse_question(raw, where, path.stem, languages, topics)
            problems.extend(found)
            if question is not None:
                questions[question.id] = question
    return Bank(questions=questions, languages=languages, topics=topics, problems=tuple(problems))


def _parse_question(
    raw: Any, where: str, file_topic: str, languages: tuple[str, ...], topics: tuple[str, ...]
) -> tuple[Question | None, list[str]]:
    """Build one Question; returns (None, problems) when it cannot be graded."""
    problems: list[str] = []
    fatal = False

    def texts(value: Any, what: str) -> dict[str, str]:
        if not isinstance(value, dict):
            problems.append(f"{where}: {what} must be a mapping of language to text")
            return {}
        out: dict[str, str] = {}
        for lang, text in value.items():
            if not isinstance(text, str):
                problems.append(f"{where}: {what}.{lang} is {text!r}, not a string (quote it)")
            elif text.strip():
                out[str(lang)] = text
        missing = [lang for lang in languages if lang not in out]
        if missing:
            problems.append(f"{where}: {what} lacks {', '.join(missing)}")
        return out

    if not isinstance(raw, dict):
        return None, [f"{where}: a question must be a mapping"]
    qid, topic, qtype = raw.get("id"), raw.get("topic"), raw.get("type")
    if not isinstance(qid, str) or not _ID.match(qid):
        return None, [f"{where}: id {qid!r} must be kebab-case"]
    if qtype not in TYPES:
        return None, [f"{where}: type {qtype!r} is not one of {', '.join(TYPES)}"]
    if topic not in topics:
        problems.append(f"{where}: topic {topic!r} is not a lesson section")
        fatal = True
    elif not qid.startswith(f"{topic}-"):
        problems.append(f"{where}: id should start with its topic '{topic}-'")
    if topic != file_topic and file_topic in topics:
        problems.append(f"{where}: topic {topic!r} lives in {file_topic}.yaml")
    unknown = sorted(set(raw) - _KEYS[qtype])
    if unknown:
        problems.append(f"{where}: unknown keys {', '.join(map(str, unknown))}")
    if not isinstance(raw.get("faq", False), bool):
        problems.append(f"{where}: faq must be true or false")

    def sections(value: Any, what: str, explanation: dict[str, str] | None) -> tuple[str, ...]:
        """The `see:` ids of one explanation: known sections, one or two, and
        no section title typed into the explanation itself."""
        for lang, body in (explanation or {}).items():
            if HAND_TYPED_SECTION.search(body):
                problems.append(f"{where}: {what} explain.{lang} names a section by hand; use see:")
        if value is None:
            if explanation is not None:
                problems.append(f"{where}: {what} needs see: (the lesson section(s) it explains from)")
            return ()
        ids = [value] if isinstance(value, str) else value
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
            problems.append(f"{where}: {what} see must be a section id or a list of them")
            return ()
        if len(ids) > MAX_SEE:
            problems.append(f"{where}: {what} cites {len(ids)} sections, at most {MAX_SEE}")
        unknown = [i for i in ids if i not in topics]
        if unknown:
            problems.append(f"{where}: {what} see names unknown section(s) {', '.join(unknown)}")
        return tuple(i for i in ids[:MAX_SEE] if i in topics)

    text = texts(raw.get("text"), "text")
    if not text:
        fatal = True
    explain = texts(raw["explain"], "explain") if "explain" in raw else None
    if "see" in raw and explain is None:
        problems.append(f"{where}: see without explain")
    see = sections(raw.get("see"), "question", explain)
    q: dict[str, Any] = {}

    if qtype in ("single", "multiple"):
        raw_options = raw.get("options")
        if not isinstance(raw_options, list) or not raw_options:
            return None, [*problems, f"{where}: options must be a non-empty list"]
        if not 3 <= len(raw_options) <= 5:
            problems.append(f"{where}: has {len(raw_options)} options, expected 3 to 5")
        if len(raw_options) > MAX_KEYS:
            fatal = True
        options = []
        for j, opt in enumerate(raw_options):
            if not isinstance(opt, dict):
                problems.append(f"{where}: option {j + 1} must be a mapping")
                fatal = True
                continue
            extra = sorted(set(opt) - {"text", "correct", "explain", "see"})
            if extra:
                problems.append(f"{where}: option {j + 1} has unknown keys {', '.join(map(str, extra))}")
            if not isinstance(opt.get("correct"), bool):
                problems.append(f"{where}: option {j + 1} needs correct: true or false")
                fatal = True
            option_explain = texts(opt.get("explain"), f"option {j + 1} explain")
            options.append(
                Option(
                    text=texts(opt.get("text"), f"option {j + 1} text"),
                    correct=opt.get("correct") is True,
                    explain=option_explain,
                    see=sections(opt.get("see"), f"option {j + 1}", option_explain),
                )
            )
        n_correct = sum(o.correct for o in options)
        if n_correct == 0:
            problems.append(f"{where}: no correct option")
            fatal = True
        elif qtype == "single" and n_correct != 1:
            problems.append(f"{where}: single choice with {n_correct} correct options")
            fatal = True
        _check_distinct(problems, where, "option", [o.text for o in options], languages)
        q["options"] = tuple(options)

    elif qtype == "ordering":
        raw_items = raw.get("items")
        if not isinstance(raw_items, list) or len(raw_items) < 2:
            return None, [*problems, f"{where}: items must be a list of at least two"]
        if len(raw_items) > MAX_KEYS:
            problems.append(f"{where}: more than {MAX_KEYS} items")
            fatal = True
        items = tuple(texts(item, f"item {j + 1}") for j, item in enumerate(raw_items))
        _check_distinct(problems, where, "item", list(items), languages)
        q["items"] = items
        if explain is None:
            problems.append(f"{where}: ordering question needs explain")

    else:  # numeric
        ok, numeric = _parse_numeric(raw, where, problems, texts)
        fatal = fatal or not ok
        q.update(numeric)
        if explain is None:
            problems.append(f"{where}: numeric question needs explain")

    question = Question(
        id=qid, topic=str(topic), type=qtype, text=text, source=f"{file_topic}.yaml",
        faq=raw.get("faq") is True, explain=explain, see=see, **q,
    )
    if qtype == "numeric" and not fatal:
        fatal = not _check_numeric(question, where, problems, languages)
    return (None if fatal else question), problems


def _check_distinct(
    problems: list[str], where: str, what: str, texts: list[dict[str, str]], languages: tuple[str, ...]
) -> None:
    """Two identical options or items would make grading ambiguous."""
    for lang in languages:
        values = [t.get(lang, "").strip() for t in texts if t.get(lang)]
        if len(values) != len(set(values)):
            problems.append(f"{where}: two {what}s have the same {lang} text")


def _parse_numeric(
    raw: dict[str, Any], where: str, problems: list[str], texts: Callable[[Any, str], dict[str, str]]
) -> tuple[bool, dict[str, Any]]:
    ok = True
    params: dict[str, dict[str, Any]] = {}
    raw_params = raw.get("params") or {}
    if not isinstance(raw_params, dict):
        problems.append(f"{where}: params must be a mapping")
        raw_params, ok = {}, False
    for name, spec in raw_params.items():
        name = str(name)
        if not _NAME.match(name) or name in FUNCTIONS or name == "answer":
            problems.append(f"{where}: parameter name {name!r} not allowed")
            ok = False
        elif isinstance(spec, dict) and set(spec) == {"choices"}:
            choices = spec["choices"]
            if (
                not isinstance(choices, list)
                or not choices
                or not all(_is_number(c) and math.isfinite(c) for c in choices)
            ):
                problems.append(f"{where}: {name}.choices must be a non-empty list of numbers")
                ok = False
            else:
                params[name] = {"choices": list(choices)}
        elif isinstance(spec, dict) and set(spec) == {"min", "max"}:
            lo, hi = spec["min"], spec["max"]
            if not (isinstance(lo, int) and isinstance(hi, int)) or isinstance(lo, bool) or lo > hi:
                problems.append(
                    f"{where}: {name} needs integer min <= max (use choices for other values)"
                )
                ok = False
            else:
                params[name] = {"min": lo, "max": hi}
        else:
            problems.append(f"{where}: {name} must be {{choices: [...]}} or {{min: .., max: ..}}")
            ok = False

    answer = raw.get("answer")
    if isinstance(answer, int | float) and not isinstance(answer, bool):
        answer = repr(answer)  # a constant answer is a formula too
    if not isinstance(answer, str) or not answer.strip():
        problems.append(f"{where}: numeric question needs an answer formula")
        ok, answer = False, ""
    else:
        try:
            names = expression_names(parse_expression(answer))
        except ExpressionError as exc:
            problems.append(f"{where}: answer {answer!r}: {exc}")
            ok = False
        else:
            unknown = sorted(names - set(params))
            if unknown:
                problems.append(f"{where}: answer uses unknown names {', '.join(unknown)}")
                ok = False

    tolerance: dict[str, float] = {}
    raw_tol = raw.get("tolerance")
    if not isinstance(raw_tol, dict) or not raw_tol or set(raw_tol) - {"rel", "abs"}:
        problems.append(f"{where}: tolerance must be {{rel: x}} or {{abs: x}}")
        ok = False
    else:
        for key, value in raw_tol.items():
            if not _is_number(value) or not 0 <= value < math.inf:
                problems.append(f"{where}: tolerance {key} must be a number >= 0")
                ok = False
            else:
                tolerance[key] = float(value)
    unit = texts(raw["unit"], "unit") if raw.get("unit") is not None else None

    precision: dict[str, int] = {}
    raw_precision = raw.get("precision")
    if (
        not isinstance(raw_precision, dict)
        or len(raw_precision) != 1
        or next(iter(raw_precision)) not in PRECISIONS
        or not isinstance(next(iter(raw_precision.values())), int)
        or isinstance(next(iter(raw_precision.values())), bool)
        or not 0 <= next(iter(raw_precision.values())) <= 6
        or raw_precision.get("sig") == 0
    ):
        # Still gradable: the question stays in, the check fails.
        problems.append(f"{where}: precision must be {{sig: 1..6}} or {{decimals: 0..6}}")
    else:
        precision = {str(k): int(v) for k, v in raw_precision.items()}

    mistakes: list[Mistake] = []
    raw_mistakes = raw.get("mistakes")
    if not isinstance(raw_mistakes, list) or not raw_mistakes:
        problems.append(f"{where}: numeric question needs mistakes: a list of {{formula, label}}")
        raw_mistakes = []
    for j, m in enumerate(raw_mistakes):
        if (
            not isinstance(m, dict)
            or set(m) != {"formula", "label"}
            or not isinstance(m["formula"], str)
            or not isinstance(m["label"], str)
        ):
            problems.append(f"{where}: mistake {j + 1} must be {{formula: '...', label: '...'}}")
            continue
        try:
            names = expression_names(parse_expression(m["formula"]))
        except ExpressionError as exc:
            problems.append(f"{where}: mistake {m['label']!r}: {exc}")
            continue
        if names - set(params):
            problems.append(
                f"{where}: mistake {m['label']!r} uses unknown names {', '.join(sorted(names - set(params)))}"
            )
            continue
        mistakes.append(Mistake(formula=m["formula"], label=m["label"]))
    return ok, {
        "params": params, "answer": answer, "tolerance": tolerance, "unit": unit,
        "precision": precision, "mistakes": tuple(mistakes),
    }


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_numeric(
    question: Question, where: str, problems: list[str], languages: tuple[str, ...]
) -> bool:
    """Placeholders name parameters; the formula evaluates on many draws and
    the answer as we display it is accepted by the tolerance."""
    names = set(question.params)
    for what, texts, allowed in (
        ("text", question.text, names),
        ("explain", question.explain or {}, names | {"answer"}),
        ("unit", question.unit or {}, set()),
    ):
        for lang, text in texts.items():
            bad = sorted(set(PLACEHOLDER.findall(text)) - allowed)
            if bad:
                problems.append(f"{where}: {what}.{lang} has unknown placeholders {bad}")
    unused = sorted(names - set(PLACEHOLDER.findall(localized(question.text, "en"))))
    if unused:
        problems.append(f"{where}: text.en does not show parameters {unused}")

    shown_ok = rounded_ok = True
    caught: set[str] = set()
    for values in all_draws(question):
        try:
            expected = compute_answer(question, values)
        except ExpressionError as exc:
            problems.append(f"{where}: answer fails for {values}: {exc}")
            return False
        for lang in languages if shown_ok else ():
            shown = format_number(expected, lang)
            if not within_tolerance(parse_number(shown, lang), expected, question.tolerance):
                problems.append(
                    f"{where}: the displayed answer {shown!r} ({lang}) falls outside the "
                    f"tolerance for {values}; widen the tolerance"
                )
                shown_ok = False
        for rounded in round_to(expected, question.precision) if rounded_ok else ():
            if not within_tolerance(rounded, expected, question.tolerance):
                problems.append(
                    f"{where}: {rounded:g}, {expected:g} rounded to {question.precision}, is graded "
                    f"wrong for {values}; widen the tolerance or ask for more precision"
                )
                rounded_ok = False
        for mistake in question.mistakes:
            if mistake.label in caught:
                continue
            try:
                wrong = evaluate(_compiled(mistake.formula), values)
            except ExpressionError as exc:
                problems.append(f"{where}: mistake {mistake.label!r} fails for {values}: {exc}")
                caught.add(mistake.label)
                continue
            if any(
                within_tolerance(v, expected, question.tolerance)
                for v in [wrong, *round_to(wrong, question.precision)]
            ):
                problems.append(
                    f"{where}: mistake {mistake.label!r} ({wrong:g} for {expected:g}) would be "
                    f"graded correct for {values}"
                )
                caught.add(mistake.label)
    return True  # gradable, even where too strict or too lax
