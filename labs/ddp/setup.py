"""The DDP lab's data, model and measuring tools, shared by its sections.

``labs.ddp.rank`` (the lesson functions and most sections) and
``labs.ddp.timeline`` (the timeline section) both build on these; ``p`` is
a ``labs.ddp.lab.Params``.
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.nn.utils import parameters_to_vector
from torch.utils.data import DistributedSampler


def make_dataset(p) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian blobs: class c is centred on a random point, spread 1. Same on every rank."""
    gen = torch.Generator().manual_seed(p.seed)
    centres = 2.0 * torch.randn(p.classes, p.features, generator=gen)
    labels = torch.randint(0, p.classes, (p.samples,), generator=gen)
    inputs = centres[labels] + torch.randn(p.samples, p.features, generator=gen)
    return inputs, labels


def overlap_params(p, world: int):
    """The lab's parameters with the overlap model (the breakdown's and the timeline's MLP:
    ``overlap_hidden`` wide, ``overlap_depth`` deep, ``overlap_batch`` samples per rank, the
    batch cut to what the data set gives each rank)."""
    return dataclasses.replace(p, hidden=p.overlap_hidden, depth=p.overlap_depth,
                               batch=min(p.overlap_batch, p.samples // world))


def make_model(p) -> nn.Module:
    """The MLP, initialised from the seed: every rank builds the same weights."""
    torch.manual_seed(p.seed)
    layers, width = [], p.features
    for _ in range(p.depth):
        layers += [nn.Linear(width, p.hidden), nn.ReLU()]
        width = p.hidden
    layers.append(nn.Linear(width, p.classes))
    return nn.Sequential(*layers)


def shard_batches(p, *, world_size: int, rank: int, count: int) -> list[list[int]]:
    """The index batches rank ``rank`` trains on, epoch after epoch, via DistributedSampler."""
    sampler = DistributedSampler(range(p.samples), num_replicas=world_size, rank=rank,
                                 shuffle=True, seed=p.seed, drop_last=True)
    batches, epoch = [], 0
    while len(batches) < count:
        sampler.set_epoch(epoch)  # a new shuffle each epoch (see the sampler section)
        order = list(sampler)
        batches += [order[i:i + p.batch] for i in range(0, len(order) - p.batch + 1, p.batch)]
        epoch += 1
    return batches[:count]


def wrap(ctx, p, **kwargs) -> DDP:
    """A fresh model on this rank's device, wrapped in DDP (which copies rank 0's weights)."""
    model = make_model(p).to(ctx.device)
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DDP(model, device_ids=device_ids, **kwargs)


def clock(ctx) -> float:
    """perf_counter, after the GPU has finished what was queued (a no-op on CPU)."""
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)
    return time.perf_counter()


def max_over_ranks(ctx, values: list[float], group=None) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.tolist()


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3 if samples else 0.0


def counting_hook(hook, counter: dict, wire_bytes_per_elem: int, process_group=None):
    """Wrap a comm hook to count the all-reduces it launches and the bytes it hands over."""

    def counted(_state, bucket):
        counter["calls"] += 1
        counter["bytes"] += bucket.buffer().numel() * wire_bytes_per_elem
        return hook(process_group, bucket)

    return counted


def flat_weights(model: nn.Module) -> torch.Tensor:
    return parameters_to_vector(model.parameters()).detach().clone()


def spread_ms(samples: list[float]) -> dict:
    """Median, quartiles, min and max of per-step samples (seconds), in ms, and k."""
    ms = sorted(x * 1e3 for x in samples)
    if not ms:
        return {"median": 0.0, "q1": 0.0, "q3": 0.0, "min": 0.0, "max": 0.0, "k": 0}
    q1, _, q3 = statistics.quantiles(ms, n=4, method="inclusive") if len(ms) > 1 else (ms[0],) * 3
    return {"median": statistics.median(ms), "q1": q1, "q3": q3, "min": ms[0], "max": ms[-1],
            "k": len(ms)}
