"""The DDP lab's ``timeline`` section: what every rank computes and communicates, when.

    python -m labs ddp --world-size 2 --sections timeline --trace traces/ --json

Two ways to average the gradients, each run for a few steps on every rank:

- ``naive``: backward, then `naive_sync_gradients`' blocking all-reduce per
  parameter: communication starts only when backward has ended;
- ``ddp``: torch DDP at ``overlap_bucket_cap_mb`` (and ``ddp@<cap>`` for each
  of ``bucket_caps_mb``): each bucket's all-reduce starts as soon as backward
  has filled it, while backward goes on with earlier layers.

The instrumentation is wall-clock spans (``time.perf_counter``, one clock
for all ranks on one host, from `shared_clock_origin`): forward, backward and
the optimizer around the calls; each naive all-reduce around the blocking
call; each DDP bucket from its comm hook's launch to the moment its future
completes (a callback on gloo's thread); each comm span carries the bytes
it reduced. DDP's ``backward()`` returns only
once every bucket is reduced, so its backward compute span ends at the last
bucket's launch: the last gradient is ready then, and what follows is
waiting. ``labs.timeline`` turns the spans into the overlap fraction,
exposed communication and idle time, and into Chrome traces.

The model is the overlap model (``labs.ddp.setup.overlap_params``: the MLP
``overlap_hidden`` wide and ``overlap_depth`` deep, ``overlap_batch``
samples per rank), the breakdown's too: backward takes tens of
milliseconds on a CPU core, in a bucket or more per layer, so the
all-reduces have something to hide behind.

Last, `calibrate` times ``dist.all_reduce`` alone at sizes up to the
gradients' and fits the alpha-beta model to it (``labs.model``): the page's
step model then has a fit from this run, at its world size and backend, on
the machine as loaded at that moment, whether or not a benchmark ran.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

from labs import timeline
from labs.context import shared_clock_origin
from labs.ddp.setup import make_model, overlap_params, shard_batches, wrap
from labs.model import fit_alpha_beta

# The calibration: message sizes from FIT_MIN_BYTES, times 4, until one holds every
# gradient (at most FIT_MAX_BYTES); each timed FIT_ITERS times after FIT_WARMUP calls.
FIT_MIN_BYTES, FIT_MAX_BYTES = 4 << 10, 16 << 20
FIT_WARMUP, FIT_ITERS = 2, 9


def variants(p) -> dict[str, float | None]:
    """The variants to run, by name, with their bucket cap (None: naive)."""
    named: dict[str, float | None] = {"naive": None, "ddp": p.overlap_bucket_cap_mb}
    for cap in p.bucket_caps_mb:
        if cap != p.overlap_bucket_cap_mb:
            named[f"ddp@{cap:g}"] = cap
    return named


def ticks(p) -> int:
    return len(variants(p)) * (p.warmup + p.timeline_steps) + 1  # + the calibration


def fit_sizes(gradient_bytes: int) -> list[int]:
    """The calibration's message sizes: powers of 4 from `FIT_MIN_BYTES` up to the first
    that holds all ``gradient_bytes`` (never past `FIT_MAX_BYTES`)."""
    sizes = [FIT_MIN_BYTES]
    while sizes[-1] < min(gradient_bytes, FIT_MAX_BYTES):
        sizes.append(sizes[-1] * 4)
    return sizes


def calibrate(ctx, sizes: list[int]) -> dict | None:
    """``dist.all_reduce`` of float32 buffers of ``sizes`` bytes, each timed `FIT_ITERS` times
    on its own (a call's time is its slowest rank's, as in the bench lab), and the
    alpha-beta fit of the medians (`labs.model.fit_alpha_beta`, with the sizes and
    median times in ``sizes`` and ``time_us``); None on one rank."""
    if ctx.world_size < 2:
        return None
    medians = []
    with ctx.communicating():
        for size in sizes:
            buf = torch.ones(size // 4, device=ctx.device)
            for _ in range(FIT_WARMUP):
                dist.all_reduce(buf)
            calls = []
            for _ in range(FIT_ITERS):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(buf)
                if ctx.device.type == "cuda":
                    torch.cuda.synchronize(ctx.device)
                calls.append(time.perf_counter() - t0)
            slowest = torch.tensor(calls, dtype=torch.float64, device=ctx.device)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            medians.append(statistics.median(slowest.tolist()))
    fit = fit_alpha_beta(sizes, medians, ctx.world_size)
    if fit is None:
        return None
    return {**fit, "sizes": sizes, "time_us": [m * 1e6 for m in medians]}


def record(model, opt, batches, *, warmup: int, origin: float, world: int,
           on_step=lambda: None, start_together: bool = True) -> tuple[list[dict], int]:
    """This rank's spans of the steps after the first ``warmup``, and the all-reduces per step.

    ``model``: a DDP module (each bucket timed by a comm hook registered here) or
    a plain module, whose gradients then go through `naive_sync_gradients`' blocking
    all-reduce, one per parameter, after backward. ``batches``: ``(inputs,
    labels)`` per step; ``origin``: the ranks' shared clock origin
    (`shared_clock_origin`); ``on_step``: called as each step begins. The
    exercise bucketed-overlap records torch DDP on its own model with this
    (``labs.exercises.ddp_lanes``). ``start_together``: a barrier before each step,
    so that each rank's spans are its own work (the straggler lab, which times
    a training loop as it runs, turns it off: the all-reduce alone paces it).
    """
    launches: list[float] = []
    done: list[tuple[int, float, float, int]] = []

    def timed_hook(_state, bucket):  # allreduce_hook, its launch and completion time-stamped
        start = time.perf_counter()
        launches.append(start)
        index, size = bucket.index(), bucket.buffer().numel() * bucket.buffer().element_size()

        def finished(fut):
            done.append((index, start, time.perf_counter(), size))  # on gloo's thread, as it completes
            return fut.value()

        return allreduce_hook(None, bucket).then(finished)

    naive = not isinstance(model, DistributedDataParallel)
    if naive:
        named = list(model.named_parameters())
    else:
        model.register_comm_hook(None, timed_hook)
    spans, buckets = [], 0

    def span(kind, label, start, end, step, **extra):
        spans.append({"kind": kind, "name": label, "start_ms": round((start - origin) * 1e3, 4),
                      "end_ms": round((end - origin) * 1e3, 4), "step": step, **extra})

    for i, (inputs, labels) in enumerate(batches):
        on_step()
        step = i - warmup
        if start_together:
            dist.barrier()  # the steps start together: what follows is this rank's own
        launches.clear()
        done.clear()
        opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(inputs), labels)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        comm = []
        if naive:  # naive_sync_gradients, each all-reduce timed
            for pname, param in named:
                a = time.perf_counter()
                dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)
                param.grad /= world
                comm.append((f"all-reduce {pname}", a, time.perf_counter(),
                             param.grad.numel() * param.grad.element_size()))
            backward_end = t2
        else:
            comm = [(f"bucket {index}", a, b, size) for index, a, b, size in sorted(done)]
            backward_end = max(launches, default=t2)  # the last gradient was ready then
            buckets = len(launches)
        t3 = time.perf_counter()
        opt.step()
        t4 = time.perf_counter()
        if step < 0:
            continue
        span("compute", "forward", t0, t1, step)
        span("compute", timeline.BACKWARD, t1, backward_end, step)
        span("compute", "optimizer", t3, t4, step)
        for label, a, b, size in comm:
            span("comm", label, a, b, step, bytes=size)
    return spans, len(named) if naive else buckets


def _record(ctx, q, data, tick, name: str, cap: float | None) -> tuple[list[dict], int]:
    """This rank's spans of ``q.timeline_steps`` measured steps, and the buckets per step."""
    inputs, labels = data
    indices = shard_batches(q, world_size=ctx.world_size, rank=ctx.rank, count=q.warmup + q.timeline_steps)
    if cap is None:
        model = make_model(q).to(ctx.device)
        for param in model.parameters():  # start from rank 0's weights, as DDP would
            dist.broadcast(param.data, 0)
    else:
        model = wrap(ctx, q, bucket_cap_mb=cap)
    opt = torch.optim.SGD(model.parameters(), lr=q.lr)
    origin, _clock = shared_clock_origin(ctx.device)  # spans of all ranks on one axis
    with ctx.communicating():
        return record(model, opt, [(inputs[idx], labels[idx]) for idx in indices], warmup=q.warmup,
                      origin=origin, world=ctx.world_size, on_step=lambda: tick(f"timeline: {name}"))


def run(ctx, p, data, tick) -> dict:
    """Every variant's spans from every rank, then the calibration; rank 0 returns the section."""
    q = overlap_params(p, ctx.world_size)
    out = {}
    for name, cap in variants(p).items():
        spans, calls = _record(ctx, q, data, tick, name, cap)
        every = [None] * ctx.world_size
        dist.all_gather_object(every, spans)
        ranks = timeline.rebase([{"rank": r, "spans": s} for r, s in enumerate(every)])
        out[name] = timeline.variant(ranks,
                                     bucket_cap_mb=cap, allreduce_calls=calls)
    n_params = sum(t.numel() for t in make_model(q).parameters())
    tick("timeline: timing dist.all_reduce alone")
    fit = calibrate(ctx, fit_sizes(n_params * 4))
    if ctx.rank != 0:
        return {}
    return {"variants": out, "steps": p.timeline_steps, "hidden": q.hidden, "depth": q.depth,
            "batch_per_rank": q.batch, "parameters": n_params, "gradient_bytes": n_params * 4,
            "caps": [{"bucket_cap_mb": cap, "variant": name} for name, cap in variants(p).items()
                     if cap is not None],
            "fit": fit,
            "clock": "time.perf_counter, ms from the first measured span of each variant"}
