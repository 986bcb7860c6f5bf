"""The answer formulas of numeric questions, and the parameter draws they run on.

A numeric question's answer and its ``mistakes`` are formulas over the drawn
parameters (``quizzes/README.md``). They are parsed with ``ast`` and walked by
a tiny evaluator that knows numbers, the parameter names, ``+ - * / **`` and
the functions min, max, round, log2 and sqrt: nothing from the bank is ever
handed to ``eval``. ``quizzes.bank`` validates formulas with it, the engine
grades with it, and ``python -m quizzes check`` runs it on every draw.
"""

from __future__ import annotations

import ast
import math
import operator
import random
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

# `check` evaluates every parameter draw when there are at most ALL_DRAWS of
# them, else CHECK_DRAWS seeded ones.
ALL_DRAWS = 20_000
CHECK_DRAWS = 2_000

# The functions below that take a question take a ``quizzes.bank`` question model
# (typed Any: importing the bank here would make the two modules import each other).


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
def compiled(source: str) -> ast.expr:
    """``parse_expression``, once per formula text."""
    return parse_expression(source)


def compute_answer(question: Any, params: Mapping[str, float]) -> float:
    """The expected value of a numeric question (``quizzes.bank.NumericQuestion``)
    for drawn parameter values."""
    return evaluate(compiled(question.answer), params)


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


def all_draws(question: Any) -> list[dict[str, float]]:
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


def draw_params(question: Any, rng: random.Random) -> dict[str, float]:
    """Draw one value per parameter, in the order the bank lists them."""
    values: dict[str, float] = {}
    for name, spec in question.params.items():
        if "choices" in spec:
            values[name] = rng.choice(list(spec["choices"]))
        else:
            values[name] = rng.randint(int(spec["min"]), int(spec["max"]))
    return values
