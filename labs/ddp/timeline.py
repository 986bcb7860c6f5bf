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

The model is the lab's MLP at ``timeline_hidden`` wide with
``timeline_batch`` samples per rank: wide enough that backward takes
milliseconds on a CPU core, so an all-reduce has something to hide behind.
"""

from __future__ import annotations

import dataclasses
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

from labs import timeline
from labs.context import shared_clock_origin
from labs.ddp.setup import make_model, shard_batches, wrap


def variants(p) -> dict[str, float | None]:
    """The variants to run, by name, with their bucket cap (None: naive)."""
    named: dict[str, float | None] = {"naive": None, "ddp": p.overlap_bucket_cap_mb}
    for cap in p.bucket_caps_mb:
        if cap != p.overlap_bucket_cap_mb:
            named[f"ddp@{cap:g}"] = cap
    return named


def ticks(p) -> int:
    return len(variants(p)) * (p.warmup + p.timeline_steps)


def _model_params(p, world: int):
    """The lab's parameters with the timeline's width and batch (the batch fits the data)."""
    return dataclasses.replace(p, hidden=p.timeline_hidden,
                               batch=min(p.timeline_batch, p.samples // world))


def record(model, opt, batches, *, warmup: int, origin: float, world: int,
           on_step=lambda: None) -> tuple[list[dict], int]:
    """This rank's spans of the steps after the first ``warmup``, and the all-reduces per step.

    ``model``: a DDP module (each bucket timed by a comm hook registered here) or
    a plain module, whose gradients then go through `naive_sync_gradients`' blocking
    all-reduce, one per parameter, after backward. ``batches``: ``(inputs,
    labels)`` per step; ``origin``: the ranks' shared clock origin
    (`shared_clock_origin`); ``on_step``: called as each step begins. The
    exercise bucketed-overlap records torch DDP on its own model with this
    (``labs.exercises.ddp_lanes``).
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
    """Every variant's spans from every rank; rank 0 returns the section."""
    q = _model_params(p, ctx.world_size)
    out = {}
    for name, cap in variants(p).items():
        spans, calls = _record(ctx, q, data, tick, name, cap)
        every = [None] * ctx.world_size
        dist.all_gather_object(every, spans)
        ranks = timeline.rebase([{"rank": r, "spans": s} for r, s in enumerate(every)])
        out[name] = timeline.variant(ranks,
                                     bucket_cap_mb=cap, allreduce_calls=calls)
    if ctx.rank != 0:
        return {}
    n_params = sum(t.numel() for t in make_model(q).parameters())
    return {"variants": out, "steps": p.timeline_steps, "hidden": q.hidden, "batch_per_rank": q.batch,
            "parameters": n_params, "gradient_bytes": n_params * 4,
            "caps": [{"bucket_cap_mb": cap, "variant": name} for name, cap in variants(p).items()
                     if cap is not None],
            "clock": "time.perf_counter, ms from the first measured span of each variant"}
