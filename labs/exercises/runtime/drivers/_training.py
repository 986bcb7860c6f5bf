"""What the training drivers (average-gradients, bucketed-overlap, sharded-optimizer) share."""

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


def global_batch(case: dict, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The case's whole batch for ``world`` ranks (``case["batch"]`` rows each), drawn
    from its seed: inputs in the case's ``dtype`` (float32 when it names none), labels."""
    gen = torch.Generator().manual_seed(case["seed"] + 1)
    n = case["batch"] * world
    x = torch.randn(n, case["features"], generator=gen, dtype=getattr(torch, case.get("dtype", "float32")))
    y = torch.randint(0, case["classes"], (n,), generator=gen)
    return x, y


def params(model: nn.Module) -> dict:
    """``model``'s parameters as plain lists by name (what a driver reports)."""
    return {name: p.detach().reshape(-1).tolist() for name, p in model.named_parameters()}


def shares(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int, world: int) -> list[dict]:
    """What each rank of a training driver gets: ``model``'s initial parameters
    (``param.<name>``) and its own ``batch`` rows of the global batch, nothing else."""
    start = {f"param.{name}": p.detach().clone() for name, p in model.named_parameters()}
    return [dict(start, x=x[r * batch:(r + 1) * batch].clone(), y=y[r * batch:(r + 1) * batch].clone())
            for r in range(world)]


def load(model: nn.Module, tensors: dict) -> nn.Module:
    """Set ``model``'s parameters to what `shares` gave: in a rank, the single process's start."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(tensors[f"param.{name}"])
    return model


def bounds(model: nn.Module, world: int, *, tags: int | None = None) -> dict:
    """What a case of a training exercise can need (``router.Bounds``): a message or collective
    tensor of at most every parameter in float64 (a flat buffer of all gradients, even cast
    up), ``tags`` tags (default 2n), and no message of zero bytes."""
    numel = sum(p.numel() for p in model.parameters())
    return {"message_bytes": 8 * numel, "tags": tags or 2 * world, "empty_messages": False}
