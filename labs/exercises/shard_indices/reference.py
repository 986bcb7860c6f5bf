"""DistributedSampler's rule, by hand: one shuffled order for all ranks, padded, then split.

The permutation comes from a generator seeded with
``seed + epoch`` (what torch's DistributedSampler does), so every rank draws
the same one without talking to the others and a new epoch draws a new one.
The order is padded by repeating its beginning until it divides evenly, and
rank r takes every world_size-th index starting at r.
"""

import torch


def shard_indices(dataset_len, rank, world_size, epoch, seed):
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    order = torch.randperm(dataset_len, generator=generator).tolist()
    per_rank = -(-dataset_len // world_size)  # ceil: every rank gets as many
    total = per_rank * world_size
    while len(order) < total:  # more than once when dataset_len < world_size / 2
        order += order[:total - len(order)]
    return order[rank:total:world_size]
