"""Average the gradients over the ranks: all-reduce each one (a sum), then divide by the world size.

This is what DDP does for you, one parameter at a time and without overlap.
"""

import torch.distributed as dist


def average_gradients(model):
    world_size = dist.get_world_size()
    for param in model.parameters():
        if param.grad is None:
            # The parameter took no part in the loss. The model is the same on
            # every rank, so every rank skips it and the calls stay matched.
            continue
        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)
        param.grad /= world_size
