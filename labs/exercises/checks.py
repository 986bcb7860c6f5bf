"""Checks shared by the tensor exercises: shape, dtype, in place, values against the built-in.

Each check looks at every rank of one case and returns one finding, the
first rank that fails it or a pass: ``{"check", "passed", "key", "values"}``,
where ``key`` names a message in ``content/exercises/<lang>/`` and
``values`` fills its placeholders. ``ranks`` are the harness's replies for
a case that finished on every rank: ``{"rank", "expected", "result",
"sent", "received", "calls"}``. ``expected`` was computed in the harness,
``result`` is what the learner's process returned, and ``sent``,
``received`` (payload bytes) and ``calls`` are the router's record of that
rank's calls, made outside the learner's process
(``runtime/router.py``): the learner's code cannot set them.
"""

from __future__ import annotations

import math

EPS = {"float32": 2.0 ** -23, "float64": 2.0 ** -52, "bfloat16": 2.0 ** -7}


def passed(check: str, **values) -> dict:
    return {"check": check, "passed": True, "key": f"{check}_ok", "values": values}


def failed(check: str, key: str, **values) -> dict:
    return {"check": check, "passed": False, "key": key, "values": values}


def shape_and_dtype(case: dict, ranks: list[dict]) -> list[dict]:
    """The tensor keeps its shape and its element type on every rank."""
    shape, dtype = list(case["shape"]), case["dtype"]
    bad = next((r for r in ranks if r["result"]["shape"] != shape), None)
    findings = [passed("shape") if bad is None else
                failed("shape", "shape_changed", rank=bad["rank"], expected=_show(shape),
                       got=_show(bad["result"]["shape"]))]
    bad = next((r for r in ranks if r["result"]["dtype"] != dtype), None)
    findings.append(passed("dtype") if bad is None else
                    failed("dtype", "dtype_changed", rank=bad["rank"], expected=dtype, got=bad["result"]["dtype"]))
    return findings


def in_place(case: dict, ranks: list[dict]) -> dict:
    """The tensor passed in holds the result in its own memory (not a new tensor, not ``.data =``)."""
    for r in ranks:
        res = r["result"]
        if res.get("returned") is not None and _wrong(case, len(ranks), res["values"], r["expected"]) \
                and not _wrong(case, len(ranks), res["returned"]["values"], r["expected"]):
            return failed("in_place", "returned_new_tensor", rank=r["rank"])
        if not res["same_storage"]:
            return failed("in_place", "not_in_place", rank=r["rank"])
    return passed("in_place")


def tolerance(case: dict, world: int, abs_sum: float) -> float:
    """How far a correct sum may be from gloo's: summing n numbers in another order moves
    it by at most about (n-1) eps sum|x_i|; we allow 2n of that (as ``labs.ring``). Integers: exact."""
    eps = EPS.get(case["dtype"])
    return 0.0 if eps is None else 2 * world * eps * abs_sum


def values(case: dict, ranks: list[dict], *, exact: bool = False) -> dict:
    """Every element on every rank against the built-in collective's result."""
    for r in ranks:
        got, want = r["result"]["values"], r["expected"]["values"]
        if len(got) != len(want):
            return failed("values", "values_count", rank=r["rank"], expected=len(want), got=len(got))
        wrong = _wrong(case, len(ranks), got, r["expected"], exact=exact)
        if wrong:
            i = wrong[0]
            return failed("values", "values_wrong", rank=r["rank"], wrong=len(wrong), total=len(want),
                          index=i, expected=_num(want[i]), got=_num(got[i]))
    return passed("values")


def _wrong(case: dict, world: int, got: list, expected: dict, *, exact: bool = False) -> list[int]:
    """Indices of the elements of ``got`` that are not the expected values (all, if the count differs)."""
    want = expected["values"]
    if len(got) != len(want):
        return list(range(max(len(got), len(want))))
    sums = expected.get("abs_sum") or [0.0] * len(want)
    wrong = []
    for i, (g, w, s) in enumerate(zip(got, want, sums, strict=True)):
        tol = 0.0 if exact else tolerance(case, world, s)
        if not (isinstance(g, int | float) and math.isfinite(g) and abs(g - w) <= tol):
            wrong.append(i)
    return wrong


def _num(x):
    """A value for a message: a float to 6 significant digits (still a number, so the page
    writes it with the reader's decimal mark), anything else as it is."""
    return float(f"{x:.6g}") if isinstance(x, float) and math.isfinite(x) else x if isinstance(x, int) else str(x)


def _show(x) -> str:
    return "x".join(map(str, x)) if isinstance(x, list) else str(x)


def size_bytes(case: dict) -> int:
    return math.prod(case["shape"]) * {"float32": 4, "float64": 8, "int64": 8, "bfloat16": 2}[case["dtype"]]
