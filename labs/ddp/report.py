"""The DDP lab's report, typed: what ``labs.ddp.lab.summarize`` builds, the page and the text read.

Beside the lab that produces it (``labs.reports`` holds the shared parts, and
`labs.reports.read` finds this one through the lab's ``SUMMARY``). Every field
a run writes is declared, so that the stored JSON is what the ranks wrote: a
section the run did not ask for and a span's key the ranks did not write stay
out (`_Sparse`), a whole number the ranks counted stays one (``Bytes``), and
the keys keep the ranks' order. Fields older runs lack are optional, with the
value the page assumed. No torch.
"""

from __future__ import annotations

from typing import Any

from pydantic import field_validator, model_serializer

from labs.reports import Bytes, Fit, Span, _Model


class _Sparse(_Model):
    """A model stored without the fields that are None: the keys its producer left out stay out."""

    @model_serializer(mode="wrap")
    def _without_none(self, handler: Any) -> dict[str, Any]:
        return {key: value for key, value in handler(self).items() if value is not None}


class Equivalence(_Model):
    steps: int | None = None
    batch_per_rank: int
    global_batch: int
    max_abs_diff_vs_single_process: float
    tolerance: float
    equivalent: bool
    max_abs_diff_between_ranks: float | None = None
    ranks_identical: bool
    losses: list[float]
    single_process_losses: list[float]


class StepSpread(_Model):
    """Per-step samples in ms (``labs.ddp.setup.spread_ms``): median, quartiles, min, max, how many."""

    median: float
    q1: float
    q3: float
    min: float | None = None  # older runs: not said
    max: float | None = None
    k: int


class Saving(_Model):
    ms: StepSpread
    calls_before: int
    calls_after: int
    per_call_ms: float | None = None


class Hidden(_Model):
    ms: StepSpread
    backward_ms: StepSpread
    buckets: int


class Breakdown(_Model):
    unit: str = "ms (median step, slowest rank)"
    steps: int
    hidden: int | None = None  # the overlap model's (older runs: the lab's small MLP, not said)
    depth: int | None = None
    batch_per_rank: int | None = None
    parameters: int | None = None
    gradient_bytes: Bytes | None = None
    tensors: int | None = None  # parameter tensors: the naive sync's all-reduces
    bucket_cap_mb: float
    buckets: int | None = None
    naive: dict[str, int | float]  # ms per part and the all-reduce calls, for app.charts.breakdown_figure
    bucketed: dict[str, int | float]
    ddp: dict[str, int | float]
    bucketing_saving: Saving
    overlap_hidden: Hidden
    max_abs_diff_naive_vs_ddp_weights: float | None = None


class DdpSpan(Span, _Sparse):
    """A span as the DDP lab stores it: a byte count as the rank counted it, no key it did not write."""

    bytes: Bytes | None = None


class DdpLaneRank(_Model):
    """A rank's lane as the DDP lab stores it (``labs.timeline.variant``'s whole output)."""

    rank: int
    spans: list[DdpSpan]
    exposed_comm_ms: float | None = None  # per step
    idle_ms: float
    comm_ms: float | None = None


class DdpVariant(_Model):
    """A `Variant` as the DDP lab stores it: ``labs.timeline.variant``'s whole output, in its order."""

    overlap: float
    overlap_steps: list[float] = []
    exposed_comm_ms: float
    comm_ms: float | None = None
    steps: int | None = None  # steps the figures are per
    bucket_cap_mb: float | None = None  # None: the naive sync
    allreduce_calls: int | None = None
    ranks: list[DdpLaneRank]

    def plain(self) -> dict[str, Any]:
        """The variant as ``labs.timeline``'s arithmetic reads it (spans as dicts)."""
        return self.model_dump(exclude_none=True)


class Cap(_Model):
    bucket_cap_mb: float
    variant: str


class TimelineFit(Fit):
    """The fit of dist.all_reduce alone (``labs.ddp.timeline.calibrate``), with what it was fitted to."""

    sizes: list[int] | None = None
    time_us: list[float] | None = None  # the median time at each size


class Timeline(_Model):
    variants: dict[str, DdpVariant]
    steps: int
    hidden: int
    depth: int | None = None  # older runs: the lab's depth, not said
    batch_per_rank: int
    parameters: int | None = None
    gradient_bytes: Bytes = 0.0
    caps: list[Cap]
    fit: TimelineFit | None = None  # dist.all_reduce alone, timed by this run (older runs: none)
    clock: str | None = None


class BucketRow(_Model):
    bucket_cap_mb: float
    allreduce_calls_per_step: int
    bytes_per_step: Bytes | None = None
    step_ms: float


class Buckets(_Model):
    rows: list[BucketRow]
    default_bucket_cap_mb: int | float | None = None  # torch's
    first_bucket_bytes: Bytes | None = None


class SyncCost(_Model):
    allreduce_calls_per_optimizer_step: int
    bytes_per_optimizer_step: Bytes
    optimizer_step_ms: float | None = None


class NoSync(_Model):
    micro_batches: int | None = None
    optimizer_steps: int | None = None
    no_sync: SyncCost
    sync_every_micro_batch: SyncCost
    max_abs_grad_diff: float | None = None


class FinalLoss(_Model):
    payload_bytes_per_step: Bytes | None = None  # handed to the all-reduces
    ring_bytes_sent_per_rank_per_step: Bytes | None = None
    final_loss: float
    losses: list[float] | None = None
    step_ms: float | None = None


class Fp16(_Model):
    fp32: FinalLoss
    fp16: FinalLoss
    bytes_ratio: float
    max_abs_weight_diff: float | None = None


class Sampler(_Model):
    samples: int | None = None
    shard_size: int | None = None
    shards_disjoint: bool | None = None
    samples_covered: int | None = None
    padded: int | None = None
    first_indices_per_rank_epoch0: list[list[int]] | None = None
    rank0_with_set_epoch: list[list[int]] | None = None
    rank0_without_set_epoch: list[list[int]] | None = None
    same_order_next_epoch_with_set_epoch: bool | None = None
    same_order_next_epoch_without_set_epoch: bool | None = None
    positions_unchanged_epoch0_to_1: dict[str, float] | None = None


class ScalingRow(_Model):
    world_size: int
    seconds: float | None = None
    steps: int | None = None
    samples_per_s: float
    step_ms: float | None = None
    speedup: float | None = None
    efficiency: float


class Scaling(_Model):
    rows: list[ScalingRow] = []
    batch_per_rank: int | None = None
    note: str | None = None


class Sections(_Sparse):
    """The sections the run asked for; one it left out (or a rank's empty ``{}``) is None, and
    stored as absent."""

    equivalence: Equivalence | None = None  # in the order of labs.ddp.lab.SECTIONS, the order they run
    sampler: Sampler | None = None
    breakdown: Breakdown | None = None
    buckets: Buckets | None = None
    no_sync: NoSync | None = None
    fp16: Fp16 | None = None
    scaling: Scaling | None = None
    timeline: Timeline | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _empty_is_absent(cls, value: Any) -> Any:
        return value or None

    @field_validator("breakdown", mode="before")
    @classmethod
    def _older_breakdown(cls, value: Any) -> Any:
        # Runs before issue #22 mixed what bucketing saves with what overlap hides: not read.
        return value if isinstance(value, dict) and "bucketing_saving" in value else None


class DdpModel(_Model):
    kind: str = "MLP"
    depth: int
    hidden: int
    parameters: int
    gradient_bytes: Bytes


class Dataset(_Model):
    kind: str
    samples: int
    features: int
    classes: int
    seed: int


class DdpSummary(_Model):
    """Everything ``labs.ddp.lab.summarize`` writes. Fields the first runs did not store are optional."""

    lab: str = "ddp"
    world_size: int
    backend: str = "gloo"
    model: DdpModel | None = None
    dataset: Dataset | None = None
    sections: Sections
