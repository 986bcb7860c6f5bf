"""One slow rank: synchronous DDP waits for it every step; local SGD waits for it once a period.

Launch:

    python -m labs straggler --world-size 2                      # rank 1 three times slower, ~10-20 s
    python -m labs straggler --world-size 3 --factor 4 --slow-rank 2 --period 8
    python -m labs straggler --world-size 2 --method stop --json
    torchrun --standalone --nproc-per-node 2 -m labs.straggler

Rank ``slow_rank`` gets 1/``factor`` of a CPU core (``labs.straggler.throttle``:
a cgroup CPU quota where the rank may make one, else SIGSTOP/SIGCONT from a
helper it starts; ``mechanism`` in the summary says which). For each of
``seeds`` seeds (data and initial weights) the ranks train the same MLP on the
same batches three ways, ``steps`` measured steps each after ``warmup``:

- ``even``: DDP, nobody slowed: each rank's compute and the all-reduce's own
  time when nobody waits (the fastest rank's all-reduce span, step by step);
- ``slow``: DDP with the slow rank slowed. Every step ends with one
  all-reduce of the gradients (one bucket: this MLP is far under DDP's
  25 MiB cap), which completes only when the slow rank joins it, so the
  others wait inside it. The model: step = the slowest rank's own time (its
  compute and the loop's overhead: everything but its waiting) + the
  all-reduce as the last rank to arrive sees it, waiting for nobody (on a
  throttled rank longer than in ``even``: its share of the reduction is
  slowed too) (``labs.ddp.timeline.record`` times each rank's forward,
  backward, all-reduce and optimizer on one clock);
- ``local_sgd``: torch's post-local SGD: DDP's gradient all-reduce switched
  off after the warm-up (``post_localSGD_hook`` with
  ``post_local_gradient_allreduce=False``) and the models averaged every
  ``period`` steps (``PeriodicModelAverager``). The slow rank still computes
  ``factor`` times longer, so the others still wait for it, but once per
  period: step = the slowest rank's own time + the all-reduce / period. It
  recovers the communication, not the slowness, and pays in loss (the models
  drift apart between averages).

Every time is the median over all measured steps and seeds with its
quartiles; throughput, loss and the model over the seeds (median, min,
max). This module imports no torch; the ranks run ``labs.straggler.rank``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from labs import reports
from labs import timeline as spans_math
from labs.params import Page, ParamError, dataclass, option
from labs.straggler import report
from labs.straggler.throttle import METHODS

VARIANTS = ("even", "slow", "local_sgd")
RANK_MODULE = "labs.straggler.rank"  # what the ranks import, torch and all
SUMMARY = report.StragglerSummary  # what the pages read of the summary
DEFAULT_WORLD_SIZE = 2  # a core per rank on a 2-core machine: the quota then binds as asked
MAX_WORLD_SIZE = 4  # its timelines draw every rank: 2 to 4 keep them readable (and the report small)


@dataclass
class Params:
    factor: int = option(3, key="straggler.factor", help="how many times slower the slow rank computes",
                         low=1, high=10, page=Page(widget="slider", low=1, high=6, default=3))
    slow_rank: int = option(1, key="straggler.slow_rank", help="the rank that is slowed", low=0,
                            page=Page(widget="number", high=7, default=1))
    method: str = option("auto", key="straggler.method", choices=METHODS, labels="straggler.method_",
                         help="how: a cgroup CPU quota, SIGSTOP/SIGCONT (stop), or auto (cgroup where "
                              "it can be made, else stop)", page=Page())
    period: int = option(4, key="straggler.period", help="local SGD: average the models every H steps",
                         low=2, high=32, page=Page(widget="slider", low=2, high=8, default=4))
    steps: int = option(12, key="labs.steps", help="measured steps per variant and seed (rounded up to "
                        "whole periods)", low=2, high=200, page=Page(widget="slider", low=4, high=24, default=12))
    warmup: int = option(2, help="steps before the measured ones (post-local SGD's synchronous start)", low=1)
    seeds: int = option(3, key="straggler.seeds", help="seeds (data and initial weights): the spread of "
                        "throughput and loss", low=1, high=10, page=Page(widget="slider", low=1, high=5, default=3))
    samples: int = option(4096, help="samples in the synthetic data set", low=1)
    features: int = option(32, help="input features", low=1)
    classes: int = option(4, help="classes to tell apart", low=1)
    hidden: int = option(256, help="MLP width (a step long enough to slow down on a CPU core)", low=1)
    depth: int = option(3, help="hidden layers", low=1)
    batch: int = option(256, help="samples per rank per step", low=1)
    lr: float = option(0.05, help="learning rate (> 0)")
    seed: int = option(0, help="the first seed; seed i is seed + i")

    def __post_init__(self) -> None:
        if self.lr <= 0:
            raise ValueError("need lr > 0")

    @property
    def measured(self) -> int:
        """The measured steps: ``steps`` rounded up to whole periods, the same for every variant."""
        return -(-self.steps // self.period) * self.period


def check(params: Params, world_size: int) -> None:
    if not 2 <= world_size <= MAX_WORLD_SIZE:
        raise ParamError("world_size", "world_between", f"the straggler lab runs on 2 to {MAX_WORLD_SIZE} ranks "
                         f"(a straggler needs others to wait for it), not {world_size}", low=2, high=MAX_WORLD_SIZE)
    if params.slow_rank >= world_size:
        raise ParamError("slow_rank", "rank", f"slow rank {params.slow_rank} is not a rank of {world_size}",
                         high=world_size - 1)
    if params.samples < world_size * params.batch:
        raise ValueError(f"{params.samples} samples cannot fill a batch of {params.batch} on each of "
                         f"{world_size} ranks")


# --------------------------------------------------------------------------
# The arithmetic, on what the ranks recorded (no processes needed: tests/test_labs_straggler.py)
#
# Each rank returns, per seed and variant, one row per measured step:
# [start_ms, end_ms, compute_ms, comm_ms] on the ranks' shared clock (start: its forward
# began; end: its step ended; compute: forward + backward + optimizer; comm: its time in
# all-reduces, the models' average under local SGD), the final loss, the weights' digest,
# and for the first seed the spans of its last steps.


def spread(values: Sequence[float]) -> reports.Spread:
    return reports.Spread(median=statistics.median(values), min=min(values), max=max(values))


def quartiles(values: Sequence[float]) -> reports.Quartiles:
    ordered = sorted(values)
    if len(ordered) > 1:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    return reports.Quartiles(median=statistics.median(ordered), q1=q1, q3=q3, k=len(ordered))


def sync_points(steps: Sequence[Sequence[Sequence[float]]], every: int) -> list[float]:
    """Time per step between the points where every rank has finished a sync (ms).

    ``steps``: per rank, its rows. A sync point is the end of every ``every``-th step
    (1: every step; local SGD: every period); its time is the last rank's end. The
    first interval starts at the first rank's first start. Each interval is divided
    by the steps it holds."""
    n = len(steps[0])
    ends = [max(rank[i][1] for rank in steps) for i in range(every - 1, n, every)]
    starts = [min(rank[0][0] for rank in steps), *ends[:-1]]
    return [(end - start) / every for start, end in zip(starts, ends, strict=True)]


def allreduce_ms(steps: Sequence[Sequence[Sequence[float]]], every: int = 1) -> float:
    """The all-reduce's own time as the rank that arrives last sees it (it waits for nobody):
    at each sync (every ``every``-th step) the shortest all-reduce of any rank, the median
    over the syncs. On a throttled rank that is longer than when nobody is slowed: its part
    of the reduction (copies, sums, the socket) runs at its speed too."""
    n = len(steps[0])
    return statistics.median(min(rank[i][3] for rank in steps) for i in range(every - 1, n, every))


def own_ms(rows: Sequence[Sequence[float]]) -> float:
    """A rank's own time per step: from one step's start to the next one's, less its time
    inside all-reduces (the last step: its start to its end); the median over the steps.
    Its compute and everything else it does between two steps, none of its waiting."""
    starts = [row[0] for row in rows]
    spans = [b - a for a, b in zip(starts, starts[1:], strict=False)] + [rows[-1][1] - rows[-1][0]]
    return statistics.median(span - row[3] for span, row in zip(spans, rows, strict=True))


def figures(steps: Sequence[Sequence[Sequence[float]]], *, every: int, allreduce: float,
            world_size: int, batch: int) -> dict:
    """One variant of one seed: per-step times, compute, own time and waiting per rank, the
    model (the slowest rank's own time + the all-reduce, once per ``every`` steps), throughput."""
    n = len(steps[0])
    compute = [statistics.median(row[2] for row in rank) for rank in steps]
    own = [own_ms(rank) for rank in steps]
    syncs = n // every
    wait = [max(0.0, (sum(row[3] for row in rank) - syncs * allreduce) / n) for rank in steps]
    wall_ms = max(rank[-1][1] for rank in steps) - min(rank[0][0] for rank in steps)
    return {"times": sync_points(steps, every), "compute": compute, "own": own, "wait": wait,
            "allreduce": allreduce, "model": max(own) + allreduce / every,
            "throughput": world_size * batch * n / (wall_ms / 1e3)}


def summarize(params: Params, ranks: list[dict], *, world_size: int, backend: str) -> report.StragglerSummary:
    ranks = sorted(ranks, key=lambda r: r["rank"])
    every = {"even": 1, "slow": 1, "local_sgd": params.period}
    per_seed = []  # per seed: {variant: figures}
    allreduce = []
    for s in range(params.seeds):
        rows = {v: [r["seeds"][s][v]["steps"] for r in ranks] for v in VARIANTS}
        allreduce.append(allreduce_ms(rows["even"]))
        per_seed.append({v: figures(rows[v], every=every[v], allreduce=allreduce_ms(rows[v], every[v]),
                                    world_size=world_size, batch=params.batch) for v in VARIANTS})
    rank0 = ranks[0]["seeds"]  # rank 0 reports the loss and the weights' digest
    variants = {}
    for v in VARIANTS:
        shown = spans_math.rebase([{"rank": r["rank"], "spans": r["seeds"][0][v]["spans"]} for r in ranks])
        timeline = spans_math.variant(shown, allreduce_calls=1, bucket_cap_mb=None)
        variants[v] = report.StragglerVariant(
            name=v, factor=1 if v == "even" else params.factor,
            step_ms=quartiles([t for seed in per_seed for t in seed[v]["times"]]),
            model_ms=spread([seed[v]["model"] for seed in per_seed]),
            compute_ms=[statistics.median(seed[v]["compute"][r] for seed in per_seed) for r in range(world_size)],
            own_ms=[statistics.median(seed[v]["own"][r] for seed in per_seed) for r in range(world_size)],
            allreduce_ms=spread([seed[v]["allreduce"] for seed in per_seed]),
            wait_ms=[statistics.median(seed[v]["wait"][r] for seed in per_seed) for r in range(world_size)],
            throughput=spread([seed[v]["throughput"] for seed in per_seed]),
            loss=spread([rank0[s][v]["loss"] for s in range(params.seeds)]),
            timeline=reports.Variant.model_validate(timeline))
    slow = params.slow_rank
    median = statistics.median
    return report.StragglerSummary(
        world_size=world_size, backend=backend, factor=params.factor, slow_rank=slow,
        mechanism=ranks[slow]["mechanism"], period=params.period, steps=params.measured,
        seeds=params.seeds, batch_per_rank=params.batch, allreduce_ms=spread(allreduce),
        achieved=spread([seed["slow"]["compute"][slow] / seed["even"]["compute"][slow] for seed in per_seed]),
        variants=variants,
        lost=spread([seed["slow"]["throughput"] / seed["even"]["throughput"] for seed in per_seed]),
        recovered=spread([seed["local_sgd"]["throughput"] / seed["slow"]["throughput"] - 1 for seed in per_seed]),
        loss_paid=spread([rank0[s]["local_sgd"]["loss"] - rank0[s]["slow"]["loss"] for s in range(params.seeds)]),
        same_weights=all(rank0[s]["even"]["weights"] == rank0[s]["slow"]["weights"] for s in range(params.seeds)),
        model_error=median(median(seed["slow"]["times"]) / seed["slow"]["model"] - 1 for seed in per_seed))


def format_text(summary: dict) -> str:
    s = report.StragglerSummary.model_validate(summary)
    v = s.variants
    how = {"cgroup": "a cgroup CPU quota", "stop": "SIGSTOP/SIGCONT"}.get(s.mechanism, s.mechanism)
    lines = [f"straggler lab: {s.world_size} ranks ({s.backend}), rank {s.slow_rank} given 1/{s.factor} of a "
             f"core by {how} (its compute took {s.achieved.median:.2f}x as long, {s.achieved.min:.2f}.."
             f"{s.achieved.max:.2f}); {s.steps} steps x {s.seeds} seeds, {s.batch_per_rank} samples per rank",
             f"all-reduce when nobody waits: {s.allreduce_ms.median:.2f} ms",
             "variant     step ms (IQR)            model ms   samples/s        final loss   waits per step (ms, by rank)"]
    for name in ("even", "slow", "local_sgd"):
        x = v[name]
        wait = ", ".join(f"{w:.2f}" for w in x.wait_ms)
        lines.append(f"  {name:<9} {x.step_ms.median:7.2f} ({x.step_ms.q1:.2f}..{x.step_ms.q3:.2f})  "
                     f"{x.model_ms.median:8.2f}   {x.throughput.median:9.0f}   {x.loss.median:10.4f}   {wait}")
    lines += [f"slowed synchronous step is {s.model_error:+.1%} off the model (slowest rank's own time + "
              f"all-reduce); "
              f"it kept {s.lost.median:.0%} of the even throughput",
              f"local SGD (average every {s.period} steps) recovered {s.recovered.median:+.1%} of throughput "
              f"({s.recovered.min:+.1%}..{s.recovered.max:+.1%}) and paid {s.loss_paid.median:+.4f} in loss "
              f"({s.loss_paid.min:+.4f}..{s.loss_paid.max:+.4f})",
              f"slowing a rank changed the time, not the weights: {'same' if s.same_weights else 'DIFFERENT'} "
              "weights as the even run, bit for bit"]
    return "\n".join(lines)
