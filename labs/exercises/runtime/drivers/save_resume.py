"""Driver of save-and-resume: a data-parallel training loop killed at a hidden step and restarted.

A case: ``{"id", "world_size", "seed", "kill_step", "steps", "every",
"samples", "features", "hidden", "classes", "batch" (per rank), "lr",
"momentum", "dropout", "sampler_seed", "shape", "dtype"}``; a rank sees all
but ``seed`` and ``kill_step`` (`public`).

Every rank trains the same MLP (with dropout, so the random state matters)
with SGD and momentum (so the optimizer's state matters) on the batches its
`Sampler` draws (``DistributedSampler`` with ``set_epoch``, and where it is:
``epoch``, ``position``); the gradients are averaged by an all-reduce in the
router. Every ``every`` steps the rank calls the learner's
``save_checkpoint(model, optimizer, sampler, step)`` and hands what it
returns (``torch.save`` into memory) to the router, which keeps it
(``checkpoint_put``). The samples come from the router too (``fetch``):
which rank drew which sample is the router's record, not the rank's word.

The harness holds every rank at ``kill_step`` (``bounds``' ``hold_step``),
kills them with SIGKILL and runs the case again on fresh processes, forked
before the plan existed, which start as any program does (the initial
weights, a fresh optimizer and sampler, the random state seeded as at the
start), ask the router for their rank's checkpoint and, when there is one,
call the learner's ``load_checkpoint(checkpoint, model, optimizer, sampler)``,
which returns the steps already done; they train from there to ``steps``.

In the harness, `expected` runs the same loop for every rank in one process,
never killed: the same operations in the same order (`local_gradients`, the
router's own reduction, `apply`), so the final weights are equal bit for
bit. It also gives each rank's batches, and the state a checkpoint at the
resume step holds (digests), which the feedback sets beside what the
restarted rank says it restored (its word, for the message only).
"""

from __future__ import annotations

import hashlib
import io

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DistributedSampler

from drivers._training import load

HIDDEN = ("seed", "kill_step")  # what no rank may see of a case
CHECKPOINT_BYTES = 256 << 10  # the checkpoint folder: one rank's checkpoint at most (about 8 KB needed)


class Net(nn.Module):
    def __init__(self, case: dict):
        super().__init__()
        self.hidden = nn.Linear(case["features"], case["hidden"])
        self.drop = nn.Dropout(case["dropout"])
        self.out = nn.Linear(case["hidden"], case["classes"])

    def forward(self, x):
        return self.out(self.drop(torch.tanh(self.hidden(x))))


class Sampler:
    """A rank's sampler: ``DistributedSampler`` over the case's samples (shuffled per epoch with
    ``set_epoch``, ``drop_last``), and where it is: ``epoch`` and ``position``, the batches
    already drawn in that epoch. `next_batch` draws the next one."""

    def __init__(self, case: dict, world: int, rank: int):
        self.sampler = DistributedSampler(range(case["samples"]), num_replicas=world, rank=rank, shuffle=True,
                                          seed=case["sampler_seed"], drop_last=True)
        self.batch = case["batch"]
        self.epoch = 0
        self.position = 0

    @property
    def batches_per_epoch(self) -> int:
        return len(self.sampler) // self.batch

    def next_batch(self) -> list[int]:
        self.sampler.set_epoch(self.epoch)
        order = list(self.sampler)
        batch = order[self.position * self.batch:(self.position + 1) * self.batch]
        self.position += 1
        if self.position == self.batches_per_epoch:
            self.epoch, self.position = self.epoch + 1, 0
        return batch


def public(case: dict) -> dict:
    return {key: value for key, value in case.items() if key not in HIDDEN}


def _hash(*parts) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little") >> 1


def build(case: dict) -> Net:
    """The initial weights, from the seed (the harness's; a rank gets the weights)."""
    torch.manual_seed(case["seed"])
    return Net(case)


def dataset(case: dict) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(_hash(case["seed"], "data"))
    x = torch.randn(case["samples"], case["features"], generator=gen)
    y = torch.randint(0, case["classes"], (case["samples"],), generator=gen)
    return x, y


def rng_state(case: dict, rank: int) -> torch.Tensor:
    """The random state rank ``rank`` starts with (a fresh program seeds the same): from a hash
    of the seed, so that it tells nothing of the seed or of another rank's state."""
    return torch.Generator().manual_seed(_hash(case["seed"], "rng", rank)).get_state()


def local_gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """This rank's gradient of the loss on its batch, flat (one all-reduce for all of it)."""
    for param in model.parameters():
        param.grad = None
    F.cross_entropy(model(x), y).backward()
    return torch.cat([param.grad.reshape(-1) for param in model.parameters()])


def apply(model: nn.Module, optimizer, flat: torch.Tensor) -> None:
    """The averaged gradient back into ``.grad``, then the optimizer's step."""
    offset = 0
    for param in model.parameters():
        param.grad = flat[offset:offset + param.numel()].view_as(param).clone()
        offset += param.numel()
    optimizer.step()


def optimizer(model: nn.Module, case: dict):
    return torch.optim.SGD(model.parameters(), lr=case["lr"], momentum=case["momentum"])


def _digest(tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(b"none" if t is None else t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def snapshot(model: nn.Module, opt, sampler: Sampler, step, rng: torch.Tensor) -> dict:
    """What a checkpoint after ``step`` steps must give back, as digests and numbers."""
    momentum = [opt.state.get(p, {}).get("momentum_buffer") for p in model.parameters()]
    return {"step": step, "epoch": sampler.epoch, "position": sampler.position,
            "model": _digest(model.parameters()), "optimizer": _digest(momentum), "rng": _digest([rng])}


# --------------------------------------------------------------------------
# In the harness


def inputs(case: dict, world: int) -> list[dict]:
    """Per rank: the initial weights and its starting random state; the samples come by `fetch`."""
    start = {f"param.{name}": p.detach().clone() for name, p in build(case).named_parameters()}
    return [dict(start, rng=rng_state(case, rank)) for rank in range(world)]


def data(case: dict, world: int) -> tuple[list[bytes], list[bytes]]:  # noqa: ARG001 - the interface
    """The rows ``fetch`` answers with: each sample's inputs and its label, as bytes."""
    x, y = dataset(case)
    return [row.numpy().tobytes() for row in x], [label.numpy().tobytes() for label in y]


def resume_step(case: dict) -> int:
    """The step of the last checkpoint before the kill: where a correct restart goes on."""
    return case["every"] * (case["kill_step"] // case["every"])


def expected(case: dict, world: int, inputs: list[dict]) -> list[dict]:
    """Every rank trained in this one process, never killed: the final weights, each rank's
    batches, and the state each rank's checkpoint at the resume step holds."""
    # The router's own sum, in rank order: the ranks' all-reduce, bit for bit.
    from router import _reduce

    x, y = dataset(case)
    model = load(Net(case), inputs[0])
    opt = optimizer(model, case)
    samplers = [Sampler(case, world, rank) for rank in range(world)]
    states = [inputs[rank]["rng"].clone() for rank in range(world)]
    batches: list[list[list[int]]] = [[] for _ in range(world)]
    at_resume = []
    model.train()
    for step in range(case["steps"]):
        if step == resume_step(case):
            at_resume = [snapshot(model, opt, samplers[r], step, states[r]) for r in range(world)]
        flats = []
        for rank in range(world):
            idx = samplers[rank].next_batch()
            batches[rank].append(idx)
            torch.set_rng_state(states[rank])
            flats.append(local_gradients(model, x[idx], y[idx]))
            states[rank] = torch.get_rng_state()
        summed = _reduce([f.contiguous().view(torch.uint8).numpy().tobytes() for f in flats], "float32", "avg")
        apply(model, opt, torch.frombuffer(bytearray(summed), dtype=torch.float32))
    final = {name: p.detach().reshape(-1).tolist() for name, p in model.named_parameters()}
    per_epoch = samplers[0].batches_per_epoch
    return [{"params": final, "batches": batches[rank], "resume": at_resume[rank], "per_epoch": per_epoch,
             "orders": _orders(case, world, rank, len(batches[rank]) // per_epoch + 1)} for rank in range(world)]


def _orders(case: dict, world: int, rank: int, epochs: int) -> list[list[int]]:
    """The rank's whole sampler order in each epoch (the feedback finds where a restart went on)."""
    sampler = Sampler(case, world, rank).sampler
    out = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        out.append(list(sampler))
    return out


def bounds(case: dict, world: int) -> dict:  # noqa: ARG001 - the interface
    """One all-reduce of every gradient, a checkpoint of at most `CHECKPOINT_BYTES` per rank,
    a batch per fetch, and every rank held at the hidden kill step."""
    numel = sum(p.numel() for p in Net(case).parameters())
    return {"message_bytes": 4 * numel, "tags": 1, "empty_messages": False, "checkpoint_bytes": CHECKPOINT_BYTES,
            "fetch_rows": case["batch"], "hold_step": case["kill_step"]}


# --------------------------------------------------------------------------
# In a rank


def _rows(blob: bytes, case: dict, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    split = count * case["features"] * 4
    x = torch.frombuffer(bytearray(blob[:split]), dtype=torch.float32).reshape(count, case["features"])
    y = torch.frombuffer(bytearray(blob[split:]), dtype=torch.int64)
    return x, y


def run(case: dict, rank: int, world: int, submission, api, state) -> dict:
    model = load(Net(case), state)  # every start builds the model with its initial weights,
    torch.set_rng_state(state["rng"])  # then seeds alike: a restarted rank too
    opt = optimizer(model, case)
    sampler = Sampler(case, world, rank)
    start, restored = 0, None
    saved = api.checkpoint_get()  # the checkpoint this rank's predecessor left, if any
    if saved:
        checkpoint = torch.load(io.BytesIO(saved), weights_only=True)
        start = submission.load_checkpoint(checkpoint, model, opt, sampler)
        if not isinstance(start, int) or isinstance(start, bool) or not 0 <= start <= case["steps"]:
            raise TypeError(f"load_checkpoint must return the number of steps already done (an int from 0 "
                            f"to {case['steps']}), not {start!r}")
        restored = snapshot(model, opt, sampler, start, torch.get_rng_state())
    model.train()
    for step in range(start, case["steps"]):
        if step % case["every"] == 0 and step > start:
            buffer = io.BytesIO()
            torch.save(submission.save_checkpoint(model, opt, sampler, step), buffer)
            api.checkpoint_put(buffer.getvalue())
        api.mark(step)
        idx = sampler.next_batch()
        x, y = _rows(api.fetch(idx), case, len(idx))
        flat = local_gradients(model, x, y)
        api.all_reduce(flat, op=dist.ReduceOp.AVG)
        apply(model, opt, flat)
    return {"params": {name: p.detach().reshape(-1).tolist() for name, p in model.named_parameters()},
            "start": start, "restored": restored}
