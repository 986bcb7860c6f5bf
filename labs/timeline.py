"""Timelines of a training step: spans in, overlap and exposed communication out.

A span is ``{"kind": "compute" | "comm", "name", "start_ms", "end_ms", "step"}``:
compute spans are forward, backward and optimizer; a comm span is one
all-reduce from its launch to its completion. The DDP lab's ``timeline``
section records them on every rank (``labs.ddp.timeline``); this module does
the arithmetic on them, and writes them as a Chrome/Perfetto trace. It
imports neither torch nor the app, so the page and the tests use it freely.

A collective moves data only once every rank has started it: the k-th
all-reduce of a step on each rank is one collective (gloo and the exercises'
router pair them so), and `started_together` gives each comm span its
``ready_ms``, the last of those starts. Before it a rank waits for a slower
one, which is not communication but the slower rank's lateness: the lanes
draw it apart, and the figures below count a comm span from its
``ready_ms`` (a span without one, from its start).

- overlap: of the time some all-reduce moves data, the share during which
  backward computes (the union of the comm spans intersected with the union
  of the backward spans, over the union of the comm spans). All-reduces in
  flight together count once. A variant's overlap is its median step's,
  each step taken whole: its all-reduces on every rank against the backward
  of every rank (a step ends no sooner than its slowest rank's backward, so
  data moved while any rank still computes backward cost the step nothing).
  One step in which the scheduler held a rank back moves the median little.
  Journey review M3: counted from each rank's own launch, a rank that waited
  for a late peer read as communication exposed, and the figure went from
  85 % to 1 % with the machine's load.
- exposed communication: time some all-reduce moves data and no compute
  runs: what the step waits for (a variant's: in a step taken whole, per
  step; a rank's: on that rank).
- idle: time inside a step (from its first span's start to its last span's
  end) with neither compute nor communication, e.g. waiting for the other
  ranks at the step's barrier or to start a collective.

`step_model` sets a step's measured compute beside the communication the
alpha-beta fit of a benchmark predicts (``labs.model``): the page's "predict,
then measure". A comm span may carry its ``bytes``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from statistics import fmean, median

from labs.model import ring_time, serial_exposed

Interval = tuple[float, float]
BACKWARD = "backward"


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """The intervals merged: sorted, disjoint, empty ones dropped."""
    merged: list[list[float]] = []
    for start, end in sorted((a, b) for a, b in intervals if b > a):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def length(intervals: Iterable[Interval]) -> float:
    """Total time covered, each moment once."""
    return sum(b - a for a, b in union(intervals))


def intersect(left: Iterable[Interval], right: Iterable[Interval]) -> list[Interval]:
    """The moments in both."""
    a, b = union(left), union(right)
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if end > start:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _intervals(spans: Iterable[dict], kind: str | None = None, name: str | None = None) -> list[Interval]:
    """The spans' intervals; a comm span's from its ``ready_ms`` where it has one."""
    return [(s.get("ready_ms", s["start_ms"]) if s["kind"] == "comm" else s["start_ms"], s["end_ms"])
            for s in spans if (kind is None or s["kind"] == kind) and (name is None or s["name"] == name)]


def started_together(ranks: Sequence[dict]) -> list[dict]:
    """The ranks with each comm span given its ``ready_ms``: when the last rank started the same
    collective, the k-th all-reduce of the step on every rank (in the order each rank started
    them); never before the span's own start. A span without a partner on some rank (the ranks
    made different numbers of calls) keeps its own start."""
    out = [{**r, "spans": [dict(s) for s in r["spans"]]} for r in ranks]
    for step in {s.get("step", 0) for r in out for s in r["spans"]}:
        calls = [sorted((s for s in r["spans"] if s["kind"] == "comm" and s.get("step", 0) == step),
                        key=lambda s: s["start_ms"]) for r in out]
        for k in range(min(len(c) for c in calls)):
            ready = max(c[k]["start_ms"] for c in calls)
            for c in calls:
                c[k]["ready_ms"] = round(ready, 4)
    return out


def overlap_ms(spans: Sequence[dict]) -> float:
    """Time some all-reduce is in flight while backward computes."""
    return length(intersect(_intervals(spans, "comm"), _intervals(spans, "compute", BACKWARD)))


def comm_ms(spans: Sequence[dict]) -> float:
    """Time some all-reduce is in flight."""
    return length(_intervals(spans, "comm"))


def exposed_ms(spans: Sequence[dict]) -> float:
    """Time some all-reduce is in flight and nothing computes."""
    comm, compute = _intervals(spans, "comm"), _intervals(spans, "compute")
    return length(comm) - length(intersect(comm, compute))


def idle_ms(spans: Sequence[dict]) -> float:
    """Time within each step with neither compute nor communication."""
    total = 0.0
    for step in {s.get("step", 0) for s in spans}:
        mine = [s for s in spans if s.get("step", 0) == step]
        window = max(s["end_ms"] for s in mine) - min(s["start_ms"] for s in mine)
        total += window - length(_intervals(mine))
    return total


def overlap_fraction(spans: Sequence[dict]) -> float:
    """Overlap over all communication time (0 when nothing was communicated)."""
    comm = comm_ms(spans)
    return overlap_ms(spans) / comm if comm > 0 else 0.0


def rebase(ranks: Sequence[dict]) -> list[dict]:
    """The ranks' spans shifted together so that the earliest starts at 0 ms."""
    origin = min((s["start_ms"] for r in ranks for s in r["spans"]), default=0.0)
    return [{**r, "spans": [{**s, "start_ms": round(s["start_ms"] - origin, 4),
                             "end_ms": round(s["end_ms"] - origin, 4)} for s in r["spans"]]} for r in ranks]


def _whole_steps(ranks: Sequence[dict]) -> list[list[dict]]:
    """Each step's spans of every rank together, in step order."""
    return [[s for r in ranks for s in r["spans"] if s.get("step", 0) == step]
            for step in sorted({s.get("step", 0) for r in ranks for s in r["spans"]})]


def step_overlaps(ranks: Sequence[dict]) -> list[float]:
    """Each step's overlap, the step taken whole (every rank's all-reduces against every rank's
    backward, comm spans from their ``ready_ms``: see `started_together`), in step order; a
    step with no communication is left out."""
    return [overlap_ms(spans) / comm_ms(spans) for spans in _whole_steps(ranks) if comm_ms(spans) > 0]


def variant(ranks: Sequence[dict], **extra) -> dict:
    """One variant's figures from each rank's spans (``[{"rank", "spans"}]``), whose comm spans
    it gives their ``ready_ms`` (`started_together`).

    The overlap is the median of `step_overlaps` (``overlap_steps``: each
    step's; 0 without communication); exposed communication is per step, each
    step taken whole (``exposed_comm_ms``), and per rank on that rank with its
    idle time."""
    ranks = started_together(ranks)
    steps = max(1, len({s.get("step", 0) for r in ranks for s in r["spans"]}))
    comm = sum(comm_ms(r["spans"]) for r in ranks)
    per_step = step_overlaps(ranks)
    out = []
    for r in ranks:
        out.append({"rank": r["rank"], "spans": r["spans"],
                    "exposed_comm_ms": exposed_ms(r["spans"]) / steps,
                    "idle_ms": idle_ms(r["spans"]) / steps,
                    "comm_ms": comm_ms(r["spans"]) / steps})
    return {"overlap": median(per_step) if per_step else 0.0, "overlap_steps": per_step,
            "exposed_comm_ms": sum(exposed_ms(spans) for spans in _whole_steps(ranks)) / steps,
            "comm_ms": comm / steps / max(1, len(ranks)), "steps": steps, **extra, "ranks": out}


def step_model(var: dict, *, world_size: int, fit: dict | None, gradient_bytes: float = 0.0) -> dict:
    """A step as the model sees it, beside the step as measured (ms, mean over steps).

    model = compute + exposed: compute is measured (forward, backward and
    optimizer spans); exposed communication is predicted: each all-reduce of
    the variant takes the alpha-beta time of its bytes (`labs.model.ring_time`
    with the ``fit``'s ``alpha_s`` and ``bandwidth_Bps``), starts when the rank
    launched it (its gradients were ready) and the one before has finished
    (`labs.model.serial_exposed`); what runs past backward's end is exposed,
    the rest (``hidden_ms``) hidden behind backward. The model lets the
    all-reduces run beside compute without slowing it, as NCCL's own stream
    does beside a GPU's kernels: on a CPU, gloo's copies and additions take
    the cores from backward instead, so ``hidden_ms`` is what overlap would
    hide where communication costs compute nothing.
    A comm span without ``bytes`` (older runs) counts an equal share of
    ``gradient_bytes``. measured: from the step's first span's start to its
    last span's end. Each step counts on its slowest rank. Without a ``fit``
    the predicted figures (comm, exposed, hidden, model, residual) are None.
    """
    rows = []
    for step in sorted({s.get("step", 0) for r in var["ranks"] for s in r["spans"]}):
        per_rank = []
        for r in var["ranks"]:
            mine = [s for s in r["spans"] if s.get("step", 0) == step]
            if not mine:
                continue
            comm = [s for s in mine if s["kind"] == "comm"]
            compute = [s for s in mine if s["kind"] == "compute"]
            busy = sum(s["end_ms"] - s["start_ms"] for s in compute)
            window = max(s["end_ms"] for s in mine) - min(s["start_ms"] for s in mine)
            took = [ring_time(world_size, s.get("bytes", gradient_bytes / len(comm)), fit["alpha_s"],
                              fit["bandwidth_Bps"]) * 1e3 for s in comm] if fit else []
            backward_end = max((s["end_ms"] for s in compute if s["name"] == BACKWARD),
                               default=max((s["end_ms"] for s in compute), default=0.0))
            exposed = serial_exposed([s["start_ms"] for s in comm], took, backward_end) if fit else 0.0
            per_rank.append((busy + exposed, busy, exposed, sum(took), window))
        if per_rank:
            model, busy, exposed, comm_total, _window = max(per_rank)
            rows.append((model, busy, exposed, comm_total, max(p[-1] for p in per_rank)))
    count = len(rows)
    rows = rows or [(0.0,) * 5]
    model, busy, exposed, comm_total, measured = (fmean(column) for column in zip(*rows, strict=True))
    if not fit:
        model = exposed = comm_total = None
    return {"steps": count, "compute_ms": busy, "measured_ms": measured, "comm_ms": comm_total,
            "exposed_ms": exposed, "hidden_ms": None if model is None else max(0.0, comm_total - exposed),
            "model_ms": model, "residual_ms": None if model is None else measured - model}


# --------------------------------------------------------------------------
# Chrome / Perfetto traces

THREADS = {"compute": 0, "comm": 1}


def chrome_trace(variants: dict[str, dict], rank: int | None = None) -> dict:
    """The spans as a Chrome trace (``chrome://tracing``, ui.perfetto.dev):
    one process per variant and rank, one thread for compute and one for
    communication; times in microseconds. ``rank``: that rank's spans only."""
    events: list[dict] = []
    for pid, (name, var) in enumerate(variants.items()):
        for r in var["ranks"]:
            if rank is not None and r["rank"] != rank:
                continue
            proc = pid * 1000 + r["rank"]
            events.append({"ph": "M", "name": "process_name", "pid": proc, "tid": 0,
                           "args": {"name": f"{name} rank {r['rank']}"}})
            for thread, tid in THREADS.items():
                events.append({"ph": "M", "name": "thread_name", "pid": proc, "tid": tid,
                               "args": {"name": thread}})
            events += [{"ph": "X", "name": s["name"], "cat": s["kind"], "pid": proc, "tid": THREADS[s["kind"]],
                        "ts": s["start_ms"] * 1e3, "dur": (s["end_ms"] - s["start_ms"]) * 1e3,
                        "args": {"step": s.get("step", 0)}} for s in r["spans"]]
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_traces(directory: str | Path, timeline: dict) -> list[Path]:
    """One trace file per rank (``rank<r>.json``) from the timeline section; returns the paths."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    variants = timeline["variants"]
    ranks = sorted({r["rank"] for v in variants.values() for r in v["ranks"]})
    paths = []
    for rank in ranks:
        path = folder / f"rank{rank}.json"
        path.write_text(json.dumps(chrome_trace(variants, rank)))
        paths.append(path)
    return paths
