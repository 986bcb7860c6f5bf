import math

import torch
import torch.distributed as dist


def top_k_count(numel, density):
    """How many entries of a bucket of ``numel`` gradients each rank sends: k."""
    return max(1, math.ceil(density * numel))


def topk_hook(state, bucket):
    """Average one bucket of gradients over the ranks, sending only its k largest entries.

    Error feedback: what this rank does not send now stays in its residual and is
    added to the same bucket's gradient at the next step, so it is sent later
    instead of lost.
    """
    grad = bucket.buffer()
    residuals = state.setdefault("residuals", {})
    corrected = grad + residuals.get(bucket.index(), torch.zeros_like(grad))
    k = top_k_count(grad.numel(), state["density"])
    indices = corrected.abs().topk(k).indices
    values = corrected[indices]
    residual = corrected.clone()
    residual[indices] = 0.0
    residuals[bucket.index()] = residual

    # Each rank chose other indices, so the sparse tensors cannot be summed on the way
    # (all_reduce): every rank gathers everyone's values and indices and adds them up.
    world_size = dist.get_world_size()
    all_values = [torch.empty_like(values) for _ in range(world_size)]
    all_indices = [torch.empty(k, dtype=torch.int32) for _ in range(world_size)]
    dist.all_gather(all_values, values)
    dist.all_gather(all_indices, indices.to(torch.int32))
    averaged = torch.zeros_like(grad)
    for rank_values, rank_indices in zip(all_values, all_indices, strict=True):
        averaged.index_add_(0, rank_indices.long(), rank_values)
    return averaged / world_size
