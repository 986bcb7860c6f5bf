import math

import torch
import torch.distributed as dist


def top_k_count(numel, density):
    """How many entries of a bucket of ``numel`` gradients each rank sends: k."""
    return max(1, math.ceil(density * numel))


def topk_hook(state, bucket):
    """Average one bucket of gradients over the ranks, sending only its k largest entries.

    state: a dict that stays with this rank for the whole training; state["density"] is the
           share of each bucket to send. Keep what you need between steps in it.
    bucket: bucket.buffer() is this rank's gradients of the bucket as one flat float32 tensor;
            bucket.index() tells the buckets apart.
    Return the averaged gradients of the bucket: a tensor shaped like bucket.buffer().
    """
    grad = bucket.buffer()
    k = top_k_count(grad.numel(), state["density"])
    world_size = dist.get_world_size()
    averaged = torch.zeros_like(grad)  # the dense result, filled from every rank's k entries
    # TODO: add what this rank did not send last time (its residual for this bucket).
    # TODO: choose the k entries of largest magnitude; keep the rest as the new residual.
    # TODO: all-gather every rank's k values and k indices (dist.all_gather).
    # TODO: add them up into a dense tensor and divide by the number of ranks.
    raise NotImplementedError(f"send {k} of {averaged.numel()} entries to {world_size} ranks")
