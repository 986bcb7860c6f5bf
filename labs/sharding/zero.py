"""The sharding lab's rank code: four ways to train one MLP, and what each rank holds.

Imported only by the ranks (``labs.sharding.lab.RANK_MODULE``), so that the lab's
parameters, summary and text stay free of torch. The four strategies, each a
small diff of the last:

- ``ddp``: DistributedDataParallel and a plain Adam. Every rank holds all of
  it: 4 + 4 + 8 bytes per parameter.
- ``zero1``: the same DDP, with torch's ``ZeroRedundancyOptimizer``: each
  rank keeps Adam's state only for the parameters it owns (whole tensors,
  assigned greedily by size), steps them, and broadcasts them to the others.
- ``zero2``: `Zero2`, written here: the gradients are reduce-scattered, so
  each rank keeps only its slice of them, as well as of Adam's state.
- ``zero3``: FSDP2's ``fully_shard``: the parameters are sharded too, and
  all-gathered layer by layer when forward and backward need them.

With ``precision="bf16-mixed"`` the model's weights and gradients are bf16
(and so is everything on the wire: gloo runs all-reduce, reduce-scatter,
all-gather and broadcast on bf16 tensors), and `MasterAdam` keeps an fp32
master copy of the weights beside Adam's moments: 2 + 2 + 12 bytes per
parameter under DDP, sharded as above.

`held_bytes` measures the ledger from the tensors themselves; `WireCounter`
counts what each rank hands to the collectives, and records them in order.
"""

from __future__ import annotations

import contextlib
import gc
import time

import torch
import torch._dynamo  # DDP imports it on first use; a forked rank inherits it
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

from labs.model import STRATEGIES, bus_factor, per_parameter, state_bytes

DTYPES = {"fp32": torch.float32, "bf16-mixed": torch.bfloat16}  # what the model computes in


def make_model(width: int, depth: int, seed: int, dtype: torch.dtype = torch.float32) -> nn.Sequential:
    """``depth`` square Linear layers with ReLU between them; the same weights on every rank."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for i in range(depth):
        layers.append(nn.Linear(width, width))
        if i < depth - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers).to(dtype)


class MasterAdam(torch.optim.Optimizer):
    """Adam for bf16 parameters: an fp32 master copy of each steps, the parameter gets its rounding.

    The master copies and Adam's moments (4 + 8 bytes per parameter) are the
    optimizer state; the fp32 copy of the gradient lives only inside `step`.
    Works on whatever tensors it is given: whole parameters (DDP), the ones a
    rank owns (as ZeroRedundancyOptimizer's ``optimizer_class``), a slice
    (`Zero2`) or DTensor shards (FSDP2).
    """

    def __init__(self, params, lr: float):
        super().__init__(params, {"lr": lr})
        self.pairs = [(q, q.detach().to(torch.float32, copy=True)) for g in self.param_groups for q in g["params"]]
        self.adam = torch.optim.Adam([m for _q, m in self.pairs], lr=lr)

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ARG002 - Optimizer's signature; the lab passes no closure
        for q, m in self.pairs:
            m.grad = None if q.grad is None else q.grad.to(torch.float32)
        self.adam.step()
        for q, m in self.pairs:
            q.copy_(m)  # rounded to bf16
            m.grad = None

    def tensors(self) -> list[torch.Tensor]:
        """The master copies and Adam's state: what this optimizer keeps between steps."""
        return [m for _q, m in self.pairs] + optimizer_tensors(self.adam)


def make_optimizer(params, *, lr: float, precision: str) -> torch.optim.Optimizer:
    return (MasterAdam if precision == "bf16-mixed" else torch.optim.Adam)(params, lr=lr)


def make_batch(p, *, step: int, rank: int, world_size: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s inputs and targets at ``step``: the same under every strategy."""
    gen = torch.Generator().manual_seed(p.seed * 100_003 + step * world_size + rank)
    x = torch.randn(p.batch, p.width, generator=gen)
    y = torch.randn(p.batch, p.width, generator=gen)
    return x.to(device, DTYPES[p.precision]), y.to(device)  # the loss is taken in fp32


# --------------------------------------------------------------------------
# ZeRO-2, by hand


class Zero2:
    """ZeRO-2: each rank keeps 1/N of the gradients and of Adam's state.

    The parameters become views of one flat buffer, padded to a multiple of
    N, that every rank holds whole; rank r owns the slice [r*c, (r+1)*c).
    After backward, one reduce-scatter hands each rank the sum of its slice
    of the gradients, and the full gradients are dropped; Adam steps the
    slice; one all-gather puts every rank's updated slice back into every
    rank's buffer. Reduce-scatter plus all-gather send what one all-reduce
    sends, so ZeRO-2 costs DDP's traffic.

    Simpler than DeepSpeed's: the full gradients exist until backward ends
    (DeepSpeed reduce-scatters bucket by bucket during backward, so they
    never all exist at once); after the step, what a rank holds is the same.
    """

    def __init__(self, model: nn.Module, *, lr: float, precision: str = "fp32", group=None):
        self.params = list(model.parameters())
        self.group = group
        self.world_size = dist.get_world_size(group)
        rank = dist.get_rank(group)
        self.total = sum(q.numel() for q in self.params)
        self.chunk = -(-self.total // self.world_size)  # ceil: every slice the same length
        first = self.params[0]
        self.flat = torch.zeros(self.chunk * self.world_size, dtype=first.dtype, device=first.device)
        offset = 0
        for q in self.params:  # each parameter becomes a view of the flat buffer
            n = q.numel()
            self.flat[offset:offset + n].copy_(q.detach().reshape(-1))
            q.data = self.flat[offset:offset + n].view_as(q)
            offset += n
        lo = rank * self.chunk
        self.owned = max(0, min(self.chunk, self.total - lo))  # the last slice may be padding
        # A view of the buffer, not a copy: stepping it updates this rank's parameters.
        self.shard = nn.Parameter(self.flat[lo:lo + self.chunk])
        self.optim = make_optimizer([self.shard], lr=lr, precision=precision)

    def step(self) -> None:
        grads = [q.grad.reshape(-1) for q in self.params]
        pad = self.flat.numel() - self.total
        if pad:
            grads.append(torch.zeros(pad, dtype=self.flat.dtype, device=self.flat.device))
        full = torch.cat(grads)
        mine = torch.empty(self.chunk, dtype=full.dtype, device=full.device)
        dist.reduce_scatter_tensor(mine, full, group=self.group)
        mine /= self.world_size  # the average, as DDP's
        for q in self.params:  # the full gradients go: 4/N bytes per parameter remain
            q.grad = None
        del full, grads
        self.shard.grad = mine
        self.optim.step()
        dist.all_gather_into_tensor(self.flat, self.shard.detach().clone(), group=self.group)

    def zero_grad(self) -> None:
        self.shard.grad = None


# --------------------------------------------------------------------------
# Measuring


def _local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's shard on this rank; a plain tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def _span(t: torch.Tensor) -> tuple[int, tuple[int, int]]:
    """(storage, [first byte, end)) of the memory a tensor view covers."""
    size = t.element_size()
    start = t.storage_offset() * size
    extent = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True)) if t.numel() else 0
    return t.untyped_storage().data_ptr(), (start, start + extent * size)


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def held_bytes(parts: dict[str, list[torch.Tensor]]) -> dict[str, int]:
    """Bytes each part's tensors hold, deduplicated by storage.

    Two views of one storage count once (DDP's gradients are views of its
    buckets; ZeRO-2's parameters, views of one buffer), and bytes counted in
    an earlier part are not counted again in a later one. A DTensor counts
    its local shard.
    """
    seen: dict[int, list[tuple[int, int]]] = {}
    out = {}
    for name, tensors in parts.items():
        spans: dict[int, list[tuple[int, int]]] = {}
        for t in tensors:
            key, span = _span(_local(t))
            spans.setdefault(key, []).append(span)
        total = 0
        for key, new in spans.items():
            before = _merge(seen.get(key, []))
            after = _merge(before + new)
            total += sum(b - a for a, b in after) - sum(b - a for a, b in before)
            seen[key] = after
        out[name] = total
    return out


def optimizer_tensors(optim) -> list[torch.Tensor]:
    if isinstance(optim, MasterAdam):
        return optim.tensors()
    return [v for state in optim.state.values() for v in state.values() if torch.is_tensor(v)]


# What each collective hands to the network, and how a ring spreads it: the
# payload argument, the share of it each rank sends (labs.model.bus_factor),
# and the name the record gives it.
_COLLECTIVES = {
    "all_reduce": ("tensor", 0, "all_reduce", "all_reduce"),
    "broadcast": ("tensor", 0, "all_gather", "broadcast"),  # a pipelined ring: (n-1)/n of it per rank
    "all_gather_into_tensor": ("output_tensor", 0, "all_gather", "all_gather"),
    "all_gather_single": ("output_tensor", 0, "all_gather", "all_gather"),
    "reduce_scatter_tensor": ("input", 1, "reduce_scatter", "reduce_scatter"),
    "reduce_scatter_single": ("input", 1, "reduce_scatter", "reduce_scatter"),
}


class WireCounter:
    """Counts, and records in order, what this rank sends through ``torch.distributed``'s collectives.

    While `counting`, the collectives above are wrapped: each call adds its
    payload times the ring's share per rank, 2(n-1)/n for an all-reduce,
    (n-1)/n for the others. A model of the wire, from what was really
    called: gloo does not report its socket bytes. DDP's own all-reduce runs
    in C++, so DDP gets `allreduce_hook`, which calls ``dist.all_reduce``.
    Each call is recorded with the `stage` of the step it came in ("forward",
    "backward", "step"), which the caller sets; `phases` sums the record.
    """

    def __init__(self, world_size: int):
        self.world_size, self.stage = world_size, ""
        self.calls: list[tuple[str, str, float, str]] = []  # (kind, stage, bytes sent, dtype)

    @property
    def bytes(self) -> float:
        return sum(c[2] for c in self.calls)

    def phases(self) -> list[dict]:
        """The record, one entry per kind of collective per stage, in the order each first came.

        FSDP2 all-gathers layer by layer and interleaves its reduce-scatters
        with the next all-gathers in backward: one entry each, with ``calls``.
        """
        out: dict[tuple[str, str], dict] = {}
        for kind, stage, sent, dtype in self.calls:
            entry = out.setdefault((stage, kind), {"kind": kind, "stage": stage, "bytes": 0.0, "calls": 0,
                                                   "dtype": dtype})
            entry["bytes"] += sent
            entry["calls"] += 1
        return [{**e, "bytes": int(e["bytes"])} for e in out.values()]

    @contextlib.contextmanager
    def counting(self):
        saved = {name: getattr(dist, name) for name in _COLLECTIVES}

        def wrap(name, func):
            arg, position, ring, kind = _COLLECTIVES[name]

            def counted(*args, **kwargs):
                t = kwargs[arg] if arg in kwargs else args[position]
                sent = t.numel() * t.element_size() * bus_factor(ring, self.world_size)
                self.calls.append((kind, self.stage, sent, str(t.dtype).removeprefix("torch.")))
                return func(*args, **kwargs)

            return counted

        for name, func in saved.items():
            setattr(dist, name, wrap(name, func))
        try:
            yield self
        finally:
            for name, func in saved.items():
                setattr(dist, name, func)


def allreduce_hook(group, bucket):
    """DDP's default (average the bucket), through ``dist.all_reduce`` so `WireCounter` sees it."""
    buf = bucket.buffer().div_(dist.get_world_size(group))
    work = dist.all_reduce(buf, group=group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


# --------------------------------------------------------------------------
# One strategy on one rank


def _setup(name: str, ctx, p):
    """The model, its optimizer, and (after the step) the tensors of each part."""
    model = make_model(p.width, p.depth, p.seed, DTYPES[p.precision]).to(ctx.device)
    if name in ("ddp", "zero1"):
        device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        ddp = DDP(model, device_ids=device_ids, gradient_as_bucket_view=True)
        ddp.register_comm_hook(None, allreduce_hook)
        if name == "ddp":
            opt = make_optimizer(ddp.parameters(), lr=p.lr, precision=p.precision)
            local = opt
        else:
            cls = MasterAdam if p.precision == "bf16-mixed" else torch.optim.Adam
            opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=cls, lr=p.lr)
            local = opt.optim  # the Adam over this rank's parameters
        return ddp, opt, lambda: {"params": list(model.parameters()),
                                  "grads": [q.grad for q in model.parameters() if q.grad is not None],
                                  "optimizer": optimizer_tensors(local)}
    if name == "zero2":
        opt = Zero2(model, lr=p.lr, precision=p.precision)
        return model, opt, lambda: {"params": list(model.parameters()),
                                    "grads": [opt.shard.grad] if opt.shard.grad is not None else [],
                                    "optimizer": optimizer_tensors(opt.optim)}
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    for layer in model:
        if isinstance(layer, nn.Linear):
            # reshard_after_forward=True (what the default, None, means for every module but
            # the root): free the gathered layer after forward and gather it again in
            # backward, ZeRO-3's memory for 1.5x DDP's traffic.
            fully_shard(layer, mesh=mesh, reshard_after_forward=True)
    fully_shard(model, mesh=mesh)
    opt = make_optimizer(model.parameters(), lr=p.lr, precision=p.precision)
    return model, opt, lambda: {"params": list(model.parameters()),
                                "grads": [q.grad for q in model.parameters() if q.grad is not None],
                                "optimizer": optimizer_tensors(opt)}


def owned_elements(name: str, model, opt, total: int) -> int:
    """Parameters whose shard of the sharded parts this rank keeps: the real split."""
    if name == "ddp":
        return total
    if name == "zero1":
        return sum(q.numel() for g in opt.optim.param_groups for q in g["params"])
    if name == "zero2":
        return opt.owned
    return sum(_local(q).numel() for q in model.parameters())


def full_weights(name: str, model, opt) -> torch.Tensor:
    """Every parameter, concatenated, as this rank sees it (a collective under zero3)."""
    if name == "zero2":
        return opt.flat[:opt.total].detach().float()
    params = [q.full_tensor() if hasattr(q, "full_tensor") else q for q in model.parameters()]
    return torch.cat([q.detach().reshape(-1) for q in params]).float()


def run_strategy(name: str, ctx, p, tick) -> tuple[dict, torch.Tensor]:
    """Train ``p.steps`` steps; the ledger after the last step (before zero_grad), the
    collectives of that step, and the weights."""
    model, opt, parts = _setup(name, ctx, p)
    total = sum(q.numel() for q in make_model(p.width, p.depth, p.seed).parameters())
    counter = WireCounter(ctx.world_size)
    cuda = ctx.device.type == "cuda"
    peak = None
    for step in range(p.steps):
        tick(f"{name}: step {step + 1}")
        x, y = make_batch(p, step=step, rank=ctx.rank, world_size=ctx.world_size, device=ctx.device)
        opt.zero_grad()
        counter.calls = []
        if cuda:  # the device's own allocator counts every byte: an honest peak
            torch.cuda.synchronize(ctx.device)
            torch.cuda.reset_peak_memory_stats(ctx.device)
        with ctx.communicating(), counter.counting():
            counter.stage = "forward"
            loss = F.mse_loss(model(x).float(), y)
            counter.stage = "backward"
            loss.backward()
            counter.stage = "step"
            opt.step()
        if cuda:
            peak = torch.cuda.max_memory_allocated(ctx.device)
    measured = held_bytes(parts())  # after the step, before zero_grad
    owned = owned_elements(name, model, opt, total)
    predicted = state_bytes(name, total, owned=owned, **per_parameter(p.precision))
    with ctx.communicating():
        weights = full_weights(name, model, opt)
    row = {"rank": ctx.rank, "measured": measured,
           "predicted": {k: int(v) for k, v in predicted.items()},
           "peak": peak, "wire_bytes_per_step": int(counter.bytes), "owned": owned,
           "step_collectives": counter.phases()}
    return row, weights


def run_rank(ctx, p) -> dict:
    """The four strategies in turn on this rank: each one's ledger row and its distance from DDP."""
    t0 = time.perf_counter()
    total_ticks = len(STRATEGIES) * p.steps
    done = [0]

    def tick(phase: str) -> None:
        ctx.progress(done[0], total_ticks, phase)
        done[0] += 1

    first = make_model(p.width, p.depth, p.seed, DTYPES[p.precision])
    start = torch.cat([q.detach().reshape(-1) for q in first.parameters()]).float()
    rows, diffs, means, reference = {}, {}, {}, None
    for name in STRATEGIES:  # ddp first: the others are compared with its weights
        row, weights = run_strategy(name, ctx, p, tick)
        if reference is None:
            reference = weights
            moved = (weights.cpu() - start).abs()  # a tolerance means something only below this
        gap = (weights - reference).abs()
        diff = torch.tensor([float(gap.max()), float(gap.mean())], device=ctx.device)
        with ctx.communicating():
            dist.all_reduce(diff, op=dist.ReduceOp.MAX)
        rows[name], diffs[name], means[name] = row, float(diff[0]), float(diff[1])
        gc.collect()  # the last strategy's model and state go before the next is built
    ctx.progress(total_ticks, total_ticks, "done")
    return {"rank": ctx.rank, "strategies": rows, "max_abs_diff_vs_ddp": diffs, "mean_abs_diff_vs_ddp": means,
            "parameters": start.numel(), "max_abs_update_ddp": float(moved.max()),
            "mean_abs_update_ddp": float(moved.mean()), "work_s": time.perf_counter() - t0}
