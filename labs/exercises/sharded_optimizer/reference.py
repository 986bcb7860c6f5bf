"""ZeRO-1: the optimizer state is split over the ranks; the parameters stay whole everywhere.

Each parameter goes to the rank that owns the fewest bytes so far, in the
order of ``params``, which every rank sees alike, so every rank computes the
same owners without a message. A rank builds the real optimizer over its own
parameters only and steps them; then each parameter is broadcast from its
owner, so that every rank ends with the same updated values.
"""

import torch.distributed as dist


class ShardedOptimizer:
    def __init__(self, params, optimizer_cls, **kwargs):
        self.params = list(params)
        self.rank = dist.get_rank()
        world_size = dist.get_world_size()
        load = [0] * world_size  # bytes owned so far, per rank
        self.owner = []
        for param in self.params:
            rank = load.index(min(load))
            self.owner.append(rank)
            load[rank] += param.numel() * param.element_size()
        mine = [p for p, rank in zip(self.params, self.owner, strict=True) if rank == self.rank]
        # A rank may own nothing (more ranks than parameters): then it has no optimizer.
        self.local = optimizer_cls(mine, **kwargs) if mine else None

    def step(self, closure=None):
        loss = None
        if self.local is not None:
            loss = self.local.step(closure)
        for param, rank in zip(self.params, self.owner, strict=True):
            dist.broadcast(param.data, src=rank)
        return loss

    def zero_grad(self, set_to_none=True):
        for param in self.params:
            if set_to_none:
                param.grad = None
            elif param.grad is not None:
                param.grad.zero_()
