"""An nccl-tests-style sweep: our rings, the naive ring and torch's collectives.

Launch:

    python -m labs bench --world-size 4                                  # 1 KiB .. 64 MiB, x4
    python -m labs bench --world-size 2 --min-bytes 1048576 --max-bytes 67108864 --factor 2
    python -m labs bench --world-size 2 --impls ring all_reduce --json
    python -m labs bench --world-size 2 --min-bytes 1048576 --max-bytes 67108864 --factor 2 \\
        --impls ring ring_pipelined all_reduce
    torchrun --standalone --nproc-per-node 4 -m labs.bench --max-bytes 16777216

Every row is one message size and one implementation, timed over ``iters``
back-to-back calls after ``warmup`` untimed ones, each call on its own; a
call's time is its slowest rank's, and the row reports the median call with
the fastest and slowest (``min_us``, ``max_us``): on a shared machine one
call can take ten times another. (nccl-tests reports the mean instead.) algbw and busbw (in GB/s) follow nccl-tests'
definitions, which `labs.model` holds for the lessons' calculators too:

    algbw = S / t
    busbw = algbw * 2(n-1)/n    for all-reduce (ring, ring_pipelined, naive, all_reduce)
    busbw = algbw * (n-1)/n     for reduce-scatter and all-gather

For reduce-scatter S is the whole input (n chunks); for all-gather the whole
output. ``#wrong`` counts elements that differ from the exact answer in a
separate checked call (``labs.bench.rank``, the ranks' side, which imports
torch; this module does not). The summary fits the alpha-beta model
T = 2(n-1) alpha + 2(n-1)/n * S/B to each implementation's rows
(`labs.model.fit_alpha_beta`), so a learner reads their machine's alpha and B.
"""

from __future__ import annotations

import math

from labs import reports
from labs.model import fit_alpha_beta
from labs.params import Page, ParamError, dataclass, limit, option
from labs.ring.lab import DTYPES, OPS

# The default number of ranks (page and CLI): on 2 ranks the naive ring and
# the chunked ring both send S bytes per rank, (n-1)*S = 2(n-1)/n*S = S, so
# only 3 or more show the difference. See labs.context.world_size_default.
DEFAULT_WORLD_SIZE = 3
IMPLS = ("ring", "ring_pipelined", "naive", "all_reduce", "reduce_scatter", "all_gather")
# Which collective each implementation performs (for busbw and the fit).
COLLECTIVE = {"ring": "all_reduce", "ring_pipelined": "all_reduce", "naive": "all_reduce",
              "all_reduce": "all_reduce", "reduce_scatter": "reduce_scatter",
              "all_gather": "all_gather"}
GB = 1e9  # rows give algbw and busbw in GB/s, as nccl-tests prints them
# What a rank runs (``run_rank``), with torch: imported by the ranks only (``labs.context.rank_code``).
RANK_MODULE = "labs.bench.rank"
# What the pages read of this lab's summary (``labs.reports.read``).
SUMMARY = reports.BenchSummary


# --------------------------------------------------------------------------
# Pure arithmetic: no processes needed


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """Message sizes from min_bytes, times factor, up to max_bytes (inclusive)."""
    if min_bytes <= 0 or max_bytes < min_bytes or factor < 2:
        raise ValueError("need 0 < min_bytes <= max_bytes and factor >= 2")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


# --------------------------------------------------------------------------
# The lab


@dataclass
class Params:
    min_bytes: int = option(1 << 10, help="smallest message in bytes", low=1, high=limit("max_bytes"),
                           unit="bytes", flags=("--min-bytes", "--min-size"))
    max_bytes: int = option(64 << 20, key="labs.max_size", help="largest message in bytes", low=1,
                           high=limit("max_bytes"), unit="bytes", flags=("--max-bytes", "--max-size"),
                           page=Page(widget="sizes", low=64 << 10, high=64 << 20, default=4 << 20))
    size: int | None = option(help="one message size in bytes (sets min and max)", low=1, high=limit("max_bytes"),
                              unit="bytes")
    factor: int = option(4, help="size multiplier between rows", low=2)
    dtype: str = option("float32", help="element type", choices=tuple(DTYPES))
    op: str = option("sum", help="reduction", choices=OPS)
    warmup: int = option(2, help="untimed calls before timing", low=0)
    iters: int = option(5, help="timed calls per size (the row gives their median)", low=1)
    impls: list[str] = option(list(IMPLS), help="implementations to time", choices=IMPLS)

    def __post_init__(self) -> None:
        if self.size is not None:
            self.min_bytes = self.max_bytes = self.size
        sweep_sizes(self.min_bytes, self.max_bytes, self.factor)  # raises if nonsense
        if self.op == "avg" and not DTYPES[self.dtype].is_floating_point:
            raise ParamError("op", "avg_int", f"op avg needs a floating-point dtype, not {self.dtype}")


def check(params: Params, world_size: int) -> None:
    """Any world size the limits allow will do (see ``labs.params.Run``)."""


def cost(params: Params, world_size: int) -> float:
    """What a sweep's time grows with, in bytes: (n-1) times every size, for each
    implementation's warm-up, timed and checked calls (see ``labs.ring.cost``)."""
    sizes = sweep_sizes(params.min_bytes, params.max_bytes, params.factor)
    return max(world_size - 1, 0) * sum(sizes) * (params.warmup + params.iters + 1) * len(params.impls)


def summarize(params: Params, ranks: list[dict], *, world_size: int, backend: str) -> reports.BenchSummary:
    rows = ranks[0]["rows"]
    fits = {}
    for impl in params.impls:
        mine = [r for r in rows if r["impl"] == impl and r["size"] > 0]
        fits[impl] = fit_alpha_beta([r["size"] for r in mine], [r["time_us"] / 1e6 for r in mine],
                                    world_size, COLLECTIVE[impl])
    by_key = {(r["impl"], r["size"]): r for r in rows}

    def versus_builtin(impl: str) -> list[dict]:
        """busbw of ``impl`` over dist.all_reduce's, size by size."""
        out = []
        for r in rows:
            builtin = by_key.get(("all_reduce", r["size"]))
            if r["impl"] == impl and builtin is not None:
                out.append({"size": r["size"], f"{impl}_busbw": r["busbw"],
                            "all_reduce_busbw": builtin["busbw"],
                            "ratio": r["busbw"] / builtin["busbw"] if builtin["busbw"] else None})
        return out

    return reports.BenchSummary(
        lab="bench", world_size=world_size, backend=backend, dtype=params.dtype, op=params.op,
        warmup=params.warmup, iters=params.iters, sizes=sorted({r["size"] for r in rows}), rows=rows, fit=fits,
        ring_vs_all_reduce=versus_builtin("ring"), pipelined_vs_all_reduce=versus_builtin("ring_pipelined"),
        wrong=sum(r["wrong"] for r in rows),
        notes={"busbw": "all-reduce: algbw*2(n-1)/n; reduce-scatter, all-gather: algbw*(n-1)/n",
               "reduce_scatter": "torch.distributed.reduce_scatter_single",
               "all_gather": "torch.distributed.all_gather_single"})


def format_text(summary) -> str:
    """The summary (a stored dict or the model) as text (``python -m labs bench`` prints it)."""
    s = reports.BenchSummary.model_validate(summary)
    lines = [f"# collective sweep: {s.world_size} ranks, {s.backend}, {s.dtype}, "
             f"op {s.op}, warmup {s.warmup}, iters {s.iters}",
             f"# {'size':>12} {'count':>12} {'type':>9} {'redop':>6} {'impl':>15} "
             f"{'time':>11} {'min..max':>21} {'algbw':>8} {'busbw':>8} {'#wrong':>7}",
             f"# {'(B)':>12} {'(elements)':>12} {'':>9} {'':>6} {'':>15} "
             f"{'(us, median)':>11} {'(us)':>21} {'(GB/s)':>8} {'(GB/s)':>8}"]
    for r in s.rows:
        span = f"{_or(r.min_us, r.time_us):.1f}..{_or(r.max_us, r.time_us):.1f}"
        lines.append(f"  {r.size:>12} {r.count:>12} {r.dtype:>9} {r.op:>6} "
                     f"{r.impl:>15} {r.time_us:>11.1f} {span:>21} {r.algbw:>8.3f} "
                     f"{r.busbw:>8.3f} {r.wrong:>7}")
    lines.append(f"# out of bounds values: {s.wrong}")
    lines.append("# alpha-beta fit, T = steps*alpha + (busbw factor)*S/B:")
    for impl, fit in s.fit.items():
        if fit is None:
            lines.append(f"#   {impl:>15}: no fit (needs 2+ ranks and 2+ sizes)")
        else:  # a bandwidth that could not be fitted is stored as null: infinite
            lines.append(f"#   {impl:>15}: alpha = {fit.alpha_s * 1e6:9.1f} us, "
                         f"B = {_or(fit.bandwidth_GBps, math.inf):7.3f} GB/s "
                         f"(rms relative error {fit.rms_rel_err:.0%})")
    for versus, name in ((s.ring_vs_all_reduce, "our ring"), (s.pipelined_vs_all_reduce, "our pipelined ring")):
        if versus:
            lines.append(f"# {name} vs dist.all_reduce (busbw ratio): " + ", ".join(
                f"{c.size}: {c.ratio:.2f}" for c in versus if c.ratio))
    return "\n".join(lines)


def _or(value: float | None, otherwise: float) -> float:
    return otherwise if value is None else value
