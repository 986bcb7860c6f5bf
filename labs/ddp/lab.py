"""DistributedDataParallel on a small MLP, measured section by section.

Launch:

    python -m labs ddp --world-size 2                        # every section, ~10-30 s on 2 cores
    python -m labs ddp --world-size 4 --sections equivalence scaling
    python -m labs ddp --world-size 2 --json --out ddp.json
    python -m labs ddp --world-size 2 --sections timeline --trace traces/
    torchrun --standalone --nproc-per-node 2 -m labs.ddp     # the same lab under torchrun

The data: a synthetic classification set (Gaussian blobs, one per class)
generated from a fixed seed on every rank, so nothing is downloaded and every
launcher sees the same samples. The model: an MLP (``depth`` hidden layers,
``hidden`` wide, ``batch`` samples per rank); the three sections about
overlap (breakdown, buckets, timeline) use a larger one, the overlap model
(``overlap_depth`` x ``overlap_hidden``, ``overlap_batch`` samples per rank),
whose backward lasts long enough on a CPU core to hide all-reduces behind.

Sections (each returns numbers; run a subset with ``--sections``):

- ``equivalence``: n ranks with batch b reach the weights one process reaches
  with batch n*b (max difference vs ``tolerance``), and the ranks hold
  bit-identical weights after every step.
- ``sampler``: how DistributedSampler shards the data, and that without
  ``set_epoch`` every epoch visits the samples in the same order.
- ``breakdown``: per-step forward / backward / exposed communication /
  optimizer for `naive_sync_gradients` (backward, then one all-reduce per
  parameter), `bucketed_sync_gradients` (backward, then one all-reduce per
  DDP bucket) and DDP (the same buckets, launched during backward). Two
  figures, kept apart: what bucketing saves (naive - bucketed: fewer calls,
  each paying the latency alpha) and what overlap hides (bucketed - DDP's
  exposed communication, at most the backward time). Each is the median of
  ``steps`` steps with its quartiles. On the overlap model.
- ``buckets``: step time and all-reduce calls per step vs ``bucket_cap_mb``,
  on the overlap model.
- ``no_sync``: gradient accumulation over k micro-batches with one
  all-reduce per optimizer step instead of k, and the same gradients.
- ``fp16``: the fp16 compression comm hook: half the bytes on the wire, and
  the loss beside the fp32 run's.
- ``scaling``: throughput and scaling efficiency on 1, 2, 4 ranks (subgroups
  of this run; fixed batch per rank).
- ``timeline``: every rank's compute and communication spans, step by step,
  for the naive sync and DDP at each bucket cap, on the overlap model; the
  share of communication hidden behind backward, the exposed communication
  and the idle time (``--trace DIR`` writes them as Chrome/Perfetto traces);
  then ``dist.all_reduce`` alone at a few sizes, whose alpha-beta fit gives
  the page's step model ("predict, then measure") at this run's world size.

This module (parameters, summary, report) imports no torch: the platform
reads it to build the form and check a request. What a rank runs is in the
modules the ranks import: the two functions the lessons show and most
sections in ``labs.ddp.rank``; the data, the model and the measuring tools
in ``labs.ddp.setup``; the ``sampler`` section in ``labs.ddp.sampler``; the
``timeline`` section in ``labs.ddp.timeline`` (its arithmetic in
``labs.timeline``). The text report is ``labs.ddp.text``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from labs.ddp import report
from labs.ddp.text import format_text as format_text  # what `python -m labs ddp` prints
from labs.params import Page, dataclass, option

SECTIONS = ("equivalence", "sampler", "breakdown", "buckets", "no_sync", "fp16", "scaling", "timeline")
# What a rank runs (``run_rank``), with torch: imported by the ranks only (``labs.context.rank_code``).
RANK_MODULE = "labs.ddp.rank"
# What the pages read of this lab's summary (``labs.reports.read``).
SUMMARY = report.DdpSummary


# --------------------------------------------------------------------------
# Parameters


@dataclass
class Params:
    samples: int = option(2048, help="samples in the synthetic data set", low=1)
    features: int = option(32, help="input features", low=1)
    classes: int = option(4, help="classes to tell apart", low=1)
    hidden: int = option(128, help="MLP width", low=1)
    depth: int = option(3, help="hidden layers", low=1)
    batch: int = option(32, help="samples per rank per step", low=1)
    steps: int = option(12, key="labs.steps", help="measured steps per section", low=1,
                       page=Page(widget="slider", low=2, high=20, default=5))
    warmup: int = option(2, help="unmeasured steps before timing", low=0)
    lr: float = option(0.05, help="learning rate (> 0)")
    seed: int = option(0, help="seed of the data and the model")
    tolerance: float = option(1e-5, help="max |w_ddp - w_single| allowed in equivalence (> 0)")
    bucket_caps_mb: list[float] = option([0.05, 0.5, 25.0], help="bucket sizes to compare in the buckets and "
                                         "timeline sections, MB (> 0); at 0.05, 0.5 and 25 the overlap model "
                                         "has 6, 3 and 1 buckets")
    overlap_bucket_cap_mb: float = option(0.05, help="bucket size of the DDP in the breakdown and the timeline, "
                                          "MB (> 0): small enough for several buckets, so that one can "
                                          "overlap backward")
    accumulation: int = option(4, help="micro-batches per optimizer step in no_sync", low=1)
    scaling_world_sizes: list[Annotated[int, Field(ge=1)]] = option(
        [1, 2, 4], help="rank counts for the scaling section", flags=("--world-sizes",))
    overlap_hidden: int = option(256, help="MLP width in the breakdown and timeline sections (a backward "
                                 "long enough to hide all-reduces behind)", low=1,
                                 flags=("--overlap-hidden", "--timeline-hidden"))
    overlap_depth: int = option(6, help="hidden layers in the breakdown and timeline sections (one bucket "
                                "or more each at overlap_bucket_cap_mb)", low=1)
    overlap_batch: int = option(256, help="samples per rank per step in the breakdown and timeline sections",
                                low=1, flags=("--overlap-batch", "--timeline-batch"))
    timeline_steps: int = option(5, help="measured steps per variant in the timeline section", low=1)
    sections: list[str] = option(list(SECTIONS), help="sections to run", choices=SECTIONS)
    predicted_step_ms: float | None = option(
        None, key="labs.predict.field", low=0,
        help="your prediction of one DDP step at overlap_bucket_cap_mb, ms, made before the run; "
             "kept with it for the page's 'predict, then measure' (the lab does not use it)",
        page=Page(widget="prediction", help="labs.predict.field_help"))

    def __post_init__(self) -> None:
        if self.lr <= 0 or self.tolerance <= 0:
            raise ValueError("need lr > 0 and tolerance > 0")
        if any(c <= 0 for c in [*self.bucket_caps_mb, self.overlap_bucket_cap_mb]):
            raise ValueError("bucket caps must be > 0 MB")


def check(params: Params, world_size: int) -> None:
    if params.samples < world_size * params.batch:
        raise ValueError(f"{params.samples} samples cannot fill a batch of {params.batch} "
                         f"on each of {world_size} ranks")


def summarize(params: Params, ranks: list[dict], *, world_size: int, backend: str) -> report.DdpSummary:
    return report.DdpSummary(
        lab="ddp", world_size=world_size, backend=backend,
        model=report.DdpModel(kind="MLP", depth=params.depth, hidden=params.hidden,
                               parameters=ranks[0]["parameters"], gradient_bytes=ranks[0]["parameters"] * 4),
        dataset=report.Dataset(kind="synthetic Gaussian blobs", samples=params.samples,
                                features=params.features, classes=params.classes, seed=params.seed),
        sections=ranks[0]["sections"])
