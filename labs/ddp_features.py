"""The DDP lab's sections on what DDP offers past the basic step.

- `no_sync`: gradient accumulation over k micro-batches with one all-reduce
  per optimizer step instead of k, and the same gradients;
- `fp16`: the fp16 compression comm hook: half the bytes on the wire, and
  the loss beside the fp32 run's;
- `scaling`: throughput and scaling efficiency on 1, 2, 4 ranks (subgroups
  of this run; fixed batch per rank).

Each takes ``(ctx, params, data, tick)`` like every section of ``labs.ddp``
and returns its numbers on rank 0 (``{}`` elsewhere).
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import (
    allreduce_hook,
    fp16_compress_hook,
)

from labs.ddp import (
    _clock,
    _counting_hook,
    _flat,
    _max_over_ranks,
    _median_ms,
    _wrap,
    ddp_train_step,
    shard_batches,
)
from labs.model import bus_factor


def no_sync(ctx, p, data, tick) -> dict:
    inputs, labels = data
    world, rank = ctx.world_size, ctx.rank
    k = p.accumulation
    opt_steps = max(1, p.steps // k)
    batches = shard_batches(p, world_size=world, rank=rank, count=opt_steps * k)
    out, first_grads = {}, {}
    for mode in ("no_sync", "sync_every_micro_batch"):
        model = _wrap(ctx, p)
        counter = {"calls": 0, "bytes": 0}
        model.register_comm_hook(None, _counting_hook(allreduce_hook, counter, 4))
        opt = torch.optim.SGD(model.parameters(), lr=p.lr)
        times = []
        with ctx.communicating():
            for s in range(opt_steps):
                tick(f"no_sync: {mode}")
                counter.update(calls=0, bytes=0)
                dist.barrier()
                t0 = _clock(ctx)
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
                times.append(_clock(ctx) - t0)
        out[mode] = {"allreduce_calls_per_optimizer_step": counter["calls"],
                     "bytes_per_optimizer_step": counter["bytes"],
                     "optimizer_step_ms": _max_over_ranks(ctx, [_median_ms(times)])[0]}
    diff = float((first_grads["no_sync"] - first_grads["sync_every_micro_batch"]).abs().max())
    if rank != 0:
        return {}
    return {"micro_batches": k, "optimizer_steps": opt_steps, **out,
            "max_abs_grad_diff": diff}


def fp16(ctx, p, data, tick) -> dict:
    inputs, labels = data
    world, rank = ctx.world_size, ctx.rank
    batches = shard_batches(p, world_size=world, rank=rank, count=p.steps)
    runs, weights = {}, {}
    for name, hook, wire in (("fp32", allreduce_hook, 4), ("fp16", fp16_compress_hook, 2)):
        model = _wrap(ctx, p)
        counter = {"calls": 0, "bytes": 0}
        model.register_comm_hook(None, _counting_hook(hook, counter, wire))
        opt = torch.optim.SGD(model.parameters(), lr=p.lr)
        losses, times = [], []
        with ctx.communicating():
            for idx in batches:
                tick(f"fp16: {name}")
                t0 = _clock(ctx)
                loss = ddp_train_step(model, opt, inputs[idx], labels[idx])
                times.append(_clock(ctx) - t0)
                dist.all_reduce(loss)
                losses.append(float(loss) / world)
        payload = counter["bytes"] / p.steps
        runs[name] = {"payload_bytes_per_step": payload,
                      "ring_bytes_sent_per_rank_per_step":
                          payload * bus_factor("all_reduce", world),
                      "final_loss": losses[-1], "losses": losses,
                      "step_ms": _max_over_ranks(ctx, [_median_ms(times)])[0]}
        weights[name] = _flat(model.module)
    if rank != 0:
        return {}
    return {**runs, "bytes_ratio": runs["fp16"]["payload_bytes_per_step"]
            / runs["fp32"]["payload_bytes_per_step"],
            "max_abs_weight_diff": float((weights["fp16"] - weights["fp32"]).abs().max())}


def scaling(ctx, p, data, tick) -> dict:
    inputs, labels = data
    world, rank = ctx.world_size, ctx.rank
    rows = []
    for k in [s for s in p.scaling_world_sizes if s <= world]:
        group = dist.new_group(list(range(k)))  # every rank must call new_group
        run = p.warmup + p.steps
        if rank < k:
            model = _wrap(ctx, p, process_group=group)
            opt = torch.optim.SGD(model.parameters(), lr=p.lr)
            batches = shard_batches(p, world_size=k, rank=rank, count=run)
            with ctx.communicating():
                for i, idx in enumerate(batches):
                    tick(f"scaling: {k} rank(s)")
                    if i == p.warmup:
                        dist.barrier(group=group)
                        t0 = _clock(ctx)
                    ddp_train_step(model, opt, inputs[idx], labels[idx])
                elapsed = _max_over_ranks(ctx, [_clock(ctx) - t0], group=group)[0]
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
