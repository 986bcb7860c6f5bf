"""save-and-resume: a training loop killed at a hidden step must resume as if nothing had happened.

Trusted (never bound into the sandbox). The driver
(``runtime/drivers/save_resume.py``) trains a small MLP with dropout, SGD with
momentum and a ``DistributedSampler`` on every rank, calls the learner's
``save_checkpoint`` every few steps and gives the router what it returns; the
harness kills every rank with SIGKILL at a hidden step and starts fresh
processes, which call the learner's ``load_checkpoint`` on their rank's last
checkpoint and train to the end (``runtime/harness.py``, ``_run_group``).

What the grade rests on, all of it outside the learner's processes:

- the samples: the router fed every batch (``fetch``) and recorded which
  rank drew which samples, in both lives; the batches the killed ranks drew
  before their last checkpoint, then those of the restarted ranks, must be
  exactly the batches of a run never killed: no sample twice, none skipped;
- the weights: every rank's final parameters against the harness's own run
  of the same loop for every rank, never killed, bit for bit.

Why bit for bit: on CPUs the same operations on the same numbers give the
same bits, and the harness replays exactly the ranks' operations, with the
router's own reduction. A restore that is right loses nothing, so any
difference is something not restored. Where that would not hold: on GPUs
(atomic adds in some kernels: a run does not repeat itself) or with a
different number of ranks (another summation order); there the check would
need a tolerance of a few ulps per step, and forgetting the random state
could hide inside it. Neither happens here.

The feedback names what was not restored: the sampler from where the
restarted ranks' first batch sits in the sampler's orders (the router's
record); the step from how many batches they drew; the model, the optimizer
and the random state from what the restarted rank says it holds after
``load_checkpoint`` (digests) beside what the checkpoint at that step holds
in the harness's run. That last is the rank's word, used for the message
only: a pass rests on the two checks above.

Not required for the certificate (docs/contributors/grading.md): it is the
first exercise graded across a restart, and the certificate's exercises are
the communication itself.
"""

from __future__ import annotations

import random
from collections import Counter

from labs.exercises import checks

ID = "save-and-resume"
FUNCTION = "save_checkpoint"
ALSO_FUNCTIONS = ("load_checkpoint",)  # both defined at the top level (grader.static_error)
DRIVER = "save_resume"
FORBID_COLLECTIVES = False  # the loop's all-reduce is the driver's; the learner's code needs none
ALLOWED = ("all_reduce", "get_rank", "get_world_size", "fetch", "checkpoint_put", "checkpoint_get")
PRELOAD = ("torch._dynamo",)  # SGD's first step imports it: once in the harness, not per rank
RESTARTS = True  # every case kills its ranks once: a fresh set per case (grader.shapes)
CASE_SIZE = "dataset"  # a case's shape is the data set the ranks draw from, samples x features (its label)

SAMPLES, BATCH, EVERY, STEPS = 48, 4, 3, 14
# (id, ranks, the steps the hidden kill is drawn from): a checkpoint every 3 steps, so each
# restart goes on in the middle of an epoch (2 ranks: 6 batches an epoch; 3 ranks: 4).
KILLS = (("w2-epoch0", 2, (4, 5)), ("w2-epoch1", 2, (10, 11)), ("w3-epoch1", 3, (7, 8)))


def cases(seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [{"id": name, "world_size": world, "seed": seed + 100 * i + world, "kill_step": rng.choice(steps),
             "steps": STEPS, "every": EVERY, "samples": SAMPLES, "features": 6, "hidden": 8, "classes": 3,
             "batch": BATCH, "lr": 0.2, "momentum": 0.9, "dropout": 0.5, "sampler_seed": rng.randrange(1 << 20),
             "shape": [SAMPLES, 6], "dtype": "float32"}
            for i, (name, world, steps) in enumerate(KILLS)]


def _fetched(calls: list[dict] | None, *, before_last_save: bool = False) -> list[list[int]]:
    """The batches the router fed a rank, in order; ``before_last_save``: only those it drew
    before its last checkpoint (what that checkpoint holds)."""
    calls = calls or []
    if before_last_save:
        saves = [i for i, c in enumerate(calls) if c["op"] == "checkpoint_put"]
        calls = calls[:saves[-1]] if saves else []
    return [list(c["indices"]) for c in calls if c["op"] == "fetch"]


def _batch(expected: dict, epoch: int, position: int) -> list[int] | None:
    orders, size = expected["orders"], len(expected["batches"][0])
    return orders[epoch][position * size:(position + 1) * size] if epoch < len(orders) else None


def _samples(case: dict, ranks: list[dict]) -> dict:
    """The batches every rank used for its final model, across the kill, against a run never killed."""
    resume = ranks[0]["expected"]["resume"]["step"]
    for r in ranks:
        exp, mine = r["expected"], _fetched(r["calls"])
        used = _fetched(r["calls_before"], before_last_save=True) + mine
        if used == exp["batches"]:
            continue
        counts = Counter(i for batch in used for i in batch)
        want = Counter(i for batch in exp["batches"] for i in batch)
        values = {"rank": r["rank"], "step": resume, "twice": sum((counts - want).values()),
                  "skipped": sum((want - counts).values())}
        started = case["steps"] - len(mine)
        if started != resume:
            return checks.failed("samples", "resume_step_lost", **values, got=started)
        epoch, position = exp["resume"]["epoch"], exp["resume"]["position"]
        first = mine[0] if mine else None
        values.update(epoch=epoch, position=position)
        if position and first == _batch(exp, epoch, 0):
            return checks.failed("samples", "resume_position_lost", **values)
        if epoch and first == _batch(exp, 0, position):
            return checks.failed("samples", "resume_epoch_lost", **values)
        if first == _batch(exp, 0, 0):
            return checks.failed("samples", "resume_sampler_lost", **values)
        return checks.failed("samples", "resume_samples_wrong", **values)
    return {"check": "samples", "passed": True, "key": "resume_samples_ok",
            "values": {"step": resume, "steps": case["steps"], "count": case["steps"] * case["batch"]}}


def _weights(case: dict, ranks: list[dict]) -> dict:
    """Every rank's final weights against the run never killed, bit for bit; when they differ,
    what the restarted rank holds after ``load_checkpoint`` beside what the checkpoint held."""
    resume = ranks[0]["expected"]["resume"]["step"]
    for r in ranks:
        want, got = r["expected"]["params"], r["result"]["params"]
        if got == want:
            continue
        diff = max((abs(a - b) for name in want for a, b in zip(got.get(name) or [], want[name], strict=False)),
                   default=float("inf"))
        values = {"rank": r["rank"], "step": resume, "diff": _short(diff)}
        said, held = r["result"].get("restored") or {}, r["expected"]["resume"]
        for part in ("model", "optimizer", "rng"):
            if said.get(part) != held[part]:
                return checks.failed("weights", f"resume_{part}_lost", **values)
        return checks.failed("weights", "resume_weights_differ", **values)
    return {"check": "weights", "passed": True, "key": "resume_weights_ok",
            "values": {"step": resume, "steps": case["steps"], "world_size": case["world_size"]}}


def _short(x: float) -> float | str:
    return "inf" if x == float("inf") else float(f"{x:.2g}")


def check(case: dict, ranks: list[dict]) -> list[dict]:
    return [_samples(case, ranks), _weights(case, ranks)]
