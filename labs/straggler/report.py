"""The straggler lab's report, typed: what ``labs.straggler.lab.summarize`` builds and the page reads.

Beside the lab that produces it (``labs.reports`` holds the shared parts, and
`labs.reports.read` finds this one through the lab's ``SUMMARY``). No torch.
"""

from __future__ import annotations

from labs.reports import Quartiles, Spread, Variant, _Model


class StragglerVariant(_Model):
    """One way to train with one rank slowed, as the ranks measured it (``labs.straggler.rank``)."""

    name: str  # "even" (nobody slowed), "slow" (synchronous DDP), "local_sgd" (post-local SGD)
    factor: float  # how many times slower the slow rank was asked to compute
    step_ms: Quartiles  # time per step over every measured step (or period / H) of every seed
    model_ms: Spread  # the model's step over the seeds: slowest rank's own time + all-reduce (/ H)
    allreduce_ms: Spread | None = None  # the all-reduce as the last rank to arrive saw it, over the seeds
    compute_ms: list[float]  # per rank: median compute per step (forward, backward, optimizer)
    own_ms: list[float]  # per rank: median time per step outside all-reduces (compute and overhead)
    wait_ms: list[float]  # per rank: median time per step inside the all-reduce beyond its own cost
    throughput: Spread  # samples per second over the seeds
    loss: Spread  # the final model's loss on the whole data set, over the seeds
    timeline: Variant  # the first seed's last steps (or last period), every rank on one clock


class StragglerSummary(_Model):
    world_size: int
    backend: str = "gloo"
    factor: int
    slow_rank: int
    mechanism: str  # what slowed the rank: "cgroup" (a CPU quota) or "stop" (SIGSTOP/SIGCONT)
    period: int  # local SGD: the models are averaged every ``period`` steps
    steps: int  # measured steps per variant and seed (whole periods)
    seeds: int
    batch_per_rank: int
    allreduce_ms: Spread  # one all-reduce of the gradients when nobody is slowed and nobody waits, over the seeds
    achieved: Spread  # the slow rank's compute, slowed over even, over the seeds
    variants: dict[str, StragglerVariant]
    lost: Spread  # throughput of the slowed synchronous run as a share of the even one
    recovered: Spread  # throughput of local SGD over the slowed synchronous run's, minus 1
    loss_paid: Spread  # local SGD's final loss minus the synchronous run's, seed by seed
    same_weights: bool  # the slowed synchronous run ended with the even run's weights, bit for bit
    model_error: float  # measured / model - 1 of the slowed synchronous step (median over seeds)
