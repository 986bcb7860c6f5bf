"""What one rank of the compression lab runs (``labs.compression.lab`` is the lab).

Launch it through the lab: ``python -m labs compression --world-size 2``.
For each strategy and seed, a fresh MLP is wrapped in DDP with that
strategy's hook (``labs.compression.hooks``) and trained ``steps`` steps of
SGD with momentum on a synthetic task: inputs drawn from a Gaussian, labels
given by a fixed random "teacher" network, so nothing is downloaded and the
task is the same for every seed. A seed fixes the student's initial weights
and the batches, the same under every strategy: the runs of one seed differ
only by what the hook did to the gradients. Every ``eval_every`` steps the
model's loss on a fixed evaluation set is recorded.
"""

from __future__ import annotations

import hashlib
import time

import torch
import torch._dynamo  # DDP imports it on first use; a forked rank inherits it
import torch.distributed as dist  # noqa: F401 - the hooks' collectives; imported ahead for forked ranks
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from labs.compression.hooks import WireCount, make_hook
from labs.compression.lab import Params, power_rank

TASK_SEED = 1234  # the teacher and the evaluation set: one task for every seed


def make_model(p: Params, seed: int) -> nn.Sequential:
    """``depth`` hidden layers of ``hidden`` units with ReLU, then ``classes`` outputs; seeded."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    width = p.features
    for _ in range(p.depth):
        layers += [nn.Linear(width, p.hidden), nn.ReLU()]
        width = p.hidden
    layers.append(nn.Linear(width, p.classes))
    return nn.Sequential(*layers)


class Task:
    """A fixed random teacher labels Gaussian inputs; the evaluation set is drawn once."""

    def __init__(self, p: Params):
        gen = torch.Generator().manual_seed(TASK_SEED)
        width = 2 * p.hidden
        self.w1 = torch.randn(p.features, width, generator=gen) / p.features ** 0.5
        self.w2 = torch.randn(width, p.classes, generator=gen) / width ** 0.5
        self.eval_x = torch.randn(p.eval_samples, p.features, generator=gen)
        self.eval_y = self.label(self.eval_x)

    def label(self, x: torch.Tensor) -> torch.Tensor:
        return (torch.tanh(x @ self.w1) @ self.w2).argmax(dim=1)

    def batch(self, p: Params, *, seed: int, step: int, rank: int, world_size: int):
        """Rank ``rank``'s batch at ``step`` of seed ``seed``: the same under every strategy."""
        gen = torch.Generator().manual_seed(seed * 1_000_003 + step * world_size + rank)
        x = torch.randn(p.batch, p.features, generator=gen)
        return x, self.label(x)

    @torch.no_grad()
    def loss(self, model: nn.Module) -> float:
        device = next(model.parameters()).device  # a GPU's under NCCL; the set stays drawn on the CPU
        return float(F.cross_entropy(model(self.eval_x.to(device)), self.eval_y.to(device)))


def _weights_digest(model: nn.Module) -> str:
    flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()]).cpu()
    return hashlib.sha256(flat.numpy().tobytes()).hexdigest()[:16]


def _runs(values: list[int]) -> list[list[int]]:
    """``values`` run-length encoded, in order: [[value, how many times], ...]."""
    out: list[list[int]] = []
    for v in values:
        if out and out[-1][0] == v:
            out[-1][1] += 1
        else:
            out.append([v, 1])
    return out


def train(ctx, p: Params, task: Task, name: str, seed: int, tick) -> dict:
    """One strategy, one seed: the loss curve, the bytes of every step, the step times."""
    model = make_model(p, seed).to(ctx.device)
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    cap = p.bucket_cap_kb / 1024 if p.bucket_cap_kb else 25.0  # MB: DDP's default (the default MLP is one bucket)
    ddp = DDP(model, device_ids=device_ids, bucket_cap_mb=cap)
    wait = p.powersgd_chain == "serial" or (p.powersgd_chain == "auto" and ctx.backend == "gloo")
    state, hook = make_hook(name, seed=seed, density=p.density, rank=power_rank(name), wait=wait)
    count = WireCount()
    ddp.register_comm_hook(state, count.counted_hook(hook))
    opt = torch.optim.SGD(ddp.parameters(), lr=p.lr, momentum=p.momentum)
    curve = [task.loss(model)]
    sent, times = [], []
    with count.counting():
        for step in range(p.steps):
            x, y = task.batch(p, seed=seed, step=step, rank=ctx.rank, world_size=ctx.world_size)
            x, y = x.to(ctx.device), y.to(ctx.device)
            count.reset()
            with ctx.communicating():
                t0 = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(ddp(x), y).backward()
                opt.step()
                if ctx.device.type == "cuda":
                    torch.cuda.synchronize(ctx.device)
                times.append(time.perf_counter() - t0)
            sent.append(count.bytes)
            if (step + 1) % p.eval_every == 0 or step + 1 == p.steps:
                curve.append(task.loss(model))
                tick()
    return {"strategy": name, "seed": seed, "curve": curve, "bytes_runs": _runs(sent),
            "last_step": {"by_kind": count.by_kind(), "calls": len(count.calls),
                          "dtypes": sorted({c[2] for c in count.calls}),
                          "buckets": count.hook_calls, "bucket_numels": count.bucket_numels},
            "times_s": times, "digest": _weights_digest(model)}


def run_rank(ctx, p: Params) -> dict:
    """Every strategy under every seed, in turn, on this rank."""
    t0 = time.perf_counter()
    task = Task(p)
    seeds = list(range(p.first_seed, p.first_seed + p.seeds))
    checkpoints = -(-p.steps // p.eval_every)
    total = len(p.runs) * len(seeds) * checkpoints
    done = [0]
    runs = []
    for name in p.runs:
        for seed in seeds:
            def tick(name=name, seed=seed) -> None:
                done[0] += 1
                ctx.progress(done[0], total, f"{name}, seed {seed}")

            ctx.progress(done[0], total, f"{name}, seed {seed}")
            runs.append(train(ctx, p, task, name, seed, tick))
    return {"rank": ctx.rank, "runs": runs, "work_s": time.perf_counter() - t0}
