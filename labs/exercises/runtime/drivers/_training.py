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
