"""The bench lab's ranks: every row of the sweep timed and checked (``labs.bench.lab`` is the lab).

Each row fills its buffers with small integers that every dtype adds exactly,
times ``iters`` calls (each call's time is its slowest rank's), then checks a
separate call on fresh input against the exact answer.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from labs.bench.lab import COLLECTIVE, GB, Params, sweep_sizes
from labs.model import algbw, busbw
from labs.ring.allreduce import (
    TORCH_DTYPES,
    naive_allreduce,
    ring_allreduce,
    ring_allreduce_pipelined,
)

# Our hand-written all-reduces, each compared with dist.all_reduce in the summary.
OURS = {"ring": ring_allreduce, "ring_pipelined": ring_allreduce_pipelined,
        "naive": naive_allreduce}


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
    dtype = TORCH_DTYPES[params.dtype]
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
    """Every row of the sweep; ``timed_s`` the timed calls alone, ``work_s`` the rank's whole
    work (so that the launcher's overhead beyond it is starting and stopping processes)."""
    began = time.perf_counter()
    world, rank = ctx.world_size, ctx.rank
    dtype = TORCH_DTYPES[params.dtype]
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
    return {"rank": rank, "rows": rows if rank == 0 else [], "timed_s": work, "work_s": time.perf_counter() - began}


def _count_wrong(impl, out, check_range, numel, world, params, device) -> int:
    dtype = TORCH_DTYPES[params.dtype]
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
