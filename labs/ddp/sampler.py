"""The DDP lab's ``sampler`` section: how DistributedSampler shards the data.

Each rank gets a disjoint shard (padded by repeating samples when the set
does not divide evenly), and without ``set_epoch`` every epoch visits the
samples in the same order. Rank 0 returns the figures, the others ``{}``.
"""

from __future__ import annotations

import torch.distributed as dist
from torch.utils.data import DistributedSampler


def run(ctx, p, _data, tick) -> dict:  # every section takes the same arguments
    tick("sampler")
    world, rank = ctx.world_size, ctx.rank
    show = 8
    orders = {}
    for use_set_epoch in (True, False):
        sampler = DistributedSampler(range(p.samples), num_replicas=world, rank=rank,
                                     shuffle=True, seed=p.seed)
        epochs = []
        for epoch in range(3):
            if use_set_epoch:
                sampler.set_epoch(epoch)
            epochs.append(list(sampler))
        orders[use_set_epoch] = epochs
    shards = [None] * world
    dist.all_gather_object(shards, orders[True][0])
    if rank != 0:
        return {}
    seen = [i for shard in shards for i in shard]

    def same_positions(a, b):
        return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)

    with_, without = orders[True], orders[False]
    return {
        "samples": p.samples, "shard_size": len(shards[0]),
        "shards_disjoint": len(set(seen)) == len(seen),
        "samples_covered": len(set(seen)), "padded": len(seen) - len(set(seen)),
        "first_indices_per_rank_epoch0": [s[:show] for s in shards],
        "rank0_with_set_epoch": [e[:show] for e in with_],
        "rank0_without_set_epoch": [e[:show] for e in without],
        "same_order_next_epoch_with_set_epoch": with_[0] == with_[1],
        "same_order_next_epoch_without_set_epoch": without[0] == without[1],
        "positions_unchanged_epoch0_to_1": {"with_set_epoch": same_positions(with_[0], with_[1]),
                                            "without_set_epoch": same_positions(without[0],
                                                                                without[1])},
    }
