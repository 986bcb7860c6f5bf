import torch


def shard_indices(dataset_len, rank, world_size, epoch, seed):
    """The dataset indices this rank visits in this epoch, in visiting order.

    Every rank calls this with its own rank and the same other arguments,
    without communicating.
    """
    # TODO: shuffle range(dataset_len) with a torch.Generator seeded from
    #       seed and epoch only, so every rank draws the same order.
    # TODO: how many indices does each rank get? Pad the order by repeating
    #       its beginning until every rank can get that many.
    # TODO: give this rank its share, disjoint from the other ranks' shares.
    raise NotImplementedError
