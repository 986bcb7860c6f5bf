"""Reference solution of average-gradients.

Trusted: it never enters the sandbox, and the page shows it only after the
learner has passed. It is labs/ddp.py's ``naive_sync_gradients`` written
against the exercise's signature (the world size comes from ``dist``).
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
