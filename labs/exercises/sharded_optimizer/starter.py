import torch.distributed as dist


class ShardedOptimizer:
    """ZeRO-1: every rank keeps optimizer state only for the parameters it owns.

    Used like this on every rank, with the gradients already averaged over the ranks:

        opt = ShardedOptimizer(model.parameters(), torch.optim.Adam, lr=1e-3)
        opt.zero_grad()
        loss.backward()        # (and the gradients averaged, as DDP does)
        opt.step()             # afterwards every rank holds the same updated parameters
    """

    def __init__(self, params, optimizer_cls, **kwargs):
        self.params = list(params)
        self.optimizer_cls, self.kwargs = optimizer_cls, kwargs
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        # TODO: choose an owner rank for every parameter. Every rank must
        #       compute the same owners, from what all ranks know alike.
        # TODO: build self.optimizer_cls(..., **self.kwargs) over the parameters
        #       this rank owns only (careful: a rank may own none).
        raise NotImplementedError

    def step(self, closure=None):
        # TODO: let the local optimizer step the parameters this rank owns.
        # TODO: send every parameter from its owner to all other ranks.
        raise NotImplementedError

    def zero_grad(self, set_to_none=True):
        # TODO: clear the gradient of every parameter, not only the owned ones.
        raise NotImplementedError
