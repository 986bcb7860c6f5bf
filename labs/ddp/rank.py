"""What one rank of the DDP lab runs (``labs.ddp.lab`` is the lab): the lessons' two functions and the sections.

Launch it through the lab: ``python -m labs ddp --world-size 2`` (see ``labs.ddp.lab``).
The ``sampler`` and ``timeline`` sections are in ``labs.ddp.sampler`` and
``labs.ddp.timeline``; the data, the model and the measuring tools in
``labs.ddp.setup``.
"""

from __future__ import annotations

import contextlib
import statistics
import time

import torch
import torch._dynamo  # DDP imports it on first use; a forked rank inherits it
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import (
    allreduce_hook,
    fp16_compress_hook,
)

from labs.ddp import sampler as ddp_sampler
from labs.ddp import timeline as ddp_timeline
from labs.ddp.lab import Params
from labs.ddp.setup import (
    clock,
    counting_hook,
    flat_weights,
    make_dataset,
    make_model,
    max_over_ranks,
    median_ms,
    overlap_params,
    shard_batches,
    spread_ms,
    wrap,
)
from labs.model import bus_factor

# --------------------------------------------------------------------------
# The two functions the lessons show


def naive_sync_gradients(model, world_size):
    """Average gradients across ranks by hand, after backward has finished.

    One blocking all-reduce per parameter, one after another: correct, but
    the communication starts only when all of backward is done, so none of
    it overlaps with computation, and small tensors pay the latency each.
    """
    for param in model.parameters():
        if param.grad is not None:
            dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)
            param.grad /= world_size


def ddp_train_step(model, optimizer, inputs, targets):
    """One training step of a DistributedDataParallel model; returns the local loss.

    It reads like single-process code. DDP's autograd hooks start an
    all-reduce for each gradient bucket as soon as backward has filled it,
    while backward carries on with earlier layers; when ``backward()``
    returns, every rank holds the same averaged gradients, so the optimizer
    steps keep the replicas identical.
    """
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(inputs), targets)
    loss.backward()
    optimizer.step()
    return loss.detach()


# --------------------------------------------------------------------------
# Helpers for measuring


class _Ticker:
    """Counts steps across sections and reports them (fault injection fires here)."""

    def __init__(self, ctx, total: int):
        self.ctx, self.total, self.done = ctx, total, 0

    def __call__(self, phase: str, n: int = 1) -> None:
        self.ctx.progress(self.done, self.total, phase)
        self.done += n


def _plan(p: Params, world: int) -> dict[str, int]:
    """Progress ticks per section, so that fractions are right from the start."""
    run = p.warmup + p.steps
    sizes = [k for k in p.scaling_world_sizes if k <= world]
    ticks = {"equivalence": p.steps, "sampler": 1, "breakdown": 4 * run,
             "buckets": len(p.bucket_caps_mb) * run,
             "no_sync": 2 * max(1, p.steps // p.accumulation), "fp16": 2 * p.steps,
             "scaling": len(sizes) * run, "timeline": ddp_timeline.ticks(p)}
    return {s: ticks[s] for s in p.sections}


# --------------------------------------------------------------------------
# Sections


def _equivalence(ctx, p, data, tick) -> dict:
    inputs, labels = data
    world, rank = ctx.world_size, ctx.rank
    model = wrap(ctx, p)
    opt = torch.optim.SGD(model.parameters(), lr=p.lr)
    mine = shard_batches(p, world_size=world, rank=rank, count=p.steps)
    if rank == 0:  # the single process with the global batch n*b, run beside rank 0
        every = [shard_batches(p, world_size=world, rank=r, count=p.steps) for r in range(world)]
        single = make_model(p).to(ctx.device)
        single_opt = torch.optim.SGD(single.parameters(), lr=p.lr)
    rank_diff, losses, single_losses = 0.0, [], []
    for step in range(p.steps):
        tick("equivalence")
        loss = ddp_train_step(model, opt, inputs[mine[step]], labels[mine[step]])
        # Are the replicas still identical? Compare with rank 0's weights.
        flat = flat_weights(model.module)
        ref = flat.clone()
        dist.broadcast(ref, 0)
        rank_diff = max(rank_diff, max_over_ranks(ctx, [float((flat - ref).abs().max())])[0])
        dist.all_reduce(loss)
        losses.append(float(loss) / world)
        if rank == 0:
            batch = [i for r in range(world) for i in every[r][step]]
            single_opt.zero_grad()
            single_loss = F.cross_entropy(single(inputs[batch]), labels[batch])
            single_loss.backward()
            single_opt.step()
            single_losses.append(float(single_loss))
    if rank != 0:
        return {}
    diff = float((flat_weights(model.module) - flat_weights(single)).abs().max())
    return {"steps": p.steps, "batch_per_rank": p.batch, "global_batch": p.batch * world,
            "max_abs_diff_vs_single_process": diff, "tolerance": p.tolerance,
            "equivalent": diff <= p.tolerance,
            "max_abs_diff_between_ranks": rank_diff, "ranks_identical": rank_diff == 0.0,
            "losses": losses, "single_process_losses": single_losses}


def bucketed_sync_gradients(model, world_size, bucket_numels):
    """Average gradients after backward in buckets: one all-reduce per bucket, not per tensor.

    The same buckets DDP builds (``bucket_numels``, in DDP's order: the last
    layers first), launched as DDP launches them (asynchronously, all in
    flight together), but only when backward has finished: the saving over
    `naive_sync_gradients` is bucketing alone, fewer and larger all-reduces,
    with no overlap with backward.
    """
    grads = [q.grad for q in reversed(list(model.parameters())) if q.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    # Views of flat: each reduces its part of flat in place.
    works = [dist.all_reduce(bucket, op=dist.ReduceOp.SUM, async_op=True)
             for bucket in flat.split(bucket_numels)]
    for work in works:
        work.wait()
    flat /= world_size
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def _breakdown(ctx, p, data, tick) -> dict:
    """Three ways to average the same gradients, step by step:

    - naive: backward, then one blocking all-reduce per tensor;
    - bucketed: backward, then DDP's buckets, all launched at once;
    - ddp: DDP, whose hooks start each bucket's all-reduce during backward.

    naive - bucketed is what bucketing saves (fewer calls, each paying the
    per-call latency alpha); bucketed - ddp's exposed communication is what
    overlap hides, at most the backward time (measured without communication,
    under no_sync). The model is the overlap model (``overlap_params``: the
    timeline's MLP and batch, backward long enough to hide something
    behind) and the DDP uses ``overlap_bucket_cap_mb``: at the default 25 MB
    the MLP is one bucket, ready only when backward ends, so nothing could
    overlap.
    """
    inputs, labels = data
    world, rank = ctx.world_size, ctx.rank
    q = overlap_params(p, world)
    batches = shard_batches(q, world_size=world, rank=rank, count=q.warmup + q.steps)
    layout = {"numels": []}

    def one_step(kind, model, opt, idx):
        tick(f"breakdown: {kind}")
        x, y = inputs[idx], labels[idx]
        dist.barrier()  # start each step together: we time the step, not the skew
        opt.zero_grad(set_to_none=True)
        if kind == "ddp":
            layout["numels"].clear()  # keep the last step's buckets (DDP rebuilds after the first)
        sync = model.no_sync() if kind == "ddp compute only" else contextlib.nullcontext()
        with sync:
            t0 = clock(ctx)
            loss = F.cross_entropy(model(x), y)
            t1 = clock(ctx)
            loss.backward()
            t2 = clock(ctx)
        if kind == "naive":
            naive_sync_gradients(model, world)
        elif kind == "bucketed":
            bucketed_sync_gradients(model, world, layout["numels"])
        t3 = clock(ctx)
        if kind != "ddp compute only":
            opt.step()
        t4 = clock(ctx)
        return [t1 - t0, t2 - t1, t3 - t2, t4 - t3]

    def fresh():
        model = make_model(q).to(ctx.device)
        for param in model.parameters():  # what DDP does for us: start from rank 0's weights
            dist.broadcast(param.data, 0)
        return model, torch.optim.SGD(model.parameters(), lr=p.lr)

    def record_layout(_state, bucket):
        layout["numels"].append(bucket.buffer().numel())
        return allreduce_hook(None, bucket)

    with ctx.communicating():
        naive, naive_opt = fresh()
        bucketed, bucketed_opt = fresh()
        ddp = wrap(ctx, q, bucket_cap_mb=q.overlap_bucket_cap_mb)
        ddp.register_comm_hook(None, record_layout)
        ddp_opt = torch.optim.SGD(ddp.parameters(), lr=p.lr)
        # The four kinds take turns, step by step, so that each step index
        # meets the same load on a shared machine: the differences below
        # pair the i-th step of each kind. DDP goes before "bucketed", which
        # reuses the buckets DDP has just built.
        order = (("naive", naive, naive_opt), ("ddp", ddp, ddp_opt),
                 ("ddp compute only", ddp, ddp_opt), ("bucketed", bucketed, bucketed_opt))
        rows = {kind: [] for kind, _m, _o in order}
        for i, idx in enumerate(batches):
            for kind, model, opt in order:
                row = one_step(kind, model, opt, idx)
                if i >= p.warmup:
                    rows[kind].append(row)
        buckets = len(layout["numels"])
        same = float((flat_weights(naive) - flat_weights(ddp.module)).abs().max())
        # Each step as its slowest rank saw it, part by part.
        naive_rows, ddp_rows, compute_rows, bucketed_rows = (
            torch.tensor(max_over_ranks(ctx, [v for r in rows[kind] for v in r])).view(-1, 4).tolist()
            for kind, _m, _o in order)

    def column(rows, k):
        return [r[k] for r in rows]

    def medians(rows):
        return [statistics.median(column(rows, k)) * 1e3 for k in range(4)]

    n_fwd, n_bwd, n_comm, n_opt = medians(naive_rows)
    b_fwd, b_bwd, b_comm, b_opt = medians(bucketed_rows)
    d_fwd, d_bwd, _, d_opt = medians(ddp_rows)
    c_bwd = medians(compute_rows)[1]
    # Step by step (the i-th step of each loop): DDP's backward beyond pure
    # backward is its exposed communication; what bucketing saved; what
    # overlap hid, never more than the backward it hid behind.
    exposed = [max(0.0, d - c) for d, c in zip(column(ddp_rows, 1), column(compute_rows, 1), strict=True)]
    saved = [n - b for n, b in zip(column(naive_rows, 2), column(bucketed_rows, 2), strict=True)]
    hidden = [min(c, max(0.0, b - e)) for b, e, c
              in zip(column(bucketed_rows, 2), exposed, column(compute_rows, 1), strict=True)]
    n_params = sum(t.numel() for t in naive.parameters())
    tensors = len(list(naive.parameters()))
    saved_ms = spread_ms(saved)
    return {
        "unit": "ms (median step, slowest rank)",
        "steps": p.steps, "hidden": q.hidden, "depth": q.depth, "batch_per_rank": q.batch,
        "parameters": n_params, "gradient_bytes": n_params * 4, "tensors": tensors,
        "bucket_cap_mb": p.overlap_bucket_cap_mb, "buckets": buckets,
        "naive": {"forward": n_fwd, "backward": n_bwd, "exposed_comm": n_comm,
                  "optimizer": n_opt, "total": n_fwd + n_bwd + n_comm + n_opt,
                  "allreduce_calls": tensors},
        "bucketed": {"forward": b_fwd, "backward": b_bwd, "exposed_comm": b_comm,
                     "optimizer": b_opt, "total": b_fwd + b_bwd + b_comm + b_opt,
                     "allreduce_calls": buckets},
        "ddp": {"forward": d_fwd, "backward": c_bwd, "exposed_comm": statistics.median(exposed) * 1e3,
                "optimizer": d_opt, "total": d_fwd + d_bwd + d_opt,
                "backward_with_comm": d_bwd, "allreduce_calls": buckets},
        # Two effects, two names: never one reported as the other.
        "bucketing_saving": {"ms": saved_ms, "calls_before": tensors, "calls_after": buckets,
                             "per_call_ms": (saved_ms["median"] / (tensors - buckets)
                                             if tensors > buckets else None)},
        "overlap_hidden": {"ms": spread_ms(hidden), "backward_ms": spread_ms(column(compute_rows, 1)),
                           "buckets": buckets},
        "max_abs_diff_naive_vs_ddp_weights": same,
    }


def _buckets(ctx, p, data, tick) -> dict:
    """Step time and all-reduces per step at each of ``bucket_caps_mb``, on the overlap model
    (``overlap_params``): small buckets pay alpha more often, large ones start late."""
    inputs, labels = data
    world, rank = ctx.world_size, ctx.rank
    q = overlap_params(p, world)
    batches = shard_batches(q, world_size=world, rank=rank, count=q.warmup + q.steps)
    rows = []
    for cap in p.bucket_caps_mb:
        model = wrap(ctx, q, bucket_cap_mb=cap)
        counter = {"calls": 0, "bytes": 0}
        model.register_comm_hook(None, counting_hook(allreduce_hook, counter, 4))
        opt = torch.optim.SGD(model.parameters(), lr=p.lr)
        times = []
        with ctx.communicating():
            for i, idx in enumerate(batches):
                tick(f"buckets: {cap} MB")
                counter.update(calls=0, bytes=0)
                dist.barrier()
                t0 = clock(ctx)
                ddp_train_step(model, opt, inputs[idx], labels[idx])
                if i >= p.warmup:
                    times.append(clock(ctx) - t0)
        step_ms = max_over_ranks(ctx, [median_ms(times)])[0]
        # counter holds the last step: DDP rebuilds its buckets after the first one
        rows.append({"bucket_cap_mb": cap, "allreduce_calls_per_step": counter["calls"],
                     "bytes_per_step": counter["bytes"], "step_ms": step_ms})
    return {"rows": rows, "default_bucket_cap_mb": 25,
            "first_bucket_bytes": dist._DEFAULT_FIRST_BUCKET_BYTES} if rank == 0 else {}


def _no_sync(ctx, p, data, tick) -> dict:
    inputs, labels = data
    world, rank = ctx.world_size, ctx.rank
    k = p.accumulation
    opt_steps = max(1, p.steps // k)
    batches = shard_batches(p, world_size=world, rank=rank, count=opt_steps * k)
    out, first_grads = {}, {}
    for mode in ("no_sync", "sync_every_micro_batch"):
        model = wrap(ctx, p)
        counter = {"calls": 0, "bytes": 0}
        model.register_comm_hook(None, counting_hook(allreduce_hook, counter, 4))
        opt = torch.optim.SGD(model.parameters(), lr=p.lr)
        times = []
        with ctx.communicating():
            for s in range(opt_steps):
                tick(f"no_sync: {mode}")
                counter.update(calls=0, bytes=0)
                dist.barrier()
                t0 = clock(ctx)
                opt.zero_grad(set_to_none=True)
                for j in range(k):
                    idx = batches[s * k + j]
                    # Only the last micro-batch needs synchronised gradients: the
                    # others just accumulate locally inside no_sync().
                    skip = mode == "no_sync" and j < k - 1
                    with model.no_sync() if skip else contextlib.nullcontext():
                        loss = F.cross_entropy(model(inputs[idx]), labels[idx]) / k
                        loss.backward()
                if s == 0:
                    first_grads[mode] = torch.cat([q.grad.flatten() for q in model.parameters()])
                opt.step()
                times.append(clock(ctx) - t0)
        out[mode] = {"allreduce_calls_per_optimizer_step": counter["calls"],
                     "bytes_per_optimizer_step": counter["bytes"],
                     "optimizer_step_ms": max_over_ranks(ctx, [median_ms(times)])[0]}
    diff = float((first_grads["no_sync"] - first_grads["sync_every_micro_batch"]).abs().max())
    if rank != 0:
        return {}
    return {"micro_batches": k, "optimizer_steps": opt_steps, **out,
            "max_abs_grad_diff": diff}


def _fp16(ctx, p, data, tick) -> dict:
    inputs, labels = data
    world, rank = ctx.world_size, ctx.rank
    batches = shard_batches(p, world_size=world, rank=rank, count=p.steps)
    runs, weights = {}, {}
    for name, hook, wire in (("fp32", allreduce_hook, 4), ("fp16", fp16_compress_hook, 2)):
        model = wrap(ctx, p)
        counter = {"calls": 0, "bytes": 0}
        model.register_comm_hook(None, counting_hook(hook, counter, wire))
        opt = torch.optim.SGD(model.parameters(), lr=p.lr)
        losses, times = [], []
        with ctx.communicating():
            for idx in batches:
                tick(f"fp16: {name}")
                t0 = clock(ctx)
                loss = ddp_train_step(model, opt, inputs[idx], labels[idx])
                times.append(clock(ctx) - t0)
                dist.all_reduce(loss)
                losses.append(float(loss) / world)
        payload = counter["bytes"] / p.steps
        runs[name] = {"payload_bytes_per_step": payload,
                      "ring_bytes_sent_per_rank_per_step":
                          payload * bus_factor("all_reduce", world),
                      "final_loss": losses[-1], "losses": losses,
                      "step_ms": max_over_ranks(ctx, [median_ms(times)])[0]}
        weights[name] = flat_weights(model.module)
    if rank != 0:
        return {}
    return {**runs, "bytes_ratio": runs["fp16"]["payload_bytes_per_step"]
            / runs["fp32"]["payload_bytes_per_step"],
            "max_abs_weight_diff": float((weights["fp16"] - weights["fp32"]).abs().max())}


def _scaling(ctx, p, data, tick) -> dict:
    inputs, labels = data
    world, rank = ctx.world_size, ctx.rank
    rows = []
    for k in [s for s in p.scaling_world_sizes if s <= world]:
        group = dist.new_group(list(range(k)))  # every rank must call new_group
        run = p.warmup + p.steps
        if rank < k:
            model = wrap(ctx, p, process_group=group)
            opt = torch.optim.SGD(model.parameters(), lr=p.lr)
            batches = shard_batches(p, world_size=k, rank=rank, count=run)
            with ctx.communicating():
                for i, idx in enumerate(batches):
                    tick(f"scaling: {k} rank(s)")
                    if i == p.warmup:
                        dist.barrier(group=group)
                        t0 = clock(ctx)
                    ddp_train_step(model, opt, inputs[idx], labels[idx])
                elapsed = max_over_ranks(ctx, [clock(ctx) - t0], group=group)[0]
            if rank == 0:
                rows.append({"world_size": k, "seconds": elapsed, "steps": p.steps,
                             "samples_per_s": k * p.batch * p.steps / elapsed,
                             "step_ms": elapsed / p.steps * 1e3})
        else:
            tick(f"scaling: idle while {k} rank(s) train", n=run)
        with ctx.communicating():
            dist.barrier()
    if rank != 0:
        return {}
    base = rows[0]["samples_per_s"] / rows[0]["world_size"]
    for row in rows:
        row["speedup"] = row["samples_per_s"] / rows[0]["samples_per_s"]
        row["efficiency"] = row["samples_per_s"] / (row["world_size"] * base)
    return {"rows": rows, "batch_per_rank": p.batch,
            "note": "weak scaling: each rank keeps its batch; all ranks share this machine's "
                    "CPU cores, so efficiency here reflects the machine as much as DDP"}


_RUN = {"equivalence": _equivalence, "sampler": ddp_sampler.run, "breakdown": _breakdown,
        "buckets": _buckets, "no_sync": _no_sync, "fp16": _fp16, "scaling": _scaling,
        "timeline": ddp_timeline.run}


def run_rank(ctx, params: Params) -> dict:
    t0 = time.perf_counter()
    data = tuple(t.to(ctx.device) for t in make_dataset(params))
    plan = _plan(params, ctx.world_size)
    tick = _Ticker(ctx, sum(plan.values()))
    sections = {}
    for name in params.sections:
        start = tick.done
        sections[name] = _RUN[name](ctx, params, data, tick)
        tick.done = start + plan[name]  # keep the count exact whatever the section did
    ctx.progress(tick.total, tick.total, "done")
    model = make_model(params)
    n_params = sum(t.numel() for t in model.parameters())
    return {"rank": ctx.rank, "sections": sections if ctx.rank == 0 else {},
            "parameters": n_params, "work_s": time.perf_counter() - t0}
