"""The compression lab's DDP communication hooks, and the counter that measures their bytes.

Imported by the ranks only (through ``labs.compression.rank``): torch and all.
Each strategy of ``labs.compression.lab.STRATEGIES`` is one hook that DDP
calls with each bucket of gradients once they are ready (`make_hook`):

- ``fp32``: torch's ``allreduce_hook``, what DDP does without a hook (average
  the bucket with one all-reduce), written in Python so that `WireCount` sees it;
- ``fp16``, ``bf16``: torch's ``fp16_compress_hook`` and ``bf16_compress_hook``:
  cast the bucket to 2-byte floats, all-reduce, cast back;
- ``powersgd_r1/2/4``: torch's ``powerSGD_hook``: each gradient matrix M
  (m x n) is sent as P = M Q (m x r) and Q = M^T P (n x r), both all-reduced;
  with its warm start (last step's Q) and error feedback (what the
  approximation left out is added to the next step's gradient). Vectors
  (biases) go uncompressed. See `serial` for what gloo needs of it.
- ``topk``, ``topk_ef``: `topk_hook`, written here: each rank keeps the
  ``density`` share of the bucket's entries of largest magnitude and
  all-gathers their values and indices (sums of sparse vectors with different
  supports cannot be all-reduced); ``topk_ef`` adds error feedback.

`WireCount` wraps ``torch.distributed``'s collectives while it counts, and
records what each call hands over: the bytes measured per step are those,
not a formula.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

from labs.model import topk_count

# The collectives a hook may call: (the argument that holds this rank's payload,
# its position, the kind recorded).
_COLLECTIVES = {
    "all_reduce": ("tensor", 0, "all_reduce"),
    "all_gather_into_tensor": ("input_tensor", 1, "all_gather"),
    "all_gather": ("tensor", 1, "all_gather"),
}


class WireCount:
    """What this rank hands to ``torch.distributed``'s collectives while `counting`.

    Each call is recorded as (kind, bytes of this rank's payload, dtype): an
    all-reduce's tensor, an all-gather's input (what this rank contributes).
    PowerSGD issues its second and third all-reduce from callbacks on gloo's
    threads; they count too (appending to a list is atomic in CPython), and
    DDP waits for every bucket's future before backward returns, so a step's
    calls are all in before the step ends.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str]] = []
        self.hook_calls = 0  # buckets handed to the hook (`counted_hook`)
        self.bucket_numels: list[int] = []

    def reset(self) -> None:
        self.calls, self.hook_calls, self.bucket_numels = [], 0, []

    @property
    def bytes(self) -> int:
        return sum(c[1] for c in self.calls)

    def by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for kind, sent, _dtype in self.calls:
            out[kind] = out.get(kind, 0) + sent
        return out

    @contextlib.contextmanager
    def counting(self):
        saved = {name: getattr(dist, name) for name in _COLLECTIVES}

        def wrap(name, func):
            arg, position, kind = _COLLECTIVES[name]

            def counted(*args, **kwargs):
                t = kwargs[arg] if arg in kwargs else args[position]
                self.calls.append((kind, t.numel() * t.element_size(), str(t.dtype).removeprefix("torch.")))
                return func(*args, **kwargs)

            return counted

        for name, func in saved.items():
            setattr(dist, name, wrap(name, func))
        try:
            yield self
        finally:
            for name, func in saved.items():
                setattr(dist, name, func)

    def counted_hook(self, hook):
        """``hook`` that also notes each bucket it is handed (how many, and their sizes)."""

        def counted(state, bucket):
            self.hook_calls += 1
            self.bucket_numels.append(bucket.buffer().numel())
            return hook(state, bucket)

        return counted


# --------------------------------------------------------------------------
# Top-k, by hand


class TopKState:
    """What `topk_hook` keeps between steps: the residual of each bucket (error feedback)."""

    def __init__(self, density: float, error_feedback: bool, group=None):
        self.density, self.error_feedback, self.group = density, error_feedback, group
        self.residuals: dict[int, torch.Tensor] = {}


def topk_hook(state: TopKState, bucket) -> torch.futures.Future[torch.Tensor]:
    """Top-k sparsification: send the k largest entries (values and indices), all-gathered.

    With error feedback the bucket's residual (what this rank left out last
    step) is added before choosing, and what is left out now becomes the new
    residual: nothing is dropped for good, only delayed. Values (fp32) and
    indices (int32) travel in one int32 message of 2k entries, 8k bytes.
    Every rank decodes the same gathered messages, so the replicas stay equal.
    """
    grad = bucket.buffer()
    world = dist.get_world_size(state.group)
    corrected = grad.detach().clone()
    index = bucket.index()
    if state.error_feedback:
        residual = state.residuals.get(index)
        if residual is not None and residual.numel() == corrected.numel():  # DDP rebuilds buckets once
            corrected += residual
    k = topk_count(corrected.numel(), state.density)
    _, chosen = corrected.abs().topk(k, sorted=False)
    values = corrected[chosen]
    if state.error_feedback:
        corrected[chosen] = 0.0  # what stays behind on this rank
        state.residuals[index] = corrected
    message = torch.cat([values.view(torch.int32), chosen.to(torch.int32)])
    gathered = torch.empty(world * 2 * k, dtype=torch.int32, device=grad.device)
    work = dist.all_gather_into_tensor(gathered, message, group=state.group, async_op=True)

    def decode(_fut) -> torch.Tensor:
        parts = gathered.view(world, 2, k)
        dense = torch.zeros_like(grad)
        dense.index_add_(0, parts[:, 1].reshape(-1).long(), parts[:, 0].reshape(-1).view(torch.float32))
        return dense.div_(world)

    return work.get_future().then(decode)


# --------------------------------------------------------------------------
# PowerSGD on gloo


def serial(hook):
    """``hook``, finished before it returns: its collectives never interleave with the next bucket's.

    torch's PowerSGD hook issues one all-reduce from DDP's thread and the next
    two from callbacks, when the one before completes. With several buckets,
    bucket 1's first all-reduce can then go out before or after bucket 0's
    second, depending on timing, and not in the same order on every rank.
    NCCL tolerates that here; gloo matches collectives by the order each rank
    issues them, so two ranks pair tensors of different sizes and the process
    aborts ("Received data size doesn't match expected size"). Waiting for
    each bucket's chain keeps the order the same everywhere, at the price of
    any overlap between buckets (on CPU there is little to lose).
    """

    def waited(state, bucket):
        result = hook(state, bucket).wait()
        done = torch.futures.Future()
        done.set_result(result)
        return done

    return waited


def make_hook(name: str, *, seed: int, density: float, rank: int | None, wait: bool, group=None):
    """(state, hook) for strategy ``name``, fresh for one training run."""
    if name == "fp32":
        return group, default_hooks.allreduce_hook
    if name == "fp16":
        return group, default_hooks.fp16_compress_hook
    if name == "bf16":
        return group, default_hooks.bf16_compress_hook
    if name.startswith("powersgd"):
        # start_powerSGD_iter=2: the least torch allows with warm start and error
        # feedback (DDP rebuilds its buckets after the first step); steps 0 and 1 go dense.
        state = powersgd.PowerSGDState(process_group=group, matrix_approximation_rank=rank,
                                       start_powerSGD_iter=2, min_compression_rate=2,
                                       use_error_feedback=True, warm_start=True, random_seed=seed)
        return state, serial(powersgd.powerSGD_hook) if wait else powersgd.powerSGD_hook
    if name in ("topk", "topk_ef"):
        return TopKState(density, error_feedback=name == "topk_ef", group=group), topk_hook
    raise ValueError(f"unknown strategy {name!r}")
