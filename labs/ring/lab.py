"""Ring all-reduce by hand, beside the naive version, checked against dist.all_reduce.

Launch (each prints what every rank sent at every step, and when):

    python -m labs ring --world-size 4                      # our launcher, gloo on CPU
    python -m labs ring --world-size 4 --size 65536 --dtype bfloat16 --op avg
    python -m labs ring --world-size 4 --algo naive         # the tutorial's version
    python -m labs ring --world-size 4 --algo pipelined     # segmented, as libraries do
    torchrun --standalone --nproc-per-node 4 -m labs.ring   # the same lab under torchrun
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d \\
        --rdzv-endpoint HOST:29500 -m labs.ring             # two machines, NCCL on GPUs

`ring_allreduce` splits the tensor into n chunks and passes them around a
logical ring: n-1 reduce-scatter steps leave each rank with one fully
reduced chunk, n-1 all-gather steps hand those chunks to everyone. Every
rank sends 2(n-1)/n of the buffer however large n is. `naive_allreduce`
passes the whole tensor around the ring n-1 times instead: (n-1) times the
buffer per rank. `ring_allreduce_pipelined` sends the same bytes as
`ring_allreduce`, but in segments that are forwarded as soon as they are
added, with several messages in flight: what gloo and NCCL do to go faster.

The lab times ``repeats`` all-reduces of ours and as many of
``dist.all_reduce`` (after ``warmup`` untimed ones) and reports the median
with min and max: one run on a shared machine is noise. Every run of ours is
traced; the summary keeps the median run's trace (the animation replays it)
and each step's median, min and max over the runs (the page draws those
against the alpha-beta model).

Trace times are seconds on a common clock: on one machine, rank 0's
``time.perf_counter()`` (CLOCK_MONOTONIC, shared by every process) read right
after a barrier, so a send on one rank and the matching receive on the next
line up exactly; see `labs.context.shared_clock_origin`. In the summary they
count from the start of the replayed run.

The three all-reduces and the work of one rank are in ``labs.ring.allreduce``,
which the ranks import. This module (the lab's parameters, summary and report)
imports no torch: the platform reads it to build the form and check a request.
"""

from __future__ import annotations

import statistics
from typing import NamedTuple

from labs import model, reports
from labs.params import Page, ParamError, dataclass, limit, option


class DType(NamedTuple):
    """What the lab needs to know of an element type without torch (torch's names for both)."""

    itemsize: int
    is_floating_point: bool


# The element types a learner may choose, by torch's names (``labs.ring.allreduce`` maps
# each to torch's dtype; a test checks that these figures are torch's).
DTYPES = {"float32": DType(4, True), "float64": DType(8, True),
          "bfloat16": DType(2, True), "int64": DType(8, False)}
# The default number of ranks (page and CLI): on 2 ranks the naive ring and
# the chunked ring both send S bytes per rank, (n-1)*S = 2(n-1)/n*S = S, so
# only 3 or more show the difference. See labs.context.world_size_default.
DEFAULT_WORLD_SIZE = 3
# In the order the page offers them; ``labs.ring.allreduce.ALGOS`` holds the functions.
ALGOS = ("ring", "pipelined", "naive")
OPS = ("sum", "avg")
# What a rank runs (``run_rank``), with torch: imported by the ranks only (``labs.context.rank_code``).
RANK_MODULE = "labs.ring.allreduce"
# What the pages read of this lab's summary (``labs.reports.read``).
SUMMARY = reports.RingSummary


@dataclass
class Params:
    size: int = option(1 << 20, key="labs.size", help="bytes per rank", low=0, high=limit("max_bytes"),
                      unit="bytes", page=Page(widget="sizes", low=1 << 10, high=64 << 20))
    dtype: str = option("float32", key="labs.dtype", help="element type", choices=tuple(DTYPES), page=Page())
    op: str = option("sum", key="labs.op", help="reduction", choices=OPS, page=Page())
    algo: str = option("ring", key="labs.algo", help="all-reduce algorithm", choices=ALGOS,
                      labels="labs.algo_", page=Page())
    seed: int = option(0, help="seed of every rank's input")
    warmup: int = option(1, help="untimed all-reduces before the timed ones", low=0)
    repeats: int = option(5, help="timed all-reduces of each kind (ours, dist.all_reduce); "
                          "times are their median, with min and max", low=1)

    def __post_init__(self) -> None:
        if self.op == "avg" and not DTYPES[self.dtype].is_floating_point:
            raise ParamError("op", "avg_int", f"op avg needs a floating-point dtype, not {self.dtype}")

    @property
    def numel(self) -> int:
        return self.size // DTYPES[self.dtype].itemsize


def check(params: Params, world_size: int) -> None:
    """Any world size the limits allow will do (see ``labs.params.Run``)."""


def chunk_sizes(numel: int, world_size: int) -> list[int]:
    """Elements in each of the n chunks the rings cut a tensor into, as ``torch.tensor_split``
    cuts them: the first ``numel % n`` chunks hold one element more."""
    size, extra = divmod(numel, world_size)
    return [size + (i < extra) for i in range(world_size)]


def spread(values: list[float]) -> reports.Timed:
    """Median, min and max of repeated measurements, and how many there were."""
    ordered = sorted(values)
    if not ordered:
        return reports.Timed(median=0.0, min=0.0, max=0.0, k=0)
    return reports.Timed(median=statistics.median(ordered), min=ordered[0], max=ordered[-1], k=len(ordered))


def cost(params: Params, world_size: int) -> float:
    """What a run's time grows with, in bytes: each rank sends about (n-1) buffers' worth per
    all-reduce (2(n-1)/n chunked, n-1 whole), in the warm-up, ours and the built-in's runs.
    ``academy.labruns.estimate_s`` turns it into seconds from this machine's recent runs."""
    return max(world_size - 1, 0) * params.size * (params.warmup + 2 * params.repeats)


def summarize(params: Params, ranks: list[dict], *, world_size: int, backend: str) -> reports.RingSummary:
    dtype = DTYPES[params.dtype]
    numel = params.numel
    chunk_numels = chunk_sizes(numel, world_size)
    k = len(ranks[0]["runs"])
    # A run lasts from the first rank starting to the last rank finishing.
    totals = [max(r["spans"][i][1] for r in ranks) - min(r["spans"][i][0] for r in ranks)
              for i in range(k)]
    builtin = [max(r["builtin_times_s"][i] for r in ranks) for i in range(k)]
    # The run the animation replays: the median one, its times from its own start.
    shown = sorted(range(k), key=lambda i: totals[i])[(k - 1) // 2]
    start = min(r["spans"][shown][0] for r in ranks)
    traces = [[dict(rec, t_start=rec["t_start"] - start, t_end=rec["t_end"] - start)
               for rec in r["runs"][shown]] for r in ranks]
    # Each step's duration in each run (first rank starting it to last finishing it).
    n_steps = len(ranks[0]["runs"][0])
    per_step = [[max(r["runs"][i][j]["t_end"] for r in ranks) - min(r["runs"][i][j]["t_start"] for r in ranks)
                 for i in range(k)] for j in range(n_steps)]
    total = statistics.median(totals)
    size = numel * dtype.itemsize
    algbw = model.algbw(size, total) / 1e9 if total > 0 else 0.0
    busbw = model.busbw(size, total, world_size) / 1e9 if total > 0 else 0.0
    return reports.RingSummary(
        lab="ring", algo=params.algo, world_size=world_size, backend=backend, numel=numel, dtype=params.dtype,
        element_size=dtype.itemsize, size_bytes=size, chunk_numels=chunk_numels,
        # What one rank sends per step: a chunk, or (naive) the whole buffer.
        step_bytes=size if params.algo == "naive" else max(chunk_numels) * dtype.itemsize,
        op=params.op, owner_after_reduce_scatter={str(r): (r + 1) % world_size for r in range(world_size)},
        traces=traces, repeats=k, replayed_run=shown,
        total_time_s=total, total_time=spread(totals),
        builtin_time_s=statistics.median(builtin), builtin_time=spread(builtin),
        step_times=[spread(d) for d in per_step],
        algbw_GBps=algbw, busbw_GBps=busbw,
        correct=all(r["wrong"] == 0 for r in ranks), wrong=sum(r["wrong"] for r in ranks),
        max_abs_err=max(r["max_abs_err"] for r in ranks), checksum=ranks[0]["checksum"],
        ranks_identical=len({r["checksum"] for r in ranks}) == 1, clock=ranks[0]["clock"],
        inputs=[r["input"] for r in ranks] if ranks[0]["input"] is not None else None,
        outputs=[r["output"] for r in ranks] if ranks[0]["output"] is not None else None)


def format_text(summary) -> str:
    """The summary (a stored dict or the model) as text (``python -m labs ring`` prints it)."""
    s = reports.RingSummary.model_validate(summary)
    lines = [
        f"{s.algo} all-reduce: {s.world_size} ranks, {s.backend}, {s.numel} x "
        f"{s.dtype} ({s.size_bytes} B), op={s.op}",
    ]
    if s.algo != "naive":
        lines.append(f"chunks (elements): {s.chunk_numels}")
    lines.append(f"{'step':>4}  {'phase':<14}  {'rank':>4}  {'sends':<10} {'to':>3}  "
                 f"{'receives':<10} {'from':>4}  {'bytes':>10}  {'start us':>10}  {'end us':>10}")
    for rank, steps in enumerate(s.traces):
        for st in steps:
            send = "tensor" if st["send_chunk"] is None else f"chunk {st['send_chunk']}"
            recv = "tensor" if st["recv_chunk"] is None else f"chunk {st['recv_chunk']}"
            lines.append(f"{st['step']:>4}  {st['phase']:<14}  {rank:>4}  {send:<10} "
                         f"{st['send_to']:>3}  {recv:<10} {st['recv_from']:>4}  {st['bytes']:>10}  "
                         f"{st['t_start'] * 1e6:>10.1f}  {st['t_end'] * 1e6:>10.1f}")
    verdict = "correct" if s.correct else f"WRONG ({s.wrong} elements)"
    total = s.total_time or reports.Timed(median=s.total_time_s, min=s.total_time_s, max=s.total_time_s)
    builtin = s.builtin_time or reports.Timed(median=s.builtin_time_s, min=s.builtin_time_s, max=s.builtin_time_s)
    lines += [
        f"result: {verdict}: max |ours - dist.all_reduce| = {s.max_abs_err:.3g}; "
        f"ranks bit-identical: {s.ranks_identical}",
        f"time (median of {s.repeats} runs, min..max): ours {s.total_time_s * 1e3:.3f} ms "
        f"({total.min * 1e3:.3f}..{total.max * 1e3:.3f}), dist.all_reduce "
        f"{s.builtin_time_s * 1e3:.3f} ms ({builtin.min * 1e3:.3f}.."
        f"{builtin.max * 1e3:.3f}); algbw {s.algbw_GBps:.3f} GB/s, "
        f"busbw {s.busbw_GBps:.3f} GB/s",
        f"checksum of the result: {s.checksum[:16]}",
    ]
    return "\n".join(lines)
