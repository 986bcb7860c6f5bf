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
        # TODO: keep the open bucket (its parameters and their bytes) and the
        #       buckets already sent (the work handle each all-reduce returned).
        # TODO: register a hook on every parameter that requires a gradient:
        #       param.register_post_accumulate_grad_hook(self._ready)

    def _ready(self, param):
        """Called by autograd as soon as param.grad is final for this backward."""
        # TODO: add param to the open bucket; once the bucket holds at least
        #       self.cap bytes, flatten its gradients into one tensor and start
        #       dist.all_reduce(flat, async_op=True). Keep the work handle.
        raise NotImplementedError

    def finish(self):
        """Called once after every backward: wait, average, write back into .grad."""
        # TODO: send the last bucket if it is not empty.
        # TODO: wait for each work handle, divide by the world size and copy the
        #       slices of the flat tensor back into each parameter's .grad.
        # TODO: start the next step with empty buckets.
        raise NotImplementedError
