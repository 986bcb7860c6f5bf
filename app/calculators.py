"""The numbers behind the lessons' interactive pieces. Plain functions, no UI.

Units: bytes, seconds, bytes per second. The formulas are the course's:
ring all-reduce sends 2(n-1)/n x S per device in 2(n-1) steps, and the
alpha-beta model T = 2(n-1) alpha + 2(n-1)/n x S / B, which lives in
``labs.model`` so that the benchmark lab measures what the lessons estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

# One bandwidth model for the lessons and the benchmark lab: busbw in bytes/s,
# and the alpha-beta time T = 2(n-1) alpha + 2(n-1)/n x S / B; and one memory
# ledger (`state_bytes`) for the lessons and the sharding lab.
from labs.model import PRECISIONS as PRECISIONS
from labs.model import bus_factor, per_parameter, ring_steps, state_bytes
from labs.model import busbw as busbw
from labs.model import ring_time as ring_allreduce_time

GB = 1e9

# PRECISIONS (from ``labs.model``, which the sharding lab reads too): bytes per
# parameter for (weights, gradients) and extra master weights, by training precision.
# Optimizer state bytes per parameter (fp32 state).
OPTIMIZERS = {"sgd": 0, "sgd-momentum": 4, "adam": 8}
# Common device memory sizes in GB (decimal, as vendors state them).
DEVICES = {"24 GB (RTX 4090 / L4)": 24, "80 GB (H100)": 80, "141 GB (H200)": 141}
# Typical links: per-message latency alpha (s) and one-way bandwidth B (B/s).
# loopback-gloo: an earlier `make bench` on a 2-vCPU machine fit B = 1.41-1.46 GB/s
# for the built-in all-reduce and measures 1.0-1.4 GB/s busbw at 4-64 MiB, so
# 1.2 GB/s is what a learner without their own bench run should expect.
# pcie4: PCIe 4.0 x16 carries 31.5 GB/s per direction, about 25 GB/s in
# practice (16 GB/s would be PCIe 3.0).
LINKS = {
    "loopback-gloo": (50e-6, 1.2 * GB),
    "pcie4": (10e-6, 25 * GB),
    "nvlink4": (3e-6, 450 * GB),
    "infiniband-ndr": (8e-6, 50 * GB),
}
# NVLink and PCIe join the GPUs of one node, NODE_SIZE of them (an 8-GPU HGX board); a ring
# over more devices also crosses nodes, and its slowest hop, the network between them,
# sets its pace: there `scaling` uses BETWEEN_NODES (journey review m3: "NVLink" drew 100 %
# from 1 to 512 devices, which no NVLink spans).
NODE_SIZE = 8
WITHIN_NODE = ("pcie4", "nvlink4")
BETWEEN_NODES = "infiniband-ndr"


def link_for(link: str, world_size: int) -> str:
    """The link that paces a ring of ``world_size`` devices when ``link`` joins them within a
    node: itself up to `NODE_SIZE` devices, the network between nodes beyond."""
    return BETWEEN_NODES if link in WITHIN_NODE and world_size > NODE_SIZE else link


@dataclass(frozen=True)
class Memory:
    weights: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer


def memory_per_device(params: float, precision: str = "fp32", optimizer: str = "adam", *,
                      strategy: str = "ddp", world_size: int = 1) -> Memory:
    """Bytes each data-parallel rank holds for the model state (no activations).

    ``strategy`` ("ddp", "zero1", "zero2", "zero3") says which parts are
    sharded over ``world_size`` ranks: ``labs.model.state_bytes``, the
    formula the sharding lab's predictions use too.

    >>> memory_per_device(1e9, "fp32", "adam").total / 1e9
    16.0
    >>> memory_per_device(1e9, "fp32", "adam", strategy="zero3", world_size=8).total / 1e9
    2.0
    >>> memory_per_device(7e9, "bf16-mixed", "adam", strategy="zero1", world_size=8).total / 1e9
    38.5
    """
    each = per_parameter(precision, OPTIMIZERS[optimizer])
    # The fp32 master copy belongs to the optimizer (ZeRO-1 shards it with the
    # moments), but the chart shows it with the weights, as the lessons' tables do.
    state = each["optimizer"]
    b = state_bytes(strategy, params, world_size=world_size, **each)
    master = b["optimizer"] * PRECISIONS[precision]["master"] / state if state else 0.0
    return Memory(weights=b["params"] + master, grads=b["grads"], optimizer=b["optimizer"] - master)


def fits(memory: Memory, device_gb: float) -> bool:
    return memory.total <= device_gb * GB


def max_params(device_gb: float, precision: str = "fp32", optimizer: str = "adam") -> float:
    """The largest parameter count whose model state fits on one device."""
    return device_gb * GB / memory_per_device(1, precision, optimizer).total


@dataclass(frozen=True)
class RingTraffic:
    world_size: int
    buffer_bytes: float
    chunk_bytes: float
    steps: int
    sent_per_device: float
    received_per_device: float
    total_on_links: float


def ring_traffic(world_size: int, buffer_bytes: float) -> RingTraffic:
    """What a ring all-reduce of ``buffer_bytes`` costs each of ``world_size`` devices."""
    n = world_size
    per_device = bus_factor("all_reduce", n) * buffer_bytes
    return RingTraffic(
        world_size=n, buffer_bytes=buffer_bytes, chunk_bytes=buffer_bytes / n,
        steps=ring_steps("all_reduce", n), sent_per_device=per_device, received_per_device=per_device,
        total_on_links=n * per_device,
    )


@dataclass(frozen=True)
class ScalingPoint:
    world_size: int
    step_time: float
    comm_time: float
    exposed_comm: float
    throughput: float  # samples per second, whole job
    efficiency: float


def scaling(
    *, params: float, bytes_per_grad: int, link: str, compute_time: float, batch_per_device: int,
    overlap: float, world_sizes: list[int],
) -> list[ScalingPoint]:
    """Throughput and scaling efficiency against the device count.

    Each step computes for ``compute_time`` seconds (forward + backward), then
    all-reduces the gradients; a fraction ``overlap`` of the backward pass
    (taken as two thirds of the compute) hides communication, as DDP's
    buckets do. A link within a node (NVLink, PCIe) carries rings of up to
    `NODE_SIZE` devices; larger rings run at the pace of the network between
    nodes (`link_for`).
    """
    grad_bytes = params * bytes_per_grad
    base = batch_per_device / compute_time
    points = []
    for n in world_sizes:
        alpha, bandwidth = LINKS[link_for(link, n)]
        comm = ring_allreduce_time(n, grad_bytes, alpha, bandwidth)
        hidden = min(comm, overlap * compute_time * 2 / 3)
        step = compute_time + comm - hidden
        throughput = n * batch_per_device / step
        points.append(ScalingPoint(n, step, comm, comm - hidden, throughput, throughput / (n * base)))
    return points


def ring_schedule(world_size: int) -> list[list[tuple[int, int, int, str]]]:
    """The textbook ring all-reduce: per step, the (src, dst, chunk, phase) sends.

    In reduce-scatter step s rank r sends chunk (r - s) mod n to rank r+1; in
    all-gather step s it sends chunk (r + 1 - s) mod n. After reduce-scatter
    rank r owns the fully reduced chunk (r + 1) mod n.
    """
    n = world_size
    steps = []
    for s in range(n - 1):
        steps.append([(r, (r + 1) % n, (r - s) % n, "reduce-scatter") for r in range(n)])
    for s in range(n - 1):
        steps.append([(r, (r + 1) % n, (r + 1 - s) % n, "all-gather") for r in range(n)])
    return steps
