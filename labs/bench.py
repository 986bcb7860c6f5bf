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
separate checked call. The summary fits the alpha-beta model
T = 2(n-1) alpha + 2(n-1)/n * S/B to each implementation's rows
(`labs.model.fit_alpha_beta`), so a learner reads their machine's alpha and B.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from labs.model import algbw, busbw, fit_alpha_beta
from labs.params import Page, ParamError, dataclass, limit, option
from labs.params import check as check_values
from labs.ring import DTYPES, OPS, naive_allreduce, ring_allreduce, ring_allreduce_pipelined

# The default number of ranks (page and CLI): on 2 ranks the naive ring and
# the chunked ring both send S bytes per rank, (n-1)*S = 2(n-1)/n*S = S, so
# only 3 or more show the difference. See labs.context.world_size_default.
DEFAULT_WORLD_SIZE = 3
IMPLS = ("ring", "ring_pipelined", "naive", "all_reduce", "reduce_scatter", "all_gather")
# Which collective each implementation performs (for busbw and the fit).
COLLECTIVE = {"ring": "all_reduce", "ring_pipelined": "all_reduce", "naive": "all_reduce",
              "all_reduce": "all_reduce", "reduce_scatter": "reduce_scatter",
              "all_gather": "all_gather"}
# Our hand-written all-reduces, each compared with dist.all_reduce in the summary.
OURS = {"ring": ring_allreduce, "ring_pipelined": ring_allreduce_pipelined,
        "naive": naive_allreduce}
GB = 1e9  # rows give algbw and busbw in GB/s, as nccl-tests prints them


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
    factor: int = option(4, help="size multiplier between rows", low=2)
    dtype: str = option("float32", help="element type", choices=tuple(DTYPES))
    op: str = option("sum", help="reduction", choices=OPS)
    warmup: int = option(2, help="untimed calls before timing", low=0)
    iters: int = option(5, help="timed calls per size (the row gives their median)", low=1)
    impls: list[str] = option(list(IMPLS), help="implementations to time", choices=IMPLS)

    def __post_init__(self) -> None:
        check_values(self)
        sweep_sizes(self.min_bytes, self.max_bytes, self.factor)  # raises if nonsense
        if self.op == "avg" and not DTYPES[self.dtype].is_floating_point:
            raise ParamError("op", "avg_int", f"op avg needs a floating-point dtype, not {self.dtype}")


def check(params: Params, world_size: int) -> None:
    """Any world size the limits allow will do (see ``labs.params.Run``)."""


def _pattern(numel: int, period_values: torch.Tensor, dtype, device) -> torch.Tensor:
    """``period_values`` repeated to ``numel`` elements: one pass, no big temporaries."""
    reps = -(-numel // len(period_values)) if numel else 0
    return period_values.to(dtype).repeat(reps)[:numel].to(device)


def _fill(t: torch.Tensor, rank: int) -> torch.Tensor:
    """Small integers that every dtype adds exactly: (i mod 7) - 3 + rank."""
    return t.copy_(_pattern(t.numel(), torch.arange(7) - 3 + rank, t.dtype, t.device))


def _expected(numel: int, world: int, op: str, dtype, device) -> torch.Tensor:
    total = ((torch.arange(7) - 3) * world + world * (world - 1) // 2).double()
    return _pattern(numel, total / world if op == "avg" else total, dtype, device)


def _runner(impl: str, numel: int, world: int, rank: int, params: Params, device):
    """Buffers and a zero-argument call for one row; also which result to check."""
    dtype = DTYPES[params.dtype]
    red = dist.ReduceOp.AVG if params.op == "avg" else dist.ReduceOp.SUM
    if COLLECTIVE[impl] == "all_reduce":
        buf = torch.empty(numel, dtype=dtype, device=device)
        fn = OURS.get(impl)
        call = (lambda: fn(buf, op=params.op)) if fn else (lambda: dist.all_reduce(buf, op=red))
        return buf, buf, call, (0, numel)
    if impl == "reduce_scatter":
        inp = torch.empty(numel, dtype=dtype, device=device)
        out = torch.empty(numel // world, dtype=dtype, device=device)
        lo = rank * (numel // world)
        return inp, out, (lambda: dist.reduce_scatter_single(out, inp, op=red)), (lo, lo + numel // world)
    # all_gather: each rank contributes its chunk of the "expected" result
    chunk = numel // world
    inp = torch.empty(chunk, dtype=dtype, device=device)
    out = torch.empty(chunk * world, dtype=dtype, device=device)
    return inp, out, (lambda: dist.all_gather_single(out, inp)), None


def run_rank(ctx, params: Params) -> dict:
    world, rank = ctx.world_size, ctx.rank
    dtype = DTYPES[params.dtype]
    elem = dtype.itemsize
    sizes = sweep_sizes(params.min_bytes, params.max_bytes, params.factor)
    total = len(sizes) * len(params.impls)
    rows, work = [], 0.0
    done = 0
    for size in sizes:
        for impl in params.impls:
            ctx.progress(done, total, impl, f"{size} B")
            collective = COLLECTIVE[impl]
            numel = size // elem
            if collective != "all_reduce":
                numel -= numel % world  # n equal chunks, as nccl-tests does
            inp, out, call, check_range = _runner(impl, numel, world, rank, params, ctx.device)
            with ctx.communicating():
                _fill(inp, rank)
                for _ in range(params.warmup):
                    call()
                # Still alive (a large row can take seconds); never inside the timed loop.
                ctx.progress(done, total, impl, f"{size} B: timing {params.iters} calls")
                dist.barrier()
                calls = []
                for _ in range(params.iters):
                    t0 = time.perf_counter()
                    call()
                    if ctx.device.type == "cuda":
                        torch.cuda.synchronize()
                    calls.append(time.perf_counter() - t0)
                # The slowest rank sets each call's time.
                slowest = torch.tensor(calls, dtype=torch.float64, device=ctx.device)
                dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
                calls = slowest.tolist()
                # A separate, checked call on fresh input.
                _fill(inp, rank)
                call()
            ctx.progress(done, total, impl, f"{size} B: checking the result")
            wrong = _count_wrong(impl, out, check_range, numel, world, params, ctx.device)
            wrong_t = torch.tensor([wrong], dtype=torch.int64, device=ctx.device)
            with ctx.communicating():
                dist.all_reduce(wrong_t)
            work += sum(calls)
            t = statistics.median(calls)
            nbytes = numel * elem
            rows.append({"size": nbytes, "count": numel, "dtype": params.dtype,
                         "op": params.op if collective != "all_gather" else "none",
                         "impl": impl, "collective": collective, "time_us": t * 1e6,
                         "min_us": min(calls) * 1e6, "max_us": max(calls) * 1e6,
                         "algbw": algbw(nbytes, t) / GB if nbytes else 0.0,
                         "busbw": busbw(nbytes, t, world, collective) / GB if nbytes else 0.0,
                         "wrong": int(wrong_t)})
            done += 1
    ctx.progress(total, total, "done")
    return {"rank": rank, "rows": rows if rank == 0 else [], "work_s": work}


def _count_wrong(impl, out, check_range, numel, world, params, device) -> int:
    dtype = DTYPES[params.dtype]
    if impl == "all_gather":
        # Rank r sent (i mod 7) - 3 + r for i in its chunk: rebuild that.
        chunk = numel // world
        expected = torch.cat([_pattern(chunk, torch.arange(7) - 3 + r, dtype, device)
                              for r in range(world)])
    else:
        lo, hi = check_range
        expected = _expected(numel, world, params.op, dtype, device)[lo:hi]
    if params.op == "avg":  # a division: allow its rounding
        return int((~torch.isclose(out, expected, rtol=1e-2, atol=1e-6)).sum())
    return int((out != expected).sum())  # small integers add exactly in every dtype


def summarize(params: Params, ranks: list[dict], *, world_size: int, backend: str) -> dict:
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

    return {"lab": "bench", "world_size": world_size, "backend": backend, "dtype": params.dtype,
            "op": params.op, "warmup": params.warmup, "iters": params.iters,
            "sizes": sorted({r["size"] for r in rows}), "rows": rows, "fit": fits,
            "ring_vs_all_reduce": versus_builtin("ring"),
            "pipelined_vs_all_reduce": versus_builtin("ring_pipelined"),
            "wrong": sum(r["wrong"] for r in rows),
            "notes": {"busbw": "all-reduce: algbw*2(n-1)/n; reduce-scatter, all-gather: "
                               "algbw*(n-1)/n",
                      "reduce_scatter": "torch.distributed.reduce_scatter_single",
                      "all_gather": "torch.distributed.all_gather_single"}}


def format_text(summary: dict) -> str:
    s = summary
    lines = [f"# collective sweep: {s['world_size']} ranks, {s['backend']}, {s['dtype']}, "
             f"op {s['op']}, warmup {s['warmup']}, iters {s['iters']}",
             f"# {'size':>12} {'count':>12} {'type':>9} {'redop':>6} {'impl':>15} "
             f"{'time':>11} {'min..max':>21} {'algbw':>8} {'busbw':>8} {'#wrong':>7}",
             f"# {'(B)':>12} {'(elements)':>12} {'':>9} {'':>6} {'':>15} "
             f"{'(us, median)':>11} {'(us)':>21} {'(GB/s)':>8} {'(GB/s)':>8}"]
    for r in s["rows"]:
        span = f"{r.get('min_us', r['time_us']):.1f}..{r.get('max_us', r['time_us']):.1f}"
        lines.append(f"  {r['size']:>12} {r['count']:>12} {r['dtype']:>9} {r['op']:>6} "
                     f"{r['impl']:>15} {r['time_us']:>11.1f} {span:>21} {r['algbw']:>8.3f} "
                     f"{r['busbw']:>8.3f} {r['wrong']:>7}")
    lines.append(f"# out of bounds values: {s['wrong']}")
    lines.append("# alpha-beta fit, T = steps*alpha + (busbw factor)*S/B:")
    for impl, fit in s["fit"].items():
        if fit is None:
            lines.append(f"#   {impl:>15}: no fit (needs 2+ ranks and 2+ sizes)")
        else:
            lines.append(f"#   {impl:>15}: alpha = {fit['alpha_s'] * 1e6:9.1f} us, "
                         f"B = {fit['bandwidth_GBps']:7.3f} GB/s "
                         f"(rms relative error {fit['rms_rel_err']:.0%})")
    for key, name in (("ring_vs_all_reduce", "our ring"),
                      ("pipelined_vs_all_reduce", "our pipelined ring")):
        if s.get(key):
            lines.append(f"# {name} vs dist.all_reduce (busbw ratio): " + ", ".join(
                f"{c['size']}: {c['ratio']:.2f}" for c in s[key] if c["ratio"]))
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    from labs.__main__ import main

    sys.exit(main(["bench", *sys.argv[1:]]))
