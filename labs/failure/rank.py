"""What one rank of the failure lab runs, attempt after attempt (``labs.failure.lab`` is the lab).

torchrun starts it (``python -m labs failure`` does, through
``labs.failure.supervise``, or you do: ``torchrun --standalone --nproc-per-node 2
--max-restarts 3 -m labs.failure``), and starts it again after each failure;
``TORCHELASTIC_RESTART_COUNT`` says which attempt this is. Each attempt:

1. loads the checkpoint if there is one (model, optimizer, step);
2. trains from that step to ``steps``, rank 0 saving a checkpoint every
   ``checkpoint_every`` steps (to a temporary name, then renamed: a save that
   is cut short leaves the last whole one);
3. on an attempt that is to be killed, rank ``kill_rank`` sends itself SIGKILL
   as it reaches its step;
4. after the last step, trains again from the first step, never killed and
   never resumed, and compares the weights.

Each rank appends what it did to its log in the run folder (JSON lines,
flushed as written, so that a killed rank's log holds every step it
finished), and the last attempt's ranks return their logs: the lab's
summary builds the timeline from them. Times are ``time.monotonic()``, one
clock for every process on the machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from labs.ddp.rank import ddp_train_step
from labs.ddp.setup import flat_weights, make_dataset, shard_batches, wrap
from labs.failure.lab import Params, kill_steps
from labs.failure.supervise import PREFIX, sweep

CHECKPOINT = "checkpoint.pt"


def run_folder(p: Params) -> Path:
    """The folder the attempts share: ``run_dir``, else one named after the torchrun agent
    (every attempt's parent; removed by rank 0 at the end, or by a later run once the agent
    is gone: ``labs.failure.supervise.sweep``), made by the first rank that needs it."""
    if p.run_dir:
        folder = Path(p.run_dir)
    else:
        base = Path(tempfile.gettempdir())
        sweep(base)
        folder = base / f"{PREFIX}{os.getppid()}-agent"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def process_start() -> float:
    """When this process started, on the ``time.monotonic()`` clock (``/proc/self/stat``'s
    start time, in clock ticks since boot, against ``/proc/uptime``)."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.monotonic() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.monotonic()


class Log:
    """This rank's records, one JSON line each, flushed at once (a SIGKILL loses none written)."""

    def __init__(self, path: Path, attempt: int):
        self.path, self.attempt = path, attempt
        self._file = open(path, "a", buffering=1)  # noqa: SIM115 - open while the rank lives

    def write(self, kind: str, t0: float, t1: float, **extra) -> None:
        self._file.write(json.dumps({"kind": kind, "attempt": self.attempt, "t0": t0, "t1": t1, **extra}) + "\n")
        self._file.flush()

    def read(self) -> list[dict]:
        """Every record of every attempt (a line cut short by a kill is skipped)."""
        records = []
        for line in self.path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
        return records

    def close(self) -> None:
        self._file.close()


def save(path: Path, model, opt, step: int, per_epoch: int) -> int:
    """The checkpoint after ``step`` steps, to a temporary name and renamed; returns its bytes."""
    epoch, position = divmod(step, per_epoch)
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(), "step": step,
                "epoch": epoch, "position": position}, tmp)
    os.replace(tmp, path)  # atomic: a reader sees the old checkpoint or the new one, never half
    return path.stat().st_size


def settle_buckets(model, data, idx) -> None:
    """A forward and backward with no optimizer step, so that the new DDP lays out its bucket as
    the uninterrupted job's did since its first step.

    DDP's first iteration puts the parameters in its bucket in their registration order, and
    then rebuilds the bucket in the order backward made the gradients (the last layer first). A
    resumed job has a new DDP, whose first step would use the first layout again. On 3 or more
    ranks gloo's all-reduce adds an element's contributions in an order set by where it sits
    in the bucket, so that one step would round differently (by about 1e-9 here) and the
    resumed weights would no longer equal the uninterrupted ones bit for bit. (2 ranks add
    a + b either way.) The gradients it makes are dropped."""
    inputs, labels = data
    F.cross_entropy(model(inputs[idx]), labels[idx]).backward()
    for param in model.parameters():
        param.grad = None


def train(ctx, p: Params, data, batches, *, start: int = 0, model=None, opt=None, on_step=None):
    """Steps ``start`` to ``steps`` of DDP with SGD (momentum); returns the model and optimizer."""
    inputs, labels = data
    if model is None:
        model = wrap(ctx, p)
        opt = torch.optim.SGD(model.parameters(), lr=p.lr, momentum=p.momentum)
    for step in range(start, p.steps):
        if on_step is not None:
            on_step(step, model, opt)
        idx = batches[step]
        ddp_train_step(model, opt, inputs[idx], labels[idx])
    return model, opt


def _digest(module) -> str:
    return hashlib.sha256(flat_weights(module).numpy().tobytes()).hexdigest()[:16]


def run_rank(ctx, params: Params) -> dict:
    p = params
    ready = time.monotonic()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    folder = run_folder(p)
    log = Log(folder / f"rank{ctx.rank}.jsonl", attempt)
    log.write("start", process_start(), ready)
    data = tuple(t.to(ctx.device) for t in make_dataset(p))
    batches = shard_batches(p, world_size=ctx.world_size, rank=ctx.rank, count=p.steps)
    per_epoch = (p.samples // ctx.world_size) // p.batch  # batches per rank per epoch (drop_last)
    path = folder / CHECKPOINT
    model = wrap(ctx, p)
    opt = torch.optim.SGD(model.parameters(), lr=p.lr, momentum=p.momentum)
    start = 0
    if path.exists():  # every rank reads the same file: the replicas start identical again
        t0 = time.monotonic()
        state = torch.load(path, weights_only=True)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["step"]
        settle_buckets(model, data, batches[start])
        log.write("resume", t0, time.monotonic(), step=start)
    kills = kill_steps(p)
    doomed = attempt < len(kills) and ctx.rank == p.kill_rank
    saved = {"bytes": path.stat().st_size if path.exists() else 0}
    timing: dict[str, float] = {}

    def on_step(step, model, opt):
        if step in timing:  # the previous step ends where this one begins
            log.write("step", timing.pop(step), time.monotonic(), step=step - 1)
        if step > start and step % p.checkpoint_every == 0 and ctx.rank == 0:
            t0 = time.monotonic()
            saved["bytes"] = save(path, model, opt, step, per_epoch)
            log.write("checkpoint", t0, time.monotonic(), step=step)
        ctx.progress(step, p.steps, f"attempt {attempt}")
        if doomed and step == kills[attempt]:
            log.write("kill", time.monotonic(), time.monotonic(), step=step)
            log.close()
            os.kill(os.getpid(), signal.SIGKILL)  # as a crashed node: no exception, no goodbye
        timing[step + 1] = time.monotonic()

    model, opt = train(ctx, p, data, batches, start=start, model=model, opt=opt, on_step=on_step)
    if p.steps in timing:
        log.write("step", timing.pop(p.steps), time.monotonic(), step=p.steps - 1)
    ctx.progress(p.steps, p.steps, "a run never killed, to compare")
    reference, _ = train(ctx, p, data, batches)  # from the first step: no checkpoint, no kill
    mine, theirs = flat_weights(model.module), flat_weights(reference.module)
    records = log.read()
    log.close()
    dist.barrier()  # every rank has read its log
    if ctx.rank == 0 and not p.run_dir:
        shutil.rmtree(folder, ignore_errors=True)
    return {"rank": ctx.rank, "attempt": attempt, "log": records, "checkpoint_bytes": saved["bytes"],
            "digest": _digest(model.module), "reference_digest": _digest(reference.module),
            "max_abs_diff": float((mine - theirs).abs().max()), "work_s": time.monotonic() - ready}
