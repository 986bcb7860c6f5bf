"""The all-reduces of the ring lab, by hand, and the work of one of its ranks.

`ring_allreduce` passes n chunks around a logical ring: n-1 reduce-scatter
steps, then n-1 all-gather steps; every rank sends 2(n-1)/n of the buffer.
`naive_allreduce` passes the whole tensor around the ring n-1 times, as the
PyTorch tutorial does. `ring_allreduce_pipelined` sends what `ring_allreduce`
sends, in segments, several in flight, as gloo and NCCL do. `run_rank` times
them beside ``dist.all_reduce`` and checks that they agree.

The lab itself (launch commands, parameters, summary, report) is ``labs.ring.lab``,
which imports no torch; this module is imported by the ranks only.
"""

from __future__ import annotations

import hashlib
import time

import torch
import torch.distributed as dist

from labs.context import shared_clock_origin
from labs.ring.lab import DTYPES, Params


def ring_allreduce(tensor, *, op="sum", group=None, trace=None):
    """All-reduce ``tensor`` in place over a ring of point-to-point messages; return it.

    ``op`` is "sum" or "avg". If ``trace`` is a list, one dict per step is
    appended to it (times are raw ``time.perf_counter()`` readings).
    """
    if op not in ("sum", "avg"):
        raise ValueError(f"op must be 'sum' or 'avg', not {op!r}")
    if op == "avg" and not tensor.is_floating_point():
        raise ValueError("avg of an integer tensor is not an integer tensor; gloo refuses it too")
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    right, left = (rank + 1) % world, (rank - 1) % world
    # A flat view, so that any shape works and every chunk below is a view:
    # writing into a chunk writes into the result.
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.flatten()
    # n chunks whose sizes differ by at most one element; some are empty when
    # the tensor has fewer elements than there are ranks.
    chunks = torch.tensor_split(flat, world)
    incoming = torch.empty_like(chunks[0])  # chunk 0 is the largest

    def exchange(send, into):
        # isend first, then a blocking recv: every rank sends and receives at
        # once. A ring of blocking sends would deadlock, because gloo's send
        # waits until the peer has posted the matching recv.
        request = dist.isend(send, group=group, group_dst=right)
        dist.recv(into, group=group, group_src=left)
        request.wait()

    def record(step, phase, send_c, recv_c, t_start):
        if trace is not None:
            trace.append({
                "step": step, "phase": phase,
                "send_chunk": send_c, "recv_chunk": recv_c,
                "send_to": right, "recv_from": left,
                "bytes": chunks[send_c].numel() * flat.element_size(),
                "recv_bytes": chunks[recv_c].numel() * flat.element_size(),
                "t_start": t_start, "t_end": time.perf_counter(),
            })

    # Reduce-scatter, n-1 steps: pass one partial sum to the right, add the
    # one arriving from the left. The chunk sent at step s already holds s+1
    # ranks' contributions; after the last step it holds all n.
    for s in range(world - 1):
        send_c, recv_c = (rank - s) % world, (rank - s - 1) % world
        t_start = time.perf_counter()
        into = incoming[: chunks[recv_c].numel()]
        exchange(chunks[send_c], into)
        chunks[recv_c].add_(into)
        record(s, "reduce-scatter", send_c, recv_c, t_start)

    # Rank r now owns the finished chunk r+1. For an average, divide it here,
    # once, on 1/n of the data, before it is shared.
    if op == "avg":
        chunks[(rank + 1) % world].div_(world)

    # All-gather, n-1 steps: forward the finished chunk we got last and
    # receive the next one straight into place. Nothing left to add.
    for s in range(world - 1):
        send_c, recv_c = (rank + 1 - s) % world, (rank - s) % world
        t_start = time.perf_counter()
        exchange(chunks[send_c], chunks[recv_c])
        record(world - 1 + s, "all-gather", send_c, recv_c, t_start)

    if not tensor.is_contiguous():
        tensor.copy_(flat.view_as(tensor))  # we worked on a copy
    return tensor


def naive_allreduce(tensor, *, op="sum", group=None, trace=None):
    """All-reduce ``tensor`` in place by passing the whole tensor around the ring.

    As in the PyTorch distributed tutorial: n-1 steps, each sending the full
    tensor. Same signature and trace format as `ring_allreduce`; the chunk
    fields are None because nothing is split.
    """
    if op not in ("sum", "avg"):
        raise ValueError(f"op must be 'sum' or 'avg', not {op!r}")
    if op == "avg" and not tensor.is_floating_point():
        raise ValueError("avg of an integer tensor is not an integer tensor; gloo refuses it too")
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    right, left = (rank + 1) % world, (rank - 1) % world
    outgoing = tensor.contiguous().clone()  # what we forward: first our own tensor
    incoming = torch.empty_like(outgoing)
    total = outgoing.clone()
    for step in range(world - 1):
        t_start = time.perf_counter()
        request = dist.isend(outgoing, group=group, group_dst=right)
        dist.recv(incoming, group=group, group_src=left)
        request.wait()
        total += incoming
        # Forward what just arrived: after n-1 steps every rank's tensor has
        # visited every other rank once.
        outgoing, incoming = incoming, outgoing
        t_end = time.perf_counter()
        if trace is not None:
            nbytes = outgoing.numel() * outgoing.element_size()
            trace.append({
                "step": step, "phase": "pass-around",
                "send_chunk": None, "recv_chunk": None,
                "send_to": right, "recv_from": left,
                "bytes": nbytes, "recv_bytes": nbytes,
                "t_start": t_start, "t_end": t_end,
            })
    if op == "avg":
        total /= world
    # Each rank adds the same numbers in its own order, so float results can
    # differ in the last bits from rank to rank; the ring's cannot.
    tensor.copy_(total)
    return tensor


def ring_allreduce_pipelined(tensor, *, op="sum", group=None, trace=None,
                             segment_bytes=2 << 20, in_flight=8):
    """`ring_allreduce` as real libraries run it: in segments, several in flight.

    Same result, signature and trace format as `ring_allreduce` (one record
    per ring step), but each chunk travels as segments of at most
    ``segment_bytes``; up to ``in_flight`` receives are posted ahead, and a
    segment is forwarded as soon as it has been added, while the rest of its
    chunk is still arriving. Scratch memory is ``in_flight`` segments,
    however large the tensor. A step's ``t_start`` is when its first segment
    was handed to isend, ``t_end`` when its last segment had arrived (and, in
    reduce-scatter, been added). With op="avg" each segment is divided as
    soon as it is final, so after the last reduce-scatter step the owned
    chunk already holds the average. The defaults were the fastest we
    measured on gloo over loopback TCP, 1-64 MiB, 2 and 4 ranks.
    """
    if op not in ("sum", "avg"):
        raise ValueError(f"op must be 'sum' or 'avg', not {op!r}")
    if op == "avg" and not tensor.is_floating_point():
        raise ValueError("avg of an integer tensor is not an integer tensor; gloo refuses it too")
    if segment_bytes < 1 or in_flight < 1:
        raise ValueError("segment_bytes and in_flight must be at least 1")
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    if world == 1:
        return tensor  # nothing to add, and the average of one tensor is itself
    right, left = (rank + 1) % world, (rank - 1) % world
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.flatten()
    chunks = torch.tensor_split(flat, world)
    steps = 2 * (world - 1)

    # Cut each chunk into segments. Every rank cuts chunk c the same way, so
    # the j-th segment of chunk c is the same elements on sender and receiver.
    # An empty chunk (a tensor shorter than the ring) is one empty segment:
    # the message still goes, so every step is a real exchange, as in the ring.
    per_chunk = -(-chunks[0].numel() * flat.element_size() // segment_bytes)
    segments = [torch.tensor_split(chunk, max(1, min(per_chunk, chunk.numel())))
                for chunk in chunks]

    # In both phases, what a rank receives at step s is what it sends at step
    # s+1: chunk rank-s goes out, chunk rank-s-1 comes in. So the all-reduce is
    # one stream of segments, and each can move on as soon as it is finished.
    def send_chunk(s):
        return (rank - s) % world

    def recv_chunk(s):
        return (rank - s - 1) % world

    # Every receive, in the order the left neighbour sends them.
    incoming = [(s, seg) for s in range(steps) for seg in segments[recv_chunk(s)]]
    # Reduce-scatter segments land in scratch, to be added; all-gather
    # segments land straight in place. One scratch buffer per receive in
    # flight: memory stays at in_flight segments however large the tensor.
    scratch = [torch.empty_like(segments[0][0]) for _ in range(min(in_flight, len(incoming)))]
    posted = []  # (request, where it lands), one per posted receive, in order

    def post_recv(i):
        s, seg = incoming[i]
        into = scratch[i % len(scratch)][: seg.numel()] if s < world - 1 else seg
        posted.append((dist.irecv(into, group=group, group_src=left), into))

    # Step 0's segments are ready now: hand them all to gloo first, and it
    # moves each one as soon as the right neighbour has posted its receive.
    # Then post our receives, several ahead, so that the left neighbour's
    # segments find a place to land while we are busy adding.
    t_start = [time.perf_counter()] + [None] * steps
    sends = [dist.isend(seg, group=group, group_dst=right) for seg in segments[send_chunk(0)]]
    for i in range(len(scratch)):
        post_recv(i)

    for i, (s, seg) in enumerate(incoming):
        request, into = posted[i]
        request.wait()
        if s < world - 1:
            seg.add_(into)
            if s == world - 2 and op == "avg":
                seg.div_(world)  # this segment is now final: average it, once
        # Forward the finished segment at once: step s+1 starts here, while
        # the rest of step s is still on the wire.
        if s + 1 < steps:
            if t_start[s + 1] is None:
                t_start[s + 1] = time.perf_counter()
            sends.append(dist.isend(seg, group=group, group_dst=right))
        # Its scratch buffer is free again: post the receive in_flight ahead.
        if i + len(scratch) < len(incoming):
            post_recv(i + len(scratch))
        if trace is not None and (i + 1 == len(incoming) or incoming[i + 1][0] != s):
            trace.append({
                "step": s, "phase": "reduce-scatter" if s < world - 1 else "all-gather",
                "send_chunk": send_chunk(s), "recv_chunk": recv_chunk(s),
                "send_to": right, "recv_from": left,
                "bytes": chunks[send_chunk(s)].numel() * flat.element_size(),
                "recv_bytes": chunks[recv_chunk(s)].numel() * flat.element_size(),
                "t_start": t_start[s], "t_end": time.perf_counter(),
            })
    # Sends can be left to finish until now: a segment we sent is overwritten
    # only by its all-gather copy, which cannot arrive before our own
    # contribution to it has left. We must not return while one is in flight.
    for request in sends:
        request.wait()

    if not tensor.is_contiguous():
        tensor.copy_(flat.view_as(tensor))  # we worked on a copy
    return tensor


# --------------------------------------------------------------------------
# One rank of the lab

# torch's dtype for each of the lab's element types (``labs.ring.lab.DTYPES``)
TORCH_DTYPES = {name: getattr(torch, name) for name in DTYPES}
# The functions behind ``labs.ring.lab.ALGOS``, in its order.
ALGOS = {"ring": ring_allreduce, "pipelined": ring_allreduce_pipelined, "naive": naive_allreduce}


def make_input(params: Params, rank: int, device="cpu") -> torch.Tensor:
    """Each rank's input, reproducible from (seed, rank) under any launcher."""
    gen = torch.Generator().manual_seed(params.seed * 1000 + rank)
    if TORCH_DTYPES[params.dtype].is_floating_point:
        data = torch.randn(params.numel, generator=gen, dtype=torch.float64)
    else:
        data = torch.randint(-1000, 1000, (params.numel,), generator=gen)
    return data.to(TORCH_DTYPES[params.dtype]).to(device)


def tolerance(abs_sum: torch.Tensor, dtype: torch.dtype, world_size: int) -> torch.Tensor:
    """How far two correct all-reduces may differ, element by element.

    Summing n numbers in a different order changes the result by at most
    about (n-1) * eps * sum(|x_i|) each way; we allow twice n of that. Integer
    sums are exact.
    """
    if not dtype.is_floating_point:
        return torch.zeros_like(abs_sum, dtype=torch.float64)
    eps = torch.finfo(dtype).eps
    return 2 * world_size * eps * abs_sum.double()


class _ProgressTrace(list):
    """A trace list that also reports each finished step to the launcher.

    ``done`` steps of earlier repetitions come first, so that the bar fills
    once over all of them."""

    def __init__(self, ctx, total_steps: int, done: int = 0, label: str = ""):
        super().__init__()
        self.ctx, self.total_steps, self.done, self.label = ctx, total_steps, done, label

    def append(self, record: dict) -> None:
        super().append(record)
        send = f"chunk {record['send_chunk']}" if record["send_chunk"] is not None else "tensor"
        self.ctx.progress(self.done + len(self), self.total_steps, record["phase"],
                          f"{self.label}sent {send} ({record['bytes']} B) to rank {record['send_to']}")


def run_rank(ctx, params: Params) -> dict:
    """One rank's runs of ours and of dist.all_reduce, each phase reported as it begins (the
    page says what a long run is doing: making the input, warming up, timing the built-in);
    ``work_s`` is the whole of it, so that what the launcher reports beyond it is starting
    and stopping the processes (journey review m2: 54 s of "overhead" were this rank's work)."""
    began = time.perf_counter()
    allreduce = ALGOS[params.algo]
    chunked = params.algo != "naive"  # ring and pipelined: 2(n-1) steps over n chunks
    world, rank = ctx.world_size, ctx.rank
    ring_steps = 2 * (world - 1) if chunked else world - 1
    k = params.repeats
    total_steps = k * ring_steps + 1  # every repetition's ring steps, then the check
    ctx.progress(0, total_steps, "input", f"{params.numel} elements of {params.dtype}")
    original = make_input(params, rank, ctx.device)
    for i in range(params.warmup):
        ctx.progress(0, total_steps, "warm-up", f"untimed run {i + 1}/{params.warmup}")
        allreduce(original.clone(), op=params.op)

    origin, clock = shared_clock_origin(ctx.device)
    ctx.progress(0, total_steps, "reduce-scatter" if chunked else "pass-around")
    # k traced runs of ours: one run is noise on a shared machine; the page
    # shows their median and spread, and replays the median run.
    runs, spans = [], []
    for i in range(k):
        trace = _ProgressTrace(ctx, total_steps, done=i * ring_steps, label=f"run {i + 1}/{k}: ")
        ours = original.clone()
        with ctx.communicating():
            dist.barrier()
            t0 = time.perf_counter()
            allreduce(ours, op=params.op, trace=trace)
            t1 = time.perf_counter()
        runs.append([dict(rec, t_start=rec["t_start"] - origin, t_end=rec["t_end"] - origin)
                     for rec in trace])
        spans.append((t0 - origin, t1 - origin))

    # The reference: torch's own all-reduce on the same input, timed k times too.
    red = dist.ReduceOp.AVG if params.op == "avg" else dist.ReduceOp.SUM
    builtin = []
    with ctx.communicating():
        for i in range(k):
            ctx.progress(total_steps - 1, total_steps, "dist.all_reduce", f"run {i + 1}/{k}")
            reference = original.clone()
            dist.barrier()
            t2 = time.perf_counter()
            dist.all_reduce(reference, op=red)
            builtin.append(time.perf_counter() - t2)
        abs_sum = original.abs().to(torch.float64) if original.is_floating_point() else None
        if abs_sum is not None:
            dist.all_reduce(abs_sum)
    err = (ours.double() - reference.double()).abs()
    if abs_sum is None:
        wrong = int((err > 0).sum())
    else:
        scale = abs_sum / world if params.op == "avg" else abs_sum
        wrong = int((err > tolerance(scale, original.dtype, world)).sum())
    ctx.progress(total_steps, total_steps, "check", f"{wrong} element(s) differ")
    small = params.numel <= 64  # tiny tensors: ship the numbers for the animation
    return {
        "rank": rank,
        "runs": runs,
        "spans": spans,
        "builtin_times_s": builtin,
        "max_abs_err": float(err.max()) if err.numel() else 0.0,
        "wrong": wrong,
        "checksum": hashlib.sha256(ours.cpu().contiguous().view(torch.uint8).numpy()).hexdigest(),
        "clock": clock,
        "input": original.double().tolist() if small else None,
        "output": ours.double().tolist() if small else None,
        "ring_s": sum(t1 - t0 for t0, t1 in spans),
        "work_s": time.perf_counter() - began,
    }
