"""A lab's stored result, typed: what the pages read of each lab's summary.

A finished run keeps its result as JSON (``LabRun.result``: the lab's
``summary``, written by its ``summarize``, and the launcher's ``wall_s``,
``overhead_s`` ...). `read` is the one place that turns it into
these frozen pydantic models; the pages read attributes from there on. Each
lab's ``summarize`` builds its model, and the model declares every field it
writes (``labs.context.stored_summary`` dumps it to the JSON a result keeps);
each field added to a lab after its first version is optional, with the value
the page assumed for older runs. A result that does not fit raises `ReportError`.

Plain data stays plain where it is only passed on: a ring trace's records
(``labs.ring.ringtrace`` reads them) and a breakdown's per-part milliseconds
(``app.charts`` draws dicts; a benchmark's rows and a timeline's variants go
to it and to ``labs.timeline`` as ``model_dump``s). Torch-free, like every module
the platform reads.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

# What a stored report says when it was too large to keep (``LAB_RESULT_MAX_BYTES``): a lab
# run's error kind, a grading report's error key (``labs.exercises.report``).
TOO_LARGE = "report_too_large"


# A byte count as the ranks wrote it: a whole number stays one (and is stored again as one).
Bytes = int | float


class ReportError(ValueError):
    """A stored result that is not the report its lab writes."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class Spread(_Model):
    """Repeated measurements: median, min and max."""

    median: float
    min: float
    max: float


# --------------------------------------------------------------------------
# ring (labs.ring.lab.summarize)


class Timed(Spread):
    """A ring run's repeated times in seconds (``labs.ring.lab.spread``): the spread and how many."""

    k: int | None = None  # how many runs it is over


class RingSummary(_Model):
    """Everything ``labs.ring.lab.summarize`` writes, in its order: the page reads the figures and
    the traces, the text report the rest. Fields the first runs did not store are optional."""

    lab: str = "ring"
    algo: str = "ring"
    world_size: int
    backend: str = "gloo"
    numel: int | None = None
    dtype: str = "float32"
    element_size: int
    size_bytes: int
    chunk_numels: list[int]
    step_bytes: int | None = None  # older runs: from the size or the largest chunk
    op: str = "sum"
    owner_after_reduce_scatter: dict[str, int] | None = None  # rank -> the rank that owns its chunk next
    traces: list[list[dict[str, Any]]]  # each rank's step records, read by labs.ring.ringtrace
    repeats: int = 1
    replayed_run: int | None = None  # which timed run the traces are
    total_time_s: float
    total_time: Timed | None = None  # older runs: the one time
    builtin_time_s: float
    builtin_time: Timed | None = None
    step_times: list[Timed] | None = None  # older runs: the replayed trace's steps
    algbw_GBps: float | None = None
    busbw_GBps: float
    correct: bool
    wrong: int | None = None  # elements that differ from dist.all_reduce's
    max_abs_err: float | None = None
    checksum: str | None = None  # sha256 of rank 0's result
    ranks_identical: bool | None = None
    clock: str | None = None  # how the trace times line up (labs.context.shared_clock_origin)
    inputs: list[list[float]] | None = None  # each rank's input and result, for small tensors only
    outputs: list[list[float]] | None = None


# --------------------------------------------------------------------------
# bench (labs.bench.lab.summarize)


class BenchRow(_Model):
    """One implementation at one size (``labs.bench.rank``): the median of the timed calls."""

    size: int
    count: int
    dtype: str
    op: str = "sum"  # "none" for all-gather
    impl: str
    collective: str | None = None  # older runs: all-reduce rows only
    time_us: float
    min_us: float | None = None  # older runs: the one time
    max_us: float | None = None
    algbw: float
    busbw: float
    wrong: int


class Ratio(_Model):
    """Our ring's busbw over dist.all_reduce's at one size."""

    size: int
    ring_busbw: float | None = None  # older runs: only the ratio
    all_reduce_busbw: float | None = None
    ratio: float | None = None  # None: dist.all_reduce measured nothing at that size


class PipelinedRatio(_Model):
    """The pipelined ring's busbw over dist.all_reduce's at one size."""

    size: int
    ring_pipelined_busbw: float
    all_reduce_busbw: float
    ratio: float | None = None


class Fit(_Model):
    """An alpha-beta fit (``labs.model.fit_alpha_beta``); None where it could not be fitted (inf in JSON)."""

    alpha_s: float | None = None
    bandwidth_Bps: float | None = None
    bandwidth_GBps: float | None = None
    steps: int | None = None  # alpha is per step of the collective (older runs: not said)
    collective: str | None = None
    rms_rel_err: float | None = None  # of the fitted times against the measured ones
    points: int | None = None  # sizes fitted


class BenchSummary(_Model):
    """Everything ``labs.bench.lab.summarize`` writes, in its order. Fields the first runs did not
    store are optional."""

    lab: str = "bench"
    world_size: int
    backend: str = "gloo"
    dtype: str = "float32"
    op: str = "sum"
    warmup: int | None = None
    iters: int = 1
    sizes: list[int] | None = None  # every size a row has
    rows: list[BenchRow]
    fit: dict[str, Fit | None] = {}  # per impl; None: too few ranks or sizes
    ring_vs_all_reduce: list[Ratio] = []
    pipelined_vs_all_reduce: list[PipelinedRatio] = []
    wrong: int | None = None  # wrong elements over every row
    notes: dict[str, str] | None = None  # what busbw and the collectives are, for a reader of the JSON


# --------------------------------------------------------------------------
# timelines (labs.timeline.variant), the DDP and straggler labs' (labs/ddp/report.py, labs/straggler/report.py)


class Quartiles(_Model):
    """Per-step samples in ms: median and quartiles, and how many (``k``)."""

    median: float
    q1: float
    q3: float
    k: int


class Span(_Model):
    """One compute or communication span of a rank (``labs.timeline``)."""

    kind: str  # "compute" | "comm"
    name: str
    start_ms: float
    end_ms: float
    step: int = 0
    bytes: float | None = None  # older runs: an equal share of the gradients
    ready_ms: float | None = None  # a comm span: when every rank had started it (older runs: none)


class LaneRank(_Model):
    rank: int
    spans: list[Span]
    idle_ms: float


class Variant(_Model):
    """One way to sync as ``labs.timeline.variant`` returns it: each rank's spans and the figures."""

    overlap: float  # the median step's (older runs: every step pooled)
    overlap_steps: list[float] = []  # each step's, in order (older runs: none)
    exposed_comm_ms: float
    comm_ms: float | None = None  # an all-reduce in flight, per step and rank (read by quizzes.figures)
    allreduce_calls: int | None = None
    bucket_cap_mb: float | None = None  # None: the naive sync
    ranks: list[LaneRank]

    def plain(self) -> dict[str, Any]:
        """The variant as ``labs.timeline``'s arithmetic reads it (spans as dicts)."""
        return self.model_dump(exclude_none=True)


# --------------------------------------------------------------------------
# sharding (labs.sharding.lab.summarize)


class Collective(_Model):
    """One kind of collective at one stage of the step, as rank 0 called it (``labs.sharding.zero.WireCounter``)."""

    kind: str
    stage: str
    bytes: Bytes
    calls: int
    dtype: str


class LedgerRow(_Model):
    rank: int
    measured: dict[str, Bytes]  # bytes per part: params, grads, optimizer
    predicted: dict[str, Bytes]
    peak: Bytes | None = None
    wire_bytes_per_step: Bytes


class Strategy(_Model):
    ranks: list[LedgerRow]
    max_abs_diff_vs_ddp: float
    mean_abs_diff_vs_ddp: float | None = None  # added with bf16-mixed
    step_collectives: list[Collective] | None = None  # older runs: the fixed phases are drawn


class ShardModel(_Model):
    kind: str = "MLP"
    width: int | None = None  # older runs: only the bytes
    depth: int | None = None
    parameters: int | None = None
    bytes: Bytes  # of the weights, in the run's precision


class ShardingSummary(_Model):
    """Everything ``labs.sharding.lab.summarize`` writes, in its order. Fields the first runs did
    not store are optional."""

    lab: str = "sharding"
    world_size: int
    backend: str = "gloo"
    model: ShardModel
    precision: str = "fp32"  # older runs: fp32, the only precision then
    wire_dtypes: list[str] = []
    strategies: dict[str, Strategy]
    ledger_error: dict[str, float]
    within_ledger_tolerance: bool
    ledger_tolerance: float
    ordered: bool | None = None  # None: one rank, nothing to order
    predicted_wire_bytes_per_step: dict[str, Bytes]
    tolerance: float
    weight_check: str = "max"  # "max" | "mean_relative"
    max_abs_update_ddp: float | None = None
    mean_abs_update_ddp: float | None = None
    equal_weights: bool
    steps: int | None = None  # training steps under each strategy


# --------------------------------------------------------------------------
# compression (labs.compression.lab.summarize builds these)


class Band(_Model):
    """A figure over the seeds: its median, and the lowest and highest seed's."""

    median: float
    min: float
    max: float


class Gap(_Model):
    """A strategy's final loss minus fp32's, seed by seed (same weights and batches at the start)."""

    mean: float
    half_width: float | None  # of the 95 % confidence interval (Student's t); None with one seed
    seeds: list[float]


class StepTime(_Model):
    """Time per step in ms over every measured step of every seed (``samples`` of them)."""

    median_ms: float
    q1_ms: float
    q3_ms: float
    samples: int


class CompressionStrategy(_Model):
    bytes_per_step: int  # measured: what each rank handed to the collectives in a compressed step
    formula_bytes: int  # the family's formula (labs.model)
    formula_error: float  # |measured - formula| / formula
    dense_steps: int  # steps sent uncompressed before compression began (PowerSGD's first two)
    by_kind: dict[str, int]  # the measured bytes by collective: all_reduce, all_gather
    sent_per_step: float  # what that sends per rank on a ring (labs.model.ring_sent)
    dtypes: list[str]
    ratio: float | None  # fp32's bytes over these (None: nothing was sent)
    curve: list[Band]  # the evaluation loss at CompressionSummary.curve_steps
    final: Band
    finals: list[float]  # per seed, in CompressionSummary.seeds' order
    gap: Gap | None  # None for fp32, the reference
    step_time: StepTime
    replicas_equal: bool  # every rank ended every seed with the same weights
    ranks_sent_alike: bool  # every rank handed over the same bytes at every step


class CompressionSummary(_Model):
    world_size: int
    backend: str = "gloo"
    parameters: int
    gradient_bytes: int
    shapes: list[list[int]]
    seeds: list[int]
    steps: int
    curve_steps: list[int]
    density: float
    buckets: int  # DDP buckets per step, as the hook was handed them
    powersgd_chain: str  # "serial" (each bucket's all-reduces done before the next) or "overlapped"
    strategies: dict[str, CompressionStrategy]
    formula_tolerance: float
    within_formula: bool
    pareto: list[str]  # the strategies no other beats on both bytes sent and final loss


# --------------------------------------------------------------------------
# topology (labs.topology.lab.summarize)


class LinkClass(_Model):
    """One class of link as the ping-pong measured it (``labs.topology.rank.probe``)."""

    alpha_s: float
    bandwidth_Bps: float
    probe_bytes: int
    rate_Bps: float | None = None  # the rate tbf shapes the link to; None: not shaped
    small: Spread  # one-way seconds of a small message, over the repeats
    large: Spread  # one-way seconds of ``probe_bytes``


class TopologyRow(_Model):
    """One all-reduce algorithm at one size: measured, counted, logged and projected."""

    algo: str  # "flat" | "hierarchical"
    size: int
    time: Spread  # seconds per all-reduce: the slowest rank's, over the repeats
    link_bytes: list[float] | None = None  # per all-reduce, node 0 -> 1 and 1 -> 0, from the veth's counters
    link_frames: list[float] | None = None  # frames the same counters counted
    payload_bytes: list[float] | None = None  # link_bytes less the frames' Ethernet/IP/TCP headers
    retransmitted: int | None = None  # TCP segments the two nodes sent again during these repeats
    model_bytes: list[float]  # the same two, summed from the ranks' message log
    bytes_error: float | None = None  # the larger relative gap of the two
    formula_bytes: float  # 2(N-1)/N S or 2(m-1)/m S (labs.simclock.inter_node_bytes)
    predicted_s: float | None = None  # the log replayed on this box's measured link classes
    projected: dict[str, float]  # labs.simclock target key -> seconds
    messages: int
    correct: bool
    max_abs_err: float


class ScaleRow(_Model):
    """An algorithm's projection at a scale no lab ran (labs.simclock.schedule)."""

    nodes: int
    per_node: int
    size: int
    algo: str
    projected: dict[str, float]
    inter_bytes: float


class MeshCollective(_Model):
    """One kind of collective on one kind of group in a training step, as rank 0 called it."""

    kind: str
    group_size: int
    spans_nodes: bool
    bytes: float  # payload handed to the collective, per step
    calls: int
    predicted_link_bytes: float  # what it sends from node 0 to node 1 (gloo's algorithm, see the lab)


class MeshMemory(_Model):
    rank: int
    measured: dict[str, float]  # params, grads, optimizer
    predicted: dict[str, float]


class MeshRow(_Model):
    """FSDP over every rank, or HSDP (shard inside a node, replicate across)."""

    name: str  # "fsdp" | "hsdp"
    shard_size: int
    replicas: int
    parameters: int
    link_bytes: list[float] | None = None  # per step, each way, counted (whole frames)
    link_frames: list[float] | None = None
    payload_bytes: list[float] | None = None  # link_bytes less the frames' headers
    predicted_link_bytes: float  # per step, node 0 -> 1
    collectives: list[MeshCollective]
    memory: list[MeshMemory]
    step_time: Spread
    max_abs_diff: float  # weights against FSDP's after the same steps (0 for FSDP itself)


class TopologySummary(_Model):
    world_size: int
    backend: str = "gloo"
    nodes: int
    per_node: int
    rate_mbit: float | None = None
    fabric: str  # "namespaces" | "loopback"
    unavailable: str | None = None  # why not namespaces: labs.topology.netns.Unavailable.reason
    unavailable_detail: str = ""
    links: dict[str, LinkClass] = {}  # "intra", "inter"
    repeats: int
    rows: list[TopologyRow]
    scale: list[ScaleRow] = []
    within_tolerance: bool | None = None  # None: nothing crossed a counted link
    tolerance: float
    sharding: list[MeshRow] = []


# --------------------------------------------------------------------------
# The report and its one reader

# What the pages draw (a type for their signatures; each lab names its own as ``SUMMARY``).
# The DDP, straggler and failure labs keep theirs beside them (labs/<lab>/report.py), which import
# this module: naming them here would be an import cycle.
Summary = RingSummary | BenchSummary | ShardingSummary | CompressionSummary | TopologySummary
S = TypeVar("S", bound=_Model)


class Report(_Model, Generic[S]):
    """A finished run's result: the lab's summary and the launcher's figures."""

    summary: S
    wall_s: float = 0.0
    overhead_s: float = 0.0


def read(lab: str, result: Any) -> Report:
    """``result`` (``LabRun.result`` of a finished run of ``lab``) as a typed `Report`.

    The summary's type is the one the lab names (its ``SUMMARY``). Raises
    `ReportError`, naming the lab and the first fields that do not fit, for an
    unknown lab or a result that is not its report.
    """
    from labs.context import load_lab

    try:
        summary = load_lab(lab).SUMMARY
    except (ValueError, ImportError, AttributeError):
        raise ReportError(f"no report type for the lab {lab!r}") from None
    try:
        return Report[summary].model_validate(result)
    except ValidationError as err:
        wrong = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'result'}: {e['msg']}" for e in err.errors()[:3])
        raise ReportError(f"the {lab} lab's stored result cannot be read ({wrong})") from None
