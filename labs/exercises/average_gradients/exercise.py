"""average-gradients: N ranks must train exactly like one process on the global batch.

Trusted (never bound into the sandbox). The driver
(``runtime/drivers/average_gradients.py``) trains a small model on each
rank's shard, calling the learner's ``average_gradients(model)`` after every
backward, and returns the parameters at the end and the gradients after the
first call; in the harness, which runs no learner code, the same model is
trained in one process on the whole global batch. ``check`` compares the two and, when they differ, says
why: a sum not divided by the number of ranks, a parameter left with its
local gradient, a gradient removed, or just how far off it is.
"""

from __future__ import annotations

import math

from labs.exercises import checks

ID = "average-gradients"
FUNCTION = "average_gradients"
DRIVER = "average_gradients"
FORBID_COLLECTIVES = False  # averaging is what all_reduce is for
ALLOWED = ("all_reduce", "get_rank", "get_world_size", "barrier")
CASE_SIZE = "batch"  # a case's shape is the global batch's inputs, samples x features (its label)

# Largest |difference| accepted, per dtype: float32 sums in another order
# than the single process does, float64 barely differs.
TOLERANCE = {"float32": 1e-5, "float64": 1e-10}


def cases(seed: int) -> list[dict]:
    """Every world size with a plain model and one whose spare layer gets no gradient; float64 once."""
    out = []
    for world in (2, 3, 4):
        for unused in (False, True):
            out.append(_case(seed, world, unused, "float32"))
    out.append(_case(seed, 2, False, "float64"))
    return out


def _case(seed: int, world: int, unused: bool, dtype: str) -> dict:
    name = f"w{world}-{'unused-param' if unused else 'mlp'}-{dtype}"
    # Large enough that what a rank needs of the others, their inputs (8 KiB each in float32)
    # or their gradients (10 KiB), cannot cross the covert channels the sandbox leaves between
    # ranks (docs/contributors/sandbox.md, some 1,000 bit/s at the most measured) in a case's
    # 5 s: only as the payload of the all-reduces the router counts.
    batch, features, hidden = 128, 16, 128
    # shape: the global batch's inputs (what the report shows as the case's size)
    return {"id": name, "world_size": world, "seed": seed + 100 * world + 10 * unused + len(dtype),
            "dtype": dtype, "shape": [batch * world, features], "unused": unused,
            "features": features, "hidden": hidden, "classes": 3, "batch": batch, "steps": 3, "lr": 0.5}


def _max_diff(a: list[float], b: list[float], scale: float = 1.0) -> float:
    return max((abs(x - scale * y) for x, y in zip(a, b, strict=True)), default=0.0)


def check(case: dict, ranks: list[dict]) -> list[dict]:
    world, tol = case["world_size"], TOLERANCE[case["dtype"]]
    return [_grads_finding(ranks, world, tol),
            params_finding(case, ranks, tol, ok="avg_matches_single", differ="avg_weights_differ")]


def _grads_finding(ranks: list[dict], world: int, tol: float) -> dict:
    """The first rank and parameter whose gradient after the first call is not the mean, and why."""
    for rank, entry in enumerate(ranks):
        expected, got = entry["expected"], entry["result"]["grads"]
        for name, mean in expected["grads"].items():
            if mean is None:  # no gradient in backward: None or zeros are both fine
                continue
            mine = got.get(name)
            values = {"rank": rank, "param": name, "world_size": world, "tolerance": tol}
            if mine is None or len(mine) != len(mean):
                return checks.failed("grads", "avg_grad_removed", **values)
            diff = _max_diff(mine, mean)
            if diff <= tol:
                continue
            if _max_diff(mine, mean, world) <= tol * world:
                return checks.failed("grads", "avg_summed_not_divided", **values)
            if _max_diff(mine, expected["local_grads"][name]) <= tol:
                return checks.failed("grads", "avg_param_missed", **values)
            return checks.failed("grads", "avg_grad_wrong", **values, diff=short(diff))
    return {"check": "grads", "passed": True, "key": "avg_grads_match", "values": {"world_size": world}}


def params_finding(case: dict, ranks: list[dict], tolerance: float, *, ok: str, differ: str) -> dict:
    """Every rank's final parameters against the single process's: a pass, or the first rank off.

    Shared with bucketed-overlap, whose learners train the same way and are
    held to the same result; ``ok`` and ``differ`` are each exercise's keys.
    """
    largest = 0.0
    values = {"steps": case["steps"], "global_batch": case["batch"] * case["world_size"],
              "tolerance": tolerance}
    for rank, entry in enumerate(ranks):
        single, mine = entry["expected"]["params"], entry["result"]["params"]
        diffs = {name: _max_diff(mine[name], ref) if len(mine.get(name) or ()) == len(ref) else math.inf
                 for name, ref in single.items()}
        name = max(diffs, key=diffs.get)
        if diffs[name] > tolerance:
            return checks.failed("params", differ, **values, rank=rank, param=name, diff=short(diffs[name]))
        largest = max(largest, diffs[name])
    return {"check": "params", "passed": True, "key": ok, "values": {**values, "diff": short(largest)}}


def short(x: float) -> float | str:
    """A difference as the feedback shows it: two significant digits, still a number (the
    page writes it in the reader's marks); "inf" for no match at all (JSON has no infinity)."""
    return "inf" if x == math.inf else float(f"{x:.2g}")
