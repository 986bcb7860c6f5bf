"""The course's bandwidth model, in one place: busbw and the alpha-beta ring.

The lessons' calculators (``app.calculators``) and the benchmark lab
(``labs.bench``) both read these functions, so a lesson's estimate and a
measured sweep use the same definitions. Plain arithmetic: no torch, cheap to
import. Units: bytes, seconds, bytes per second.

nccl-tests' definitions, for a message of S bytes that took t seconds on n ranks:

    algbw = S / t
    busbw = algbw * 2(n-1)/n    all-reduce
    busbw = algbw * (n-1)/n     reduce-scatter, all-gather

busbw is the rate each rank's link had to sustain with a ring, so it can be
compared across n and with the link's own speed. The alpha-beta model of a
ring all-reduce (alpha: latency per step, B: link bandwidth) is

    T = 2(n-1) alpha + 2(n-1)/n * S/B

and reduce-scatter or all-gather alone is half of each term.
"""

from __future__ import annotations

import math

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")


def bus_factor(collective: str, world_size: int) -> float:
    """busbw / algbw: the share of S that crosses each rank's link, 2(n-1)/n or (n-1)/n."""
    n = world_size
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("reduce_scatter", "all_gather"):
        return (n - 1) / n
    raise ValueError(f"unknown collective {collective!r}: use one of {', '.join(COLLECTIVES)}")


def ring_steps(collective: str, world_size: int) -> int:
    """Messages each rank sends in turn: 2(n-1) for all-reduce, n-1 for either half."""
    bus_factor(collective, world_size)  # the same ValueError for an unknown collective
    return 2 * (world_size - 1) if collective == "all_reduce" else world_size - 1


def algbw(size_bytes: float, time_s: float) -> float:
    """Algorithm bandwidth in bytes per second: the message over the time."""
    return size_bytes / time_s


def busbw(size_bytes: float, time_s: float, world_size: int,
          collective: str = "all_reduce") -> float:
    """Bus bandwidth in bytes per second: what each rank's link carried, per second."""
    return algbw(size_bytes, time_s) * bus_factor(collective, world_size)


def ring_time(world_size: int, size_bytes: float, alpha_s: float, bandwidth_Bps: float,
              collective: str = "all_reduce") -> float:
    """Alpha-beta time of a ring collective: steps * alpha + bus_factor * S / B.

    One rank (or none) communicates nothing and takes no time.
    """
    if world_size <= 1:
        return 0.0
    return (ring_steps(collective, world_size) * alpha_s
            + bus_factor(collective, world_size) * size_bytes / bandwidth_Bps)


def fit_alpha_beta(sizes: list[float], times: list[float], world_size: int,
                   collective: str = "all_reduce") -> dict | None:
    """Fit alpha (s) and B (bytes/s) of `ring_time` to measured (size, time) pairs.

    T = a + b*S is linear, with a = steps*alpha and b = bus_factor/B. We
    minimise the relative residuals sum(((a + b*S) - T) / T)^2 so that
    microsecond rows weigh as much as second-long ones: a plain least-squares
    fit would let the largest message decide alpha. Returns None when there is
    nothing to fit (one rank, or fewer than two sizes).
    """
    n = world_size
    if n < 2 or len(sizes) < 2 or len(sizes) != len(times):
        return None
    steps = ring_steps(collective, n)
    # Weighted least squares with weights 1/T^2: solve the 2x2 normal equations.
    sw = sws = swss = swt = swst = 0.0
    for s, t in zip(sizes, times, strict=True):
        w = 1.0 / (t * t)
        sw += w
        sws += w * s
        swss += w * s * s
        swt += w * t
        swst += w * s * t
    det = sw * swss - sws * sws
    if det == 0:
        return None
    a = (swss * swt - sws * swst) / det
    b = (sw * swst - sws * swt) / det
    bandwidth = bus_factor(collective, n) / b if b > 0 else math.inf
    residuals = [((a + b * s) - t) / t for s, t in zip(sizes, times, strict=True)]
    return {"alpha_s": a / steps, "bandwidth_Bps": bandwidth,
            "bandwidth_GBps": bandwidth / 1e9, "steps": steps, "collective": collective,
            "rms_rel_err": math.sqrt(sum(r * r for r in residuals) / len(residuals)),
            "points": len(sizes)}


# The ring lab draws its measured step times against this model. A line more
# than this factor off is labelled with the factor and why (issue #22): a
# silent 50x gap teaches "the model is wrong", not why it is off here.
GAP_LIMIT = 3.0


def step_times(world_size: int, size_bytes: float, step_bytes: float, steps: int, *,
               fit: dict | None = None, link: tuple[float, float] | None = None) -> list[float]:
    """The alpha-beta model's time for each of ``steps`` ring steps.

    With a ``fit`` (`fit_alpha_beta` of the same algorithm at the same world
    size, from a benchmark on this machine) a step is that fit's whole
    all-reduce time over its steps, which is what the benchmark measured.
    With a ``link`` (alpha, B) only, a step is one message over one link:
    alpha + step_bytes / B.
    """
    if fit is not None:
        total = ring_time(world_size, size_bytes, fit["alpha_s"], fit["bandwidth_Bps"])
        return [total / steps] * steps
    if link is None:
        raise ValueError("need a fit or a link")
    alpha, bandwidth = link
    return [alpha + step_bytes / bandwidth] * steps


def gap(measured: list[float], predicted: list[float]) -> float:
    """How many times the model is off: median measured over median predicted.

    Above 1: the measured steps are slower than the model; below 1: faster.
    """
    m = sorted(measured)[len(measured) // 2] if measured else 0.0
    p = sorted(predicted)[len(predicted) // 2] if predicted else 0.0
    return m / p if p > 0 else math.inf


def off_by_more_than_limit(factor: float) -> bool:
    """True when a model line is more than `GAP_LIMIT` times off either way."""
    return factor > GAP_LIMIT or factor < 1 / GAP_LIMIT


def serial_exposed(ready: list[float], durations: list[float], backward_end: float) -> float:
    """Exposed communication of all-reduces that run one after another.

    Each all-reduce starts when its gradients are ready (``ready``) and the one
    before it has finished, and takes its ``durations``; whatever runs past
    ``backward_end`` is what the step waits for. Naive sync (every ``ready`` at
    or after backward's end) exposes the whole sum; DDP's early buckets hide
    behind backward. Any unit, as long as all three share it.
    """
    end = -math.inf
    for start, took in sorted(zip(ready, durations, strict=True)):
        end = max(end, start) + took
    return max(0.0, end - backward_end) if durations else 0.0


# --------------------------------------------------------------------------
# The memory ledger of sharded data parallelism (ZeRO, FSDP)
#
# Bytes one rank holds for the model state, per parameter, with fp32 Adam
# (weights 4, gradients 4, two moments 4 + 4):
#
#     ddp     4 + 4 + 8          every rank holds everything
#     zero1   4 + 4 + 8/N        optimizer state sharded
#     zero2   4 + (4 + 8)/N      gradients too
#     zero3   (4 + 4 + 8)/N      parameters too (FSDP)
#
# "/N" is the even split; a real run splits by whole tensors (ZeRO-1) or
# rows (FSDP), so `state_bytes` takes the elements this rank owns. The
# lessons' calculator (``app.calculators.memory_per_device``) and the
# sharding lab's predictions both read this one function, with the bytes
# per parameter of `per_parameter`.
#
# bf16 mixed precision computes with bf16 weights and gradients (2 + 2) and
# keeps an fp32 master copy of the weights beside Adam's moments (4 + 8):
# 2 + 2 + 12. The master copy counts as optimizer state, as the ZeRO paper
# counts it (K = 12): only the optimizer reads it, and ZeRO-1 shards it with
# the moments.

STRATEGIES = ("ddp", "zero1", "zero2", "zero3")
# Bytes per parameter of the weights and gradients the model computes with,
# and of the fp32 master copy of the weights, by training precision.
PRECISIONS = {
    "fp32": {"weights": 4, "grads": 4, "master": 0},
    "bf16-mixed": {"weights": 2, "grads": 2, "master": 4},
}
ADAM_BYTES = 8  # Adam's two fp32 moments per parameter
# Which parts of the model state each strategy shards across the ranks.
SHARDED = {"ddp": (), "zero1": ("optimizer",), "zero2": ("optimizer", "grads"),
           "zero3": ("optimizer", "grads", "params")}


def state_bytes(strategy: str, total: float, *, owned: float | None = None, world_size: int = 1,
                weights: float = 4, grads: float = 4, optimizer: float = 8) -> dict[str, float]:
    """Bytes of parameters, gradients and optimizer state one rank holds.

    ``total``: parameters of the model; ``owned``: those whose shard this
    rank keeps (default: the even split ``total / world_size``); the other
    arguments: bytes per parameter of each part.

    >>> state_bytes("zero2", 1e9, world_size=4)
    {'params': 4000000000.0, 'grads': 1000000000.0, 'optimizer': 2000000000.0}
    """
    if strategy not in SHARDED:
        raise ValueError(f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    mine = total / world_size if owned is None else owned

    def count(part: str) -> float:
        return mine if part in SHARDED[strategy] else total

    return {"params": weights * count("params"), "grads": grads * count("grads"),
            "optimizer": optimizer * count("optimizer")}


def per_parameter(precision: str = "fp32", optimizer: float = ADAM_BYTES) -> dict[str, float]:
    """`state_bytes`' bytes per parameter of each part: ``optimizer`` is the
    optimizer's own state (Adam: 8), to which mixed precision adds the master copy.

    >>> per_parameter("bf16-mixed")
    {'weights': 2, 'grads': 2, 'optimizer': 12}
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    p = PRECISIONS[precision]
    return {"weights": p["weights"], "grads": p["grads"], "optimizer": optimizer + p["master"]}


def wire_factor(strategy: str, world_size: int, *, zero1_broadcasts: bool = True) -> float:
    """Bytes each rank sends per step per byte of parameters, with ring collectives.

    DDP all-reduces the gradients: 2(n-1)/n. ZeRO-2 reduce-scatters them and
    all-gathers the updated parameters: (n-1)/n twice, the same. ZeRO-3
    all-gathers the parameters in forward and again in backward, then
    reduce-scatters the gradients: 3(n-1)/n, 1.5x DDP. ZeRO-1 could cost what
    DDP costs (reduce-scatter + all-gather), but torch's
    ZeroRedundancyOptimizer keeps DDP's all-reduce and then broadcasts each
    owner's parameters (``zero1_broadcasts``): 3(n-1)/n as well.
    """
    rs = bus_factor("reduce_scatter", world_size)
    extra = {"ddp": 0, "zero1": 1 if zero1_broadcasts else 0, "zero2": 0, "zero3": 1}[strategy]
    return (2 + extra) * rs


# --------------------------------------------------------------------------
# Gradient compression: what each scheme hands to the collectives per step
#
# For a model whose gradient tensors have the shapes ``shapes`` (P elements
# in all), each rank hands over per step:
#
#     fp32                4 P bytes, all-reduced
#     fp16, bf16          2 P bytes, all-reduced (half)
#     PowerSGD, rank r    4 (m + n) r bytes per m x n matrix it compresses
#                         (P = M Q, then Q = M^T P, both all-reduced), and
#                         4 x the elements it sends as they are (vectors, and
#                         matrices too small to gain: PowerSGD compresses
#                         only when (m + n) r x min_rate < m n)
#     top-k, density d    per bucket of b elements, k = ceil(d b) values
#                         (4 bytes) and k indices (4 bytes), all-gathered
#
# The compression lab checks its measured bytes against these, and the
# compression exercise grades a learner's hook by them.


def powersgd_elements(shapes: list[list[int]], rank: int, min_rate: float = 2.0) -> int:
    """Elements PowerSGD all-reduces per step for gradients of these shapes, as torch's hook decides.

    Each tensor is viewed as a matrix of ``shape[0]`` rows; its rank is capped
    at the smaller side; it is compressed when that saves more than
    ``min_rate`` times, else sent whole.

    >>> powersgd_elements([[128, 64], [128]], rank=1)  # (128 + 64) x 1, and the bias as it is
    320
    """
    total = 0
    for shape in shapes:
        rows = shape[0] if shape else 1
        cols = math.prod(shape[1:]) if len(shape) > 1 else 1
        r = min(rows, cols, rank)
        compressed = (rows + cols) * r
        total += compressed if compressed * min_rate < rows * cols else rows * cols
    return total


def topk_count(numel: int, density: float) -> int:
    """k for a bucket of ``numel`` entries: the ``density`` share, rounded up, at least 1."""
    return max(1, math.ceil(density * numel))


def topk_bytes(bucket_numels: list[int], density: float, value_bytes: int = 4, index_bytes: int = 4) -> int:
    """Bytes one rank hands over per step under top-k: k values and k indices per bucket.

    >>> topk_bytes([10_000], 0.01)  # 100 values and 100 indices of 4 bytes each
    800
    """
    return sum(topk_count(b, density) * (value_bytes + index_bytes) for b in bucket_numels)


def ring_sent(payload_by_kind: dict[str, float], world_size: int) -> float:
    """Bytes each rank sends on a ring for the payloads it handed over, by kind of collective.

    An all-reduce of S sends 2(n-1)/n S per rank; an all-gather to which each
    rank brings c sends (n-1) c per rank (the whole output, n c, times
    (n-1)/n): it grows with n where an all-reduce's stays under 2S.

    >>> ring_sent({"all_reduce": 1000, "all_gather": 100}, 4)
    1800.0
    """
    n = world_size
    return sum(size * (n * bus_factor(kind, n) if kind == "all_gather" else bus_factor(kind, n))
               for kind, size in payload_by_kind.items())


# Student's t at 97.5 % by degrees of freedom: the half-width of a 95 % confidence
# interval of a mean of k samples is t(k - 1) s / sqrt(k). Beyond 30, the normal's 1.96.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def mean_ci95(values: list[float]) -> tuple[float, float | None]:
    """(mean, half-width of its 95 % confidence interval by Student's t); None for one value.

    >>> mean_ci95([1.0, 2.0, 3.0])  # s = 1, t(2) = 4.303
    (2.0, 2.484...)
    """
    k = len(values)
    mean = sum(values) / k
    if k < 2:
        return mean, None
    s = math.sqrt(sum((v - mean) ** 2 for v in values) / (k - 1))
    t = _T975[k - 2] if k - 2 < len(_T975) else 1.96
    return mean, t * s / math.sqrt(k)
