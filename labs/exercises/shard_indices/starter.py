import torch


def shard_indices(dataset_len, rank, world_size, epoch, seed):
    """The dataset indices this rank visits in this epoch, in visiting order.

    Every rank calls this with its own rank and the same other arguments,
    without communicating.
    """
    generator = torch.Generator()
    # TODO: seed the generator from seed and epoch only, so that every rank
    #       draws the same order, and shuffle range(dataset_len) with it.
    # TODO: how many indices does each rank get? Pad the order by repeating
    #       its beginning until every rank can get that many.
    # TODO: return this rank's share, disjoint from the other ranks' shares.
    raise NotImplementedError(f"rank {rank} of {world_size}: {dataset_len} samples, "
                              f"epoch {epoch}, seed {seed}, {generator}")
