"""What the training drivers (average-gradients, bucketed-overlap) share."""

from __future__ import annotations

import torch
from torch import nn


def sgd_step(model: nn.Module, lr: float) -> None:
    """Plain SGD, p -= lr * grad, then the gradients cleared (set to None).

    Written out rather than torch.optim.SGD: its first step imports
    torch._dynamo, about a second in every freshly forked rank.
    """
    with torch.no_grad():
        for param in model.parameters():
            if param.grad is not None:
                param.add_(param.grad, alpha=-lr)
            param.grad = None


def initial(model: nn.Module) -> dict:
    """A model's parameters as the tensors a rank gets (``param.<name>``)."""
    return {f"param.{name}": p.detach().clone() for name, p in model.named_parameters()}


def load(model: nn.Module, tensors: dict) -> nn.Module:
    """Set ``model``'s parameters to what `initial` gave: in a rank, the single process's start."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(tensors[f"param.{name}"])
    return model
