"""Save and resume a data-parallel training loop: every piece of state a step reads.

A restarted rank is a new process: its model has the initial weights, its
optimizer no momentum, its sampler is at the start of epoch 0 and its random
state is seeded as at the first start. The checkpoint gives each of them back.
"""

import torch


def save_checkpoint(model, optimizer, sampler, step):
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),  # the momentum buffers
        "epoch": sampler.epoch,  # which shuffle (set_epoch)
        "position": sampler.position,  # and how many batches of it were used
        "rng": torch.get_rng_state(),  # this rank's dropout masks from here on
        "step": step,
    }


def load_checkpoint(checkpoint, model, optimizer, sampler):
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    sampler.epoch = checkpoint["epoch"]
    sampler.position = checkpoint["position"]
    torch.set_rng_state(checkpoint["rng"])
    return checkpoint["step"]
