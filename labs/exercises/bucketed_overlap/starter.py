import torch
import torch.distributed as dist


class Bucketer:
    """Averages gradients over all ranks in buckets, while backward is still running.

    Used like this on every rank, at every step:

        bucketer = Bucketer(model, bucket_cap_bytes)   # once, before training
        loss.backward()        # your hooks fill buckets and start their all-reduces
        bucketer.finish()      # waits; afterwards every .grad holds the mean over ranks
        optimizer.step()
    """

    def __init__(self, model, bucket_cap_bytes):
        self.cap = bucket_cap_bytes
        self.world_size = dist.get_world_size()
        self.open: list[torch.nn.Parameter] = []  # the parameters in the open bucket
        self.open_bytes = 0  # the bytes of their gradients
        self.in_flight = []  # the buckets already sent: (work handle, flat tensor, parameters)
        for param in model.parameters():
            if param.requires_grad:
                pass  # TODO: make self._ready this parameter's post-accumulate-grad hook

    def _ready(self, param):
        """Called by autograd as soon as param.grad is final for this backward."""
        # TODO: add param to the open bucket. Once the bucket holds at least
        #       self.cap bytes, flatten its gradients into one tensor, start
        #       dist.all_reduce(flat, async_op=True), keep the work handle in
        #       self.in_flight and open a new, empty bucket.
        raise NotImplementedError

    def finish(self):
        """Called once after every backward: wait, average, write back into .grad."""
        # TODO: send the open bucket if it is not empty.
        # TODO: wait for each work handle, divide by the world size and copy the
        #       slices of the flat tensor back into each parameter's .grad.
        # TODO: start the next step with no bucket in flight.
        raise NotImplementedError
