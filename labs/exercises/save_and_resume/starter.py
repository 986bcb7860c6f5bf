def save_checkpoint(model, optimizer, sampler, step):
    """Return everything a restarted rank needs to go on exactly where this one is,
    after `step` training steps: a dict of tensors, numbers, lists and dicts.

    Called every few steps on every rank; the grader keeps what you return.
    """
    # TODO: the model's weights (model.state_dict()).
    # TODO: the optimizer's state: SGD with momentum keeps a buffer per parameter.
    # TODO: where the sampler is: sampler.epoch and sampler.position.
    # TODO: this rank's random state (dropout draws from it): torch.get_rng_state() (import torch).
    raise NotImplementedError(f"save the training state after {step} steps")


def load_checkpoint(checkpoint, model, optimizer, sampler):
    """Put back everything `save_checkpoint` saved into a freshly started rank's model,
    optimizer, sampler and random state; return the number of steps already done."""
    # TODO: undo each part of save_checkpoint, then return the saved step.
    raise NotImplementedError(f"restore {sorted(checkpoint)}")
