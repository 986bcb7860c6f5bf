"""What running a lab costs beyond its collectives, and how DDP scales.

- launch: ``labs.launch.run_lab`` of the ring lab on 4 ranks; wall time beside the
  timed all-reduces' own time (each rank's ``ring_s``) and the launcher's
  overhead beyond the ranks' whole work (``LabResult.overhead_s``: start-up,
  rendezvous, shutdown);
- first event: from the request to the first progress event, in-process
  (``run_lab(on_event=...)``) and the way the web app runs a lab
  (``python -m labs ring --events FILE`` in a new process), beside the bare
  ``python -c "import torch"`` every new process pays;
- ddp: ``labs.ddp``'s ``scaling`` section (weak scaling on 1, 2, 4 ranks)
  and its ``breakdown`` (naive all-reduce after backward vs DDP's
  overlapped buckets: the step time ratio);
- compression: ``labs.compression`` on 2 ranks, every strategy: wall time, and
  the bytes each strategy saves per step against fp32 (measured, and how far from
  its formula), with its loss gap and median step;
- timeline: ``labs.ddp``'s ``timeline`` section (2 ranks, the page's
  defaults), run ``timeline_runs`` times: each variant's overlap with
  backward and exposed communication per step, median and range over the
  runs, with the load average as each run began; and the bucketed-overlap
  exercise's traced case graded as many times (the reference, in the
  default sandbox, torch DDP's lanes made afresh each time): the overlap of
  the learner's lanes and of torch DDP's, median and range;
- topology: ``labs.topology`` on 2 network namespaces x 2 ranks joined by a
  200 Mbit/s shaped link: per size, the flat ring's and the hierarchical
  all-reduce's time (median over the repeats), their ratio measured, as this
  box's link classes predict it, and as the simulated clock projects it on
  H100 nodes over InfiniBand; the largest gap between the link's counted
  payload and the ranks' messages; FSDP's and HSDP's bytes over the link per
  step. Where the namespaces cannot be made it says so (``fabric``);
- queue: a tiny ring lab through the job queue (``academy.labruns.queue``) at 1, 2
  and 3 workers: alone (end to end, beside the bare ``python -m labs`` run:
  the queue's overhead) and in a burst (median queue wait and end to end);
- warm: the default ring lab (3 ranks) through the queue and one worker whose
  warm lab process (``academy.labruns.pool``) has finished its imports: Run to
  result and Run to the first progress event the page can read, beside a bare
  ``python -c "import torch"`` measured in the same run.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.common import Config, median_time, scratch_stack, unavailable

ROOT = Path(__file__).resolve().parent.parent
LAUNCH_WORLD = 4


def launch_overhead(cfg: Config) -> dict:
    from labs.launch import run_lab
    from labs.request import Request

    runs = []
    first_progress = []
    for _ in range(cfg.lab_repeats):
        t0 = time.perf_counter()
        seen: list[float] = []

        def on_event(event: dict, t0=t0, seen=seen) -> None:
            if event.get("kind") == "progress" and not seen:
                seen.append(time.perf_counter() - t0)

        request = Request.checked("ring", {"size": 1 << 20, "world_size": LAUNCH_WORLD, "backend": "gloo",
                                           "hang_timeout": 60})
        outcome = run_lab(request.run, request.params, on_event=on_event)
        if not outcome.ok:
            raise RuntimeError(f"labs ring: {outcome.kind}: {outcome.message}")
        runs.append(outcome)
        first_progress.extend(seen)
    mid = sorted(runs, key=lambda r: r.wall_s)[len(runs) // 2]
    return {"lab": "ring", "world_size": LAUNCH_WORLD, "size_bytes": 1 << 20,
            "launcher": mid.launcher, "wall_s": mid.wall_s,
            "collective_s": max(r.get("ring_s", 0.0) for r in mid.ranks),  # the timed all-reduces alone
            "overhead_s": mid.overhead_s, "overhead_fraction": mid.overhead_s / mid.wall_s,
            "first_progress_in_process_s": statistics.median(first_progress)}


def _cli_first_progress() -> tuple[float, float]:
    """(first progress event, exit) in seconds for ``python -m labs ring`` on 4 ranks."""
    with tempfile.TemporaryDirectory(prefix="dpa-bench-lab-") as tmp:
        events = Path(tmp) / "events.jsonl"
        events.touch()
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "labs", "ring", "--world-size", str(LAUNCH_WORLD),
             "--backend", "gloo", "--events", str(events), "--out", str(Path(tmp) / "out.json")],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        first = None
        while first is None:
            exited = proc.poll() is not None
            complete = events.read_text().split("\n")[:-1]  # a line still being written waits
            if any(json.loads(line).get("kind") == "progress" for line in complete if line):
                first = time.perf_counter() - t0
            elif exited:
                break
            else:
                time.sleep(0.002)
        proc.wait(timeout=300)
        done = time.perf_counter() - t0
        if proc.returncode != 0 or first is None:
            raise RuntimeError(f"python -m labs ring exited {proc.returncode} "
                               f"{'before any progress event' if first is None else ''}")
    return first, done


def first_event(cfg: Config) -> dict:
    cli = [_cli_first_progress() for _ in range(cfg.lab_repeats)]
    import_torch = median_time(
        lambda: subprocess.run([sys.executable, "-c", "import torch"], check=True),
        cfg.lab_repeats)
    return {"first_progress_cli_s": statistics.median(c[0] for c in cli),
            "cli_total_s": statistics.median(c[1] for c in cli),
            "python_import_torch_s": import_torch}


def ddp(cfg: Config) -> dict:
    from labs.ddp.report import DdpSummary
    from labs.launch import run_lab
    from labs.request import Request

    world = max(cfg.ddp_world_sizes)
    params: dict = {"sections": ["breakdown", "scaling"],
                    "scaling_world_sizes": list(cfg.ddp_world_sizes)}
    if cfg.ddp_steps is not None:
        params["steps"] = cfg.ddp_steps
    request = Request.checked("ddp", {**params, "world_size": world, "backend": "gloo", "timeout": 1800,
                                      "hang_timeout": 300})
    outcome = run_lab(request.run, request.params)
    if not outcome.ok:
        raise RuntimeError(f"labs ddp: {outcome.kind}: {outcome.message}")
    sections = DdpSummary.model_validate(outcome.summary).sections
    scaling = {str(r.world_size): {"samples_per_s": r.samples_per_s, "step_ms": r.step_ms, "efficiency": r.efficiency}
               for r in sections.scaling.rows}
    b = sections.breakdown
    return {"world_size": world, "parameters": b.parameters, "scaling": scaling,
            "breakdown_world_size": world,
            "naive_step_ms": b.naive["total"], "ddp_step_ms": b.ddp["total"],
            "ddp_vs_naive_step_ratio": b.ddp["total"] / b.naive["total"],
            "bucketing_saved_ms": b.bucketing_saving.ms.median,
            "overlap_hidden_ms": b.overlap_hidden.ms.median, "wall_s": outcome.wall_s}


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def timeline(cfg: Config) -> dict:
    from labs.ddp.report import DdpSummary
    from labs.launch import run_lab
    from labs.request import Request

    runs, loads, walls = [], [], []
    for _ in range(cfg.timeline_runs):
        loads.append(os.getloadavg()[0])
        request = Request.checked("ddp", {"sections": ["timeline"], "world_size": 2, "backend": "gloo",
                                          "timeout": 600, "hang_timeout": 300})
        outcome = run_lab(request.run, request.params)
        if not outcome.ok:
            raise RuntimeError(f"labs ddp timeline: {outcome.kind}: {outcome.message}")
        runs.append(DdpSummary.model_validate(outcome.summary).sections.timeline)
        walls.append(outcome.wall_s)

    variants = {name: {"bucket_cap_mb": v.bucket_cap_mb, "allreduce_calls": v.allreduce_calls,
                       "overlap": _spread([r.variants[name].overlap for r in runs]),
                       "overlaps": [r.variants[name].overlap for r in runs],
                       "exposed_comm_ms": _spread([r.variants[name].exposed_comm_ms for r in runs])}
                for name, v in runs[0].variants.items()}
    out = {"world_size": 2, "runs": len(runs), "steps": runs[0].steps, "hidden": runs[0].hidden,
           "depth": runs[0].depth, "batch_per_rank": runs[0].batch_per_rank, "variants": variants,
           "fitted": sum(1 for r in runs if r.fit), "load_1min": _spread(loads), "wall_s": _spread(walls)}
    if cfg.smoke:  # a grading and torch DDP's lanes made afresh: seconds the smoke test does not need
        out["exercise"] = "skipped: smoke mode"
        return out
    try:
        out["exercise"] = exercise_overlap(cfg.timeline_runs)
    except Exception as exc:  # noqa: BLE001 - no sandbox here: the lab's figures still stand
        out["exercise"] = unavailable(exc)
    return out


def exercise_overlap(runs: int) -> dict:
    """The bucketed-overlap report's two overlaps over ``runs`` gradings of the reference on
    its traced case alone (the lanes the page draws): the learner's, from the router's
    records, and torch DDP's, made afresh each time (a cache folder per grading)."""
    from labs.exercises import load, reference
    from labs.exercises.grader import grade

    exercise = load("bucketed-overlap")
    mine, ddp, loads = [], [], []
    for _ in range(runs):
        loads.append(os.getloadavg()[0])
        with tempfile.TemporaryDirectory() as cache:
            before = os.environ.get("EXERCISE_DDP_CACHE")
            os.environ["EXERCISE_DDP_CACHE"] = cache
            try:
                report = grade(exercise.ID, reference(exercise.ID), case_ids=[exercise.TRACE_CASE])
            finally:
                if before is None:
                    os.environ.pop("EXERCISE_DDP_CACHE", None)
                else:
                    os.environ["EXERCISE_DDP_CACHE"] = before
        trace = report.trace or {}
        if report.status != "passed" or not trace.get("ddp"):
            raise RuntimeError(f"bucketed-overlap: {report.status}, {report.error}, "
                               f"torch DDP's lanes {'made' if trace.get('ddp') else 'missing'}")
        mine.append(trace["learner"]["overlap"])
        ddp.append(trace["ddp"]["overlap"])
    return {"runs": runs, "case": exercise.TRACE_CASE, **exercise.TRACE_MODEL, "learner": _spread(mine),
            "learner_overlaps": mine, "ddp": _spread(ddp), "ddp_overlaps": ddp, "load_1min": _spread(loads)}


def sharding(cfg: Config) -> dict:
    """The sharding lab at its default size: wall time, and how far each strategy's
    measured ledger lies from the formula (the largest relative gap over ranks and parts)."""
    from labs.launch import run_lab
    from labs.reports import ShardingSummary
    from labs.request import Request

    world = cfg.sharding_world_size
    request = Request.checked("sharding", {"steps": cfg.sharding_steps, "world_size": world, "backend": "gloo",
                                           "timeout": 1800, "hang_timeout": 300})
    outcome = run_lab(request.run, request.params)
    if not outcome.ok:
        raise RuntimeError(f"labs sharding: {outcome.kind}: {outcome.message}")
    s = ShardingSummary.model_validate(outcome.summary)
    held = {name: sum(st.ranks[0].measured.values()) for name, st in s.strategies.items()}
    return {"world_size": world, "parameters": s.model.parameters, "wall_s": outcome.wall_s,
            "work_s": outcome.work_s,
            "ledger_error": s.ledger_error,
            "rank0_bytes": held,
            "max_abs_diff_vs_ddp": max(st.max_abs_diff_vs_ddp for st in s.strategies.values()),
            "zero3_vs_ddp_wire": (s.strategies["zero3"].ranks[0].wire_bytes_per_step
                                  / s.strategies["ddp"].ranks[0].wire_bytes_per_step)}


def compression(cfg: Config) -> dict:
    """The compression lab (2 ranks, every strategy) at its command line's defaults, or
    fewer steps and seeds in quick and smoke mode: wall time, and per strategy the bytes
    each rank handed over per step, what that saves against fp32, the largest gap between
    a measured byte count and its formula, the final loss's gap to fp32 and the median step."""
    from labs.launch import run_lab
    from labs.request import Request

    params = {k: v for k, v in (("steps", cfg.compression_steps), ("seeds", cfg.compression_seeds)) if v}
    request = Request.checked("compression", {**params, "world_size": 2, "backend": "gloo", "timeout": 1800,
                                              "hang_timeout": 300})
    outcome = run_lab(request.run, request.params)
    if not outcome.ok:
        raise RuntimeError(f"labs compression: {outcome.kind}: {outcome.message}")
    s = outcome.summary
    st = s["strategies"]
    dense = st["fp32"]["bytes_per_step"]
    return {"world_size": s["world_size"], "steps": s["steps"], "seeds": len(s["seeds"]),
            "wall_s": outcome.wall_s, "work_s": outcome.work_s,
            "bytes_per_step": {n: v["bytes_per_step"] for n, v in st.items()},
            "saved": {n: 1 - v["bytes_per_step"] / dense for n, v in st.items() if n != "fp32"},
            "max_formula_error": max(v["formula_error"] for v in st.values()),
            "gap": {n: v["gap"]["mean"] for n, v in st.items() if v["gap"]},
            "step_ms": {n: v["step_time"]["median_ms"] for n, v in st.items()}}


def topology(cfg: Config) -> dict:
    """The topology lab (``labs.topology``): flat ring against hierarchical on a shaped link."""
    from labs.launch import run_lab
    from labs.request import Request

    request = Request.checked("topology", {"sizes": list(cfg.topology_sizes), "repeats": cfg.topology_repeats,
                                           "world_size": 4, "backend": "gloo", "timeout": 1800, "hang_timeout": 300})
    outcome = run_lab(request.run, request.params)
    if not outcome.ok:
        raise RuntimeError(f"labs topology: {outcome.kind}: {outcome.message}")
    s = outcome.summary
    rows = {(r["algo"], r["size"]): r for r in s["rows"]}
    sizes = []
    for size in cfg.topology_sizes:
        flat, hier = rows[("flat", size)], rows[("hierarchical", size)]
        sizes.append({"size": size, "flat_ms": flat["time"]["median"] * 1e3,
                      "flat_ms_range": [flat["time"]["min"] * 1e3, flat["time"]["max"] * 1e3],
                      "hierarchical_ms": hier["time"]["median"] * 1e3,
                      "hierarchical_ms_range": [hier["time"]["min"] * 1e3, hier["time"]["max"] * 1e3],
                      "ratio_measured": flat["time"]["median"] / hier["time"]["median"],
                      "ratio_predicted": (flat["predicted_s"] / hier["predicted_s"]
                                          if flat["predicted_s"] and hier["predicted_s"] else None),
                      "ratio_bytes": flat["formula_bytes"] / hier["formula_bytes"] if hier["formula_bytes"] else None,
                      "ratio_h100_ib": flat["projected"]["h100_ib"] / hier["projected"]["h100_ib"]})
    meshes = {m["name"]: m for m in s["sharding"]}
    return {"fabric": s["fabric"], "unavailable": s["unavailable"], "rate_mbit": s["rate_mbit"],
            "repeats": s["repeats"], "wall_s": outcome.wall_s, "sizes": sizes,
            "bytes_error": max((r["bytes_error"] for r in s["rows"] if r["bytes_error"] is not None), default=None),
            "link_mb_per_step": {name: (max(m["payload_bytes"]) / 1e6 if m["payload_bytes"] else None)
                                 for name, m in meshes.items()}}


QUEUE_LAB = {"world_size": 2, "size": 1024}


def _bare_lab() -> None:
    subprocess.run([sys.executable, "-m", "labs", "ring", "--world-size", "2", "--size", "1024"],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_for(check, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _below(parents: list[int]) -> dict[int, tuple[int, bytes]]:
    """CPU ticks and command line of each process below ``parents`` (a sandbox's too: the
    host sees its pids)."""
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
    children: dict[int, list[int]] = {}
    for pid, fields in stats.items():
        children.setdefault(int(fields[1]), []).append(pid)
    found, todo = {}, list(parents)
    while todo:
        for child in children.get(todo.pop(), []):
            try:
                command = Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:
                command = b""
            found[child] = (int(stats[child][11]) + int(stats[child][12]), command)
            todo.append(child)
    return found


def settle(parents: list[int], timeout: float = 300) -> None:
    """Wait until no process below the workers in ``parents`` used CPU for 0.3 s (their warm
    processes done importing, a warm grader's sandbox up, asleep on its stdin)."""
    def still() -> bool:
        before = {pid: ticks for pid, (ticks, _) in _below(parents).items()}
        time.sleep(0.3)
        return before == {pid: ticks for pid, (ticks, _) in _below(parents).items()}

    _wait_for(still, "the workers' processes to settle", timeout)


def _warm_ready(parents: list[int], timeout: float = 300) -> None:
    """Wait until the workers in ``parents`` have a warm lab process each, done importing."""
    _wait_for(lambda: sum(b"labs.warm" in command for _, command in _below(parents).values()) >= len(parents),
              "the warm lab processes", timeout)
    settle(parents, timeout)


WARM_LAB = {"world_size": 3}  # the Labs page's default ring lab


def warm_worker(cfg: Config, base: Path) -> dict:
    """Run to result and to first progress event of the default ring lab on a warm worker
    (``cfg.lab_repeats`` runs, one at a time, each once the warm process is ready), beside
    a bare ``python -c "import torch"`` timed in the same run."""
    from academy.db import session_scope
    from academy.labruns import queue as labqueue
    from academy.models import TERMINAL, LabRun

    import_torch = median_time(
        lambda: subprocess.run([sys.executable, "-c", "import torch"], check=True), cfg.lab_repeats)
    results, firsts = [], []
    folder = base / "warm"
    # No warm grader (LAB_WARM_EXERCISES=0): no sandbox starting beside the labs being timed.
    with scratch_stack(folder, LAB_MAX_QUEUED="1000", LAB_MAX_PER_LEARNER="1000", LAB_GUEST_SHARE="1",
                       LAB_WARM_POOL="1", LAB_WARM_EXERCISES="0"), workers(folder, 1) as pids:
        for _ in range(max(1, cfg.lab_repeats)):
            _warm_ready(pids)
            t0 = time.perf_counter()
            run_id = labqueue.submit(lab="ring", params=WARM_LAB, learner_id=None, machine={})
            first = None
            while True:
                with session_scope() as s:
                    row = s.get(LabRun, run_id)
                if first is None and row.progress:
                    first = time.perf_counter() - t0
                if row.status in TERMINAL:
                    break
                time.sleep(0.01)
            if row.status != "done":
                raise RuntimeError(f"warm worker: the ring lab ended {row.status}: {row.error}")
            results.append((row.finished_at - row.created_at).total_seconds())
            firsts.append(first if first is not None else results[-1])
    return {"lab": "ring", **WARM_LAB, "runs": len(results), "run_to_result_s": statistics.median(results),
            "run_to_result_max_s": max(results), "first_progress_p95_s": _p95(firsts),
            "python_import_torch_s": import_torch}


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


@contextmanager
def workers(folder: Path, n: int) -> Iterator[list[int]]:
    """``n`` real workers (``python -m academy.worker --concurrency 1``) on the current settings.

    The body (given the workers' process ids) runs once all ``n`` have registered, so no figure includes a
    worker's start-up; the workers get SIGTERM afterwards, as ``make run``
    stops its worker, and their logs stay in ``folder``.
    """
    from sqlmodel import func, select

    from academy.db import session_scope
    from academy.models import LabWorker

    folder.mkdir(parents=True, exist_ok=True)
    logs = [open(folder / f"worker-{i}.log", "w") for i in range(n)]  # noqa: SIM115
    procs = [subprocess.Popen([sys.executable, "-m", "academy.worker", "--concurrency", "1"],
                              cwd=ROOT, env=dict(os.environ), start_new_session=True,
                              stdout=log, stderr=subprocess.STDOUT)
             for log in logs]
    try:
        def up() -> bool:
            with session_scope() as s:
                return s.exec(select(func.count()).select_from(LabWorker)).one() == n

        _wait_for(up, f"{n} workers")
        yield [proc.pid for proc in procs]
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=60)
        for log in logs:
            log.close()


def queue(cfg: Config, base: Path) -> dict:
    """What the job queue adds: a tiny ring lab through ``labqueue.submit`` and 1, 2, 3 workers
    (``cfg.queue_workers``).

    At each worker count: one lab alone on an idle queue (its end-to-end time
    beside the bare ``python -m labs`` run is the queue's overhead), then a
    burst of ``cfg.queue_labs`` labs at once (median wait in the queue and
    median end-to-end time, both from the run rows' timestamps). Each count
    gets its own embedded stack (SQLite database and queue) and its own workers.
    """
    from sqlmodel import func, select

    from academy.db import session_scope
    from academy.labruns import queue as labqueue
    from academy.models import TERMINAL, LabRun

    bare = median_time(_bare_lab, cfg.lab_repeats)
    per_workers: dict[str, dict] = {}

    def ended(ids: list[int]) -> bool:
        with session_scope() as s:
            return s.exec(select(func.count()).select_from(LabRun).where(
                LabRun.id.in_(ids), LabRun.status.in_(TERMINAL))).one() == len(ids)

    def rows(ids: list[int]) -> list[LabRun]:
        with session_scope() as s:
            return list(s.exec(select(LabRun).where(LabRun.id.in_(ids))))

    for n in cfg.queue_workers:
        folder = base / f"queue-{n}"
        with scratch_stack(folder, LAB_MAX_QUEUED="1000", LAB_MAX_PER_LEARNER="1000",
                           LAB_GUEST_SHARE="1", LAB_WARM_EXERCISES="0"), workers(folder, n):
            submit = lambda: labqueue.submit(lab="ring", params=QUEUE_LAB,  # noqa: E731
                                             learner_id=None, machine={})
            alone = [submit()]
            _wait_for(lambda: ended(alone), "the lone lab")  # noqa: B023
            burst = [submit() for _ in range(cfg.queue_labs)]
            _wait_for(lambda: ended(burst), "the burst")  # noqa: B023
            one = rows(alone)[0]
            done = [r for r in rows(burst) if r.status == "done"]
        if one.status != "done" or len(done) != len(burst):
            raise RuntimeError(f"{n} workers: a lab failed")
        per_workers[str(n)] = {
            "single_end_to_end_s": (one.finished_at - one.created_at).total_seconds(),
            "single_queue_wait_s": (one.started_at - one.created_at).total_seconds(),
            "burst_queue_wait_s": statistics.median(
                (r.started_at - r.created_at).total_seconds() for r in done),
            "burst_end_to_end_s": statistics.median(
                (r.finished_at - r.created_at).total_seconds() for r in done),
            "burst_total_s": (max(r.finished_at for r in done)
                              - min(r.created_at for r in done)).total_seconds(),
        }
    return {"lab": "ring", **QUEUE_LAB, "burst": cfg.queue_labs, "bare_cli_s": bare,
            "workers": per_workers}
