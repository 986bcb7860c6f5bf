"""What one rank of the straggler lab runs (``labs.straggler.lab`` is the lab and its arithmetic).

Launch it through the lab: ``python -m labs straggler --world-size 2``. The
synchronous variants are timed by the DDP lab's recorder
(``labs.ddp.timeline.record``: forward, backward, each bucket's all-reduce
and the optimizer, on the ranks' shared clock); local SGD by `train_local`,
which records the same spans, the models' average as the communication.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import (
    PostLocalSGDState,
    post_localSGD_hook,
)
from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager

from labs import timeline
from labs.context import shared_clock_origin
from labs.ddp.setup import flat_weights, make_dataset, shard_batches, wrap
from labs.ddp.timeline import record
from labs.straggler.lab import VARIANTS, Params
from labs.straggler.throttle import Throttle

SYNC_SHOWN = 3  # the synchronous variants' last steps kept for the timeline (local SGD: its last period)


def rows(spans: list[dict], steps: int) -> list[list[float]]:
    """Per measured step: [start, end, compute, comm] in ms, from one rank's spans."""
    out = []
    for step in range(steps):
        mine = [s for s in spans if s["step"] == step]
        length = {kind: sum(s["end_ms"] - s["start_ms"] for s in mine if s["kind"] == kind)
                  for kind in ("compute", "comm")}
        out.append([min(s["start_ms"] for s in mine), max(s["end_ms"] for s in mine),
                    length["compute"], length["comm"]])
    return out


def train_local(model, opt, batches, *, warmup: int, period: int, origin: float,
                on_step=lambda: None) -> list[dict]:
    """Post-local SGD: this rank's spans of the steps after the first ``warmup``.

    ``model``: a DDP module whose comm hook is ``post_localSGD_hook``: it
    all-reduces the gradients for the first ``warmup`` steps, none after. The
    models are averaged (one all-reduce of the parameters) at the end of every
    ``period`` steps after the warm-up: ``PeriodicModelAverager`` averages when
    its step count minus its warm-up divides by ``period``, so its warm-up is
    ours plus ``period - 1``. No barrier between steps: between averages each
    rank runs at its own speed.
    """
    averager = PeriodicModelAverager(period=period, warmup_steps=warmup + period - 1)
    params = list(model.parameters())
    size = sum(p.numel() * p.element_size() for p in params)
    spans = []

    def span(kind, name, start, end, step, **extra):
        spans.append({"kind": kind, "name": name, "start_ms": round((start - origin) * 1e3, 4),
                      "end_ms": round((end - origin) * 1e3, 4), "step": step, **extra})

    dist.barrier()
    for i, (inputs, labels) in enumerate(batches):
        on_step()
        opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(inputs), labels)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        averager.average_parameters(params)  # averages on call i when i - its warm-up divides by period
        t4 = time.perf_counter()
        step = i - warmup
        if step < 0:
            continue
        span("compute", "forward", t0, t1, step)
        span("compute", timeline.BACKWARD, t1, t2, step)
        span("compute", "optimizer", t2, t3, step)
        if i >= averager.warmup_steps and (i - averager.warmup_steps) % period == 0:
            span("comm", "average the models", t3, t4, step, bytes=size)
    return spans


def _loss(module, data) -> float:
    inputs, labels = data
    with torch.no_grad():
        return float(F.cross_entropy(module(inputs), labels))


def _digest(module) -> str:
    return hashlib.sha256(flat_weights(module).numpy().tobytes()).hexdigest()[:16]


def _variant(ctx, q: Params, data, indices, name: str, throttle: Throttle | None, tick) -> dict:
    """One variant of one seed on this rank: its rows, spans, final loss and weights."""
    inputs, labels = data
    batches = [(inputs[idx], labels[idx]) for idx in indices]
    model = wrap(ctx, q)  # every rank starts from rank 0's weights (DDP broadcasts them)
    opt = torch.optim.SGD(model.parameters(), lr=q.lr)
    if name == "local_sgd":
        state = PostLocalSGDState(process_group=None, subgroup=None, start_localSGD_iter=q.warmup,
                                  post_local_gradient_allreduce=False)
        model.register_comm_hook(state, post_localSGD_hook)
    origin, _clock = shared_clock_origin(ctx.device)
    if throttle is not None:
        throttle.set(1 if name == "even" else q.factor)
    try:
        with ctx.communicating():
            if name == "local_sgd":
                spans = train_local(model, opt, batches, warmup=q.warmup, period=q.period, origin=origin,
                                    on_step=lambda: tick(name))
            else:
                spans, _buckets = record(model, opt, batches, warmup=q.warmup, origin=origin,
                                         world=ctx.world_size, on_step=lambda: tick(name), start_together=False)
            dist.barrier()
    finally:
        if throttle is not None:
            throttle.set(1)
    steps = q.measured
    shown = q.period if name == "local_sgd" else SYNC_SHOWN
    return {"steps": rows(spans, steps), "spans": [s for s in spans if s["step"] >= steps - shown],
            "loss": _loss(model.module, data), "weights": _digest(model.module)}


class _Ticker:
    def __init__(self, ctx, total: int):
        self.ctx, self.total, self.done = ctx, total, 0

    def __call__(self, phase: str) -> None:
        self.ctx.progress(self.done, self.total, phase)
        self.done += 1


def run_rank(ctx, params: Params) -> dict:
    t0 = time.perf_counter()
    per_variant = params.warmup + params.measured
    tick = _Ticker(ctx, params.seeds * len(VARIANTS) * per_variant)
    throttle = Throttle.start(params.method) if ctx.rank == params.slow_rank else None
    seeds = []
    try:
        for i in range(params.seeds):
            q = dataclasses.replace(params, seed=params.seed + i)
            data = tuple(t.to(ctx.device) for t in make_dataset(q))
            indices = shard_batches(q, world_size=ctx.world_size, rank=ctx.rank, count=per_variant)
            seeds.append({name: _variant(ctx, q, data, indices, name, throttle, tick) for name in VARIANTS})
    finally:
        mechanism = throttle.method if throttle is not None else None
        if throttle is not None:
            throttle.close()
    ctx.progress(tick.total, tick.total, "done")
    keep = {"steps"} | ({"loss", "weights"} if ctx.rank == 0 else set())  # rank 0 speaks for the model
    kept = [{name: {k: v for k, v in seed[name].items() if k in keep | ({"spans"} if i == 0 else set())}
             for name in VARIANTS} for i, seed in enumerate(seeds)]
    return {"rank": ctx.rank, "mechanism": mechanism, "seeds": kept, "work_s": time.perf_counter() - t0}
