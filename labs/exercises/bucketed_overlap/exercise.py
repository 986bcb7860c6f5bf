"""bucketed-overlap: a DDP of one's own, graded for equivalence, bucket count and overlap.

Trusted (never bound into the sandbox). The driver
(``runtime/drivers/bucketed_overlap.py``) trains a small MLP on each rank
with the learner's ``Bucketer(model, cap)``; the harness knows the order
and size in which backward produces the gradients (from its own single
process), the router records the all-reduces (bytes, whether made during
backward, when the rank began to wait for each) and the driver says when
backward ended. ``check`` needs no timing thresholds: the number of buckets
follows from the statement's rule applied to that order, and overlap is
the first all-reduce being made while backward runs and, for
``async_op=True``, waited for only after backward ended.

What rests on the rank's word: the bytes and the number of all-reduces
per step and the final weights are the router's and the harness's; the
two overlap facts (made inside backward, waited for after it) are hints
the rank's own process gives (``api.in_backward`` and the moment it
waits), which deliberately forged frames could fake. This exercise is
not among those a certificate requires (docs/contributors/grading.md).

The report's timeline (`trace`, never graded) draws the learner's
all-reduces as the router saw them and, `beside` them, torch DDP's on the
same model, world size and cap, which the grading side runs itself
(``labs.exercises.ddp_lanes``, once per machine and shape).
"""

from __future__ import annotations

import math

from labs import timeline
from labs.exercises import checks, ddp_lanes
from labs.exercises.average_gradients.exercise import params_finding

ID = "bucketed-overlap"
FUNCTION = "Bucketer"
DRIVER = "bucketed_overlap"
FORBID_COLLECTIVES = False  # the buckets go through all_reduce
ALLOWED = ("all_reduce", "get_rank", "get_world_size", "barrier")
CASE_SIZE = "batch"  # a case's shape is the global batch's inputs, samples x features (its label)

TOLERANCE = 1e-5  # float32, summed in another order than one process sums
# 1: smaller than any parameter (one bucket each); 100 and 400: a few
# parameters per bucket; 1 MiB: every gradient in one bucket, sent by finish().
CAPS = (1, 100, 400, 1 << 20)
TRACE_CASE = "w2-cap400"  # the case whose timeline the report draws: 2 ranks, a few buckets
TRACE_CALLS_PER_STEP = 32  # all-reduces drawn per rank and step, at most (the cap gives a handful)
# The traced case's model and batch: every other case trains a 6-16-16-3 MLP on 3 samples
# per rank, whose backward lasts microseconds, a pixel in the report's lanes beside
# all-reduces of a millisecond (journey review M3). This one's middle layer computes two
# 1024 x 128 x 128 matrix products in backward, milliseconds on a CPU core, and its 21 252
# parameters make five buckets at 400 bytes: the first starts as the middle layer's backward
# begins, so the lanes show it in flight beside a backward wider than the all-reduces.
TRACE_MODEL = {"features": 32, "hidden": 128, "classes": 4, "batch": 1024}


def cases(seed: int) -> list[dict]:
    batch, features = 3, 6
    out = []
    for world in (2, 3, 4):
        for i, cap in enumerate(CAPS):
            case = {"id": f"w{world}-cap{cap}", "world_size": world, "seed": seed + 10 * world + i, "cap": cap,
                    "dtype": "float32", "features": features, "hidden": 16, "classes": 3, "batch": batch,
                    "steps": 3, "lr": 0.5}
            if case["id"] == TRACE_CASE:
                case.update(TRACE_MODEL)
            # shape and dtype: the global batch's inputs (what the report shows as the case's size)
            out.append(dict(case, shape=[case["batch"] * world, case["features"]]))
    return out


def buckets(sizes: list[int], cap: int) -> int:
    """How many all-reduces the statement's rule makes for gradients of ``sizes`` bytes, in order."""
    count, open_bytes = 0, 0
    for size in sizes:
        open_bytes += size
        if open_bytes >= cap:
            count, open_bytes = count + 1, 0
    return count + (open_bytes > 0)


def steps(case: dict, entry: dict) -> list[dict]:
    """One rank's steps: ``{"ready", "calls", "backward_end"}`` each.

    ``ready`` (the order and size in which backward makes the gradients) is the
    harness's; ``calls`` are the router's all-reduces between the driver's step
    markers, each with its bytes, whether it was made inside backward and when
    the rank began to wait for it (``t_end``); ``backward_end`` is the driver's.
    """
    per_step: list[list[dict]] = []
    for call in entry["calls"]:
        if call["op"] == "step" or not per_step:
            per_step.append([])
        if call["op"] == "all_reduce":
            per_step[-1].append({"bytes": call["bytes"], "in_backward": bool(call.get("in_backward")),
                                 "t_end": call.get("t_wait")})
    per_step += [[] for _ in range(case["steps"] - len(per_step))]
    ends = [s.get("backward_end") for s in entry["result"]["steps"]]
    ends += [None] * (len(per_step) - len(ends))
    return [{"ready": entry["expected"]["ready"], "calls": calls, "backward_end": end}
            for calls, end in zip(per_step, ends, strict=False)]


def check(case: dict, ranks: list[dict]) -> list[dict]:
    ranks = [dict(entry, result=dict(entry["result"], steps=steps(case, entry))) for entry in ranks]
    findings = [params_finding(case, ranks, TOLERANCE, ok="bucket_matches_single", differ="bucket_weights_differ"),
                _calls_finding(case, ranks)]
    if any(buckets([size for _, size in step["ready"]], case["cap"]) > 1
           for step in ranks[0]["result"]["steps"]):
        findings.append(_overlap_finding(ranks))
    return findings


def _calls_finding(case: dict, ranks: list[dict]) -> dict:
    """All-reduces per step: as many as the rule gives, carrying every gradient's bytes once."""
    cap = case["cap"]
    for rank, entry in enumerate(ranks):
        for step, record in enumerate(entry["result"]["steps"]):
            sizes = [size for _, size in record["ready"]]
            calls, sent = len(record["calls"]), sum(c["bytes"] for c in record["calls"])
            where = {"rank": rank, "step": step + 1, "cap": cap}
            if sent != sum(sizes):
                return checks.failed("calls", "bucket_bytes_wrong", **where, sent=sent, total=sum(sizes))
            if calls != buckets(sizes, cap):
                return checks.failed("calls", "bucket_calls_wrong", **where, calls=calls, count=calls,
                                     expected=buckets(sizes, cap), sizes=", ".join(map(str, sizes)))
    calls = len(ranks[0]["result"]["steps"][0]["calls"])
    return {"check": "calls", "passed": True, "key": "bucket_calls_ok",
            "values": {"calls": calls, "count": calls, "cap": cap}}


def _overlap_finding(ranks: list[dict]) -> dict:
    """The first all-reduce of each step starts inside backward and is not waited for there."""
    for rank, entry in enumerate(ranks):
        for step, record in enumerate(entry["result"]["steps"]):
            calls, where = record["calls"], {"rank": rank, "step": step + 1}
            if not calls or not calls[0]["in_backward"]:
                return checks.failed("overlap", "bucket_no_overlap", **where, calls=len(calls))
            end = record["backward_end"]
            blocked = [c for c in calls if c["in_backward"] and c.get("t_end") is not None
                       and isinstance(end, float) and c["t_end"] <= end]
            if blocked:
                return checks.failed("overlap", "bucket_not_async", **where)
    return {"check": "overlap", "passed": True, "key": "bucket_overlap_ok", "values": {}}


def beside(case: dict) -> dict:
    """What the report draws beside the learner's timeline: torch DDP's on the traced case's
    model, world size and cap, made by the grading side (``labs.exercises.ddp_lanes``), never
    from anything a rank wrote (``{"ddp": None}`` when it could not be made)."""
    return {"ddp": ddp_lanes.lanes(case)}


def trace(case: dict, ranks: list[dict]) -> dict:
    """The learner's timeline of the traced case, for the report (never for the grade).

    Each all-reduce is the router's record, grouped into steps by the driver's
    step markers: from when the rank made the call (``t_rank``, the rank's
    clock reading, if it is no later than the router's receipt ``t_start``;
    else ``t_start``) to when the router had it from every rank (``t_end``). Forward, backward and the optimizer step are
    the rank's own clock readings (the driver's ``start``, ``forward_end``,
    ``backward_end``, ``finish_end``, ``step_end``): the rank's word, so a
    reading that is not a number is left out. Both clocks are the host's
    monotonic clock. Returns `labs.timeline.variant`'s figures and spans (ms,
    from the first span), with the case's sizes.
    """
    spans_of = []
    for entry in ranks:
        spans, step, drawn = [], -1, 0
        for call in entry["calls"]:
            if call["op"] == "step":
                step, drawn = step + 1, 0
            elif call["op"] == "all_reduce" and step >= 0 and drawn < TRACE_CALLS_PER_STEP:
                end = call["t_end"] if call.get("t_end") is not None else call["t_start"]
                made = call.get("t_rank")
                start = made if isinstance(made, float) and made <= call["t_start"] else call["t_start"]
                spans.append({"kind": "comm", "name": f"all_reduce {call['bytes']} B", "step": step,
                              "start_ms": start * 1e3, "end_ms": end * 1e3, "bytes": call["bytes"]})
                drawn += 1
        said_steps = entry["result"].get("steps") if isinstance(entry["result"], dict) else None
        for number, said in enumerate(said_steps[:case["steps"]] if isinstance(said_steps, list) else []):
            if not isinstance(said, dict):
                continue
            for name, start, end in (("forward", "start", "forward_end"),
                                     (timeline.BACKWARD, "forward_end", "backward_end"),
                                     ("optimizer", "finish_end", "step_end")):
                a, b = said.get(start), said.get(end)
                if isinstance(a, float) and isinstance(b, float) and math.isfinite(a) and math.isfinite(b):
                    spans.append({"kind": "compute", "name": name, "step": number,
                                  "start_ms": a * 1e3, "end_ms": b * 1e3})
        spans_of.append({"rank": entry["rank"], "spans": spans})
    calls = max((sum(1 for s in r["spans"] if s["kind"] == "comm" and s["step"] == 0) for r in spans_of),
                default=0)
    return {"kind": "timeline", "world_size": len(ranks), "cap_bytes": case["cap"], "hidden": case["hidden"],
            "steps": case["steps"], "learner": timeline.variant(timeline.rebase(spans_of), allreduce_calls=calls)}
