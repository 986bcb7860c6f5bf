"""A small DDP of one's own: gradients in buckets, all-reduced while backward goes on.

Gradients go into the open bucket in the order backward
produces them; a bucket that reaches the cap is flattened and all-reduced at
once with ``async_op=True``, so the communication runs while backward goes on
with the earlier layers. ``finish()`` sends the last, partly filled bucket,
waits for every bucket and writes the averages back into ``.grad``.
"""

import torch
import torch.distributed as dist


class Bucketer:
    def __init__(self, model, bucket_cap_bytes):
        self.cap = bucket_cap_bytes
        self.world_size = dist.get_world_size()
        self.open, self.open_bytes = [], 0  # parameters whose gradient is in the open bucket
        self.in_flight = []  # (work, flat buffer, its parameters), oldest first
        for param in model.parameters():
            if param.requires_grad:
                param.register_post_accumulate_grad_hook(self._ready)

    def _ready(self, param):
        """Autograd calls this when ``param.grad`` is final for this backward."""
        self.open.append(param)
        self.open_bytes += param.grad.numel() * param.grad.element_size()
        if self.open_bytes >= self.cap:
            self._send()

    def _send(self):
        flat = torch.cat([p.grad.reshape(-1) for p in self.open])
        work = dist.all_reduce(flat, op=dist.ReduceOp.SUM, async_op=True)
        self.in_flight.append((work, flat, self.open))
        self.open, self.open_bytes = [], 0

    def finish(self):
        """Wait for every bucket and leave the averaged gradients in ``.grad``."""
        if self.open:
            self._send()
        for work, flat, params in self.in_flight:
            work.wait()
            flat /= self.world_size
            offset = 0
            for param in params:
                count = param.grad.numel()
                param.grad.copy_(flat[offset:offset + count].view_as(param.grad))
                offset += count
        self.in_flight = []
