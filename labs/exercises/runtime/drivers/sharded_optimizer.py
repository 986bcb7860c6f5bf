"""Driver of sharded-optimizer: the learner's ZeRO-1 optimizer steps N ranks; one process steps them all.

A case: ``{"id", "world_size", "seed", "model" ("mlp", "big": one weight
larger than all other parameters together, "few": two parameters, fewer
than the ranks of 3 and 4), "optimizer" ("adam" | "sgd", with momentum),
"lr", "features", "hidden", "classes", "batch" (per rank), "steps"}``.

In the harness, ``inputs`` gives each rank the initial parameters and the
whole global batch: every rank's gradient is then the mean over the ranks'
shares, what DDP leaves before ``step`` (equal shares, a mean loss),
without traffic of ours in the router's count of the learner's bytes.
``expected`` steps the same model in one process with the unsharded
optimizer: the final parameters, and the bytes of optimizer state it holds
per parameter, from which ``check`` works out the largest shard a fair
split allows.

In a rank, ``run`` builds ``ShardedOptimizer(params, optimizer_cls, **kw)``
and trains: ``zero_grad``, backward, ``step``; it returns the parameters
and the bytes of tensor storage alive in the process, after the learner's
code returned, that were not alive before it was constructed and are not
the parameters, their gradients or the batch (:func:`held_bytes`). That is
a measurement inside the learner's process: it sees every tensor Python's
garbage collector tracks (optimizer state, buffers kept on ``self`` or in a
module global, views counted once per storage), and a hostile submission
could keep state where it does not look (numpy arrays, bytes, Python
lists, memory outside torch, objects it moved out of the collector's view
with ``gc.freeze()``) or forge the number. The router's byte counts
are beside it in the report.
"""

from __future__ import annotations

import gc

import torch
import torch.nn.functional as F
from torch import nn

from drivers._training import bounds as _bounds
from drivers._training import global_batch, load, params

OPTIMIZERS = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}


def arch(case: dict) -> nn.Module:
    f, h, c = case["features"], case["hidden"], case["classes"]
    if case["model"] == "few":
        return nn.Linear(f, c)  # a weight and a bias: fewer parameters than ranks from 3 on
    if case["model"] == "big":  # the first weight is larger than the rest together
        return nn.Sequential(nn.Linear(f, h), nn.Tanh(), nn.Linear(h, c))
    return nn.Sequential(nn.Linear(f, h), nn.Tanh(), nn.Linear(h, h), nn.Tanh(), nn.Linear(h, c))


def build(case: dict) -> nn.Module:
    torch.manual_seed(case["seed"])
    return arch(case)


def optimizer(case: dict) -> tuple[type, dict]:
    """The optimizer class and its keyword arguments, as the learner's class receives them."""
    kwargs = {"lr": case["lr"]}
    if case["optimizer"] == "sgd":
        kwargs["momentum"] = 0.9
    return OPTIMIZERS[case["optimizer"]], kwargs


def inputs(case: dict, world: int) -> list[dict]:
    """Per rank: the initial parameters and the global batch (its gradient is the ranks' mean)."""
    x, y = global_batch(case, world)
    start = {f"param.{name}": p.detach().clone() for name, p in build(case).named_parameters()}
    return [dict(start, x=x.clone(), y=y.clone()) for _ in range(world)]


def expected(case: dict, world: int, inputs: list[dict]) -> list[dict]:  # noqa: ARG001 - the interface
    """One process with the unsharded optimizer: the final parameters, and the bytes of state
    the optimizer holds for each parameter."""
    x, y = global_batch(case, world)
    single = build(case)
    cls, kwargs = optimizer(case)
    opt = cls(single.parameters(), **kwargs)
    for _ in range(case["steps"]):
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(single(x), y).backward()
        opt.step()
    state = {name: sum(t.untyped_storage().nbytes() for t in opt.state[p].values() if isinstance(t, torch.Tensor))
             for name, p in single.named_parameters()}
    return [{"params": params(single), "state": state} for _ in range(world)]


def bounds(case: dict, world: int) -> dict:
    """A message or collective tensor of at most every parameter (in float64), tags below
    2n or the number of parameters (one per parameter), no messages of zero bytes."""
    model = arch(case)
    return _bounds(model, world, tags=max(2 * world, len(list(model.parameters()))))


def setup(rank: int, world: int) -> None:  # noqa: ARG001 - the interface
    """Before the guard is armed: one step of each optimizer on a throw-away parameter. An
    optimizer's first step in a process evaluates type annotations (``typing`` walks
    frames, which the guard refuses while the learner's code is on the stack) and fills
    caches; afterwards its steps do neither."""
    for name, cls in OPTIMIZERS.items():
        param = nn.Parameter(torch.zeros(2))
        param.grad = torch.ones(2)
        cls([param], **optimizer({"lr": 0.1, "optimizer": name})[1]).step()
    # What exists now (torch, its caches) is none of the learner's: out of the walks, which
    # then take milliseconds instead of a second per case on these CPUs.
    gc.collect()
    gc.freeze()


def _tensors() -> list[torch.Tensor]:
    """Every tensor the garbage collector sees in this process (after a collection)."""
    import guard  # the audit hook refuses gc's walkers, except through guard.walk

    gc.collect()
    # type(), not isinstance: no __class__ lookup on the learner's objects (or torch's deprecated names)
    return [obj for obj in guard.walk(gc.get_objects) if issubclass(type(obj), torch.Tensor)]


def _storages(tensors: list[torch.Tensor]) -> dict[int, int]:
    """Their storages, each once: data pointer -> bytes."""
    out = {}
    for tensor in tensors:
        try:
            storage = tensor.untyped_storage()
            ptr, size = storage.data_ptr(), storage.nbytes()
        except (RuntimeError, NotImplementedError):
            continue
        if size:
            out[ptr] = max(size, out.get(ptr, 0))
    return out


def held_bytes(before: list[torch.Tensor], own: list[torch.Tensor]) -> int:
    """Bytes of the storages alive now that are neither one of ``before`` (kept alive by the
    caller, so that no new tensor can take an old one's address) nor one of ``own``."""
    old = set(_storages(before)) | set(_storages([t for t in own if t is not None]))
    return sum(size for ptr, size in _storages(_tensors()).items() if ptr not in old)


def run(case: dict, rank: int, world: int, submission, api, state) -> dict:  # noqa: ARG001 - the interface
    model, x, y = load(arch(case), state), state["x"], state["y"]
    cls, kwargs = optimizer(case)
    before = _tensors()  # held until the end, so that their addresses stay theirs
    opt = submission.ShardedOptimizer(model.parameters(), cls, **kwargs)
    for step in range(case["steps"]):
        api.mark(step)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        del loss
        opt.step()
    own = [*model.parameters(), *(p.grad for p in model.parameters()), *state.values()]
    return {"params": params(model), "held": held_bytes(before, own)}
