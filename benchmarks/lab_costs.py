"""What running a lab costs beyond its collectives, and how DDP scales.

- launch: ``labs.launch.run_lab("ring")`` on 4 ranks; wall time beside the
  ring all-reduce's own time (``LabResult.work_s``), the rest is overhead
  (start-up, rendezvous, the check, shutdown);
- first event: from the request to the first progress event, in-process
  (``run_lab(on_event=...)``) and the way the web app runs a lab
  (``python -m labs ring --events FILE`` in a new process), beside the bare
  ``python -c "import torch"`` every new process pays;
- ddp: ``labs.ddp``'s ``scaling`` section (weak scaling on 1, 2, 4 ranks)
  and its ``breakdown`` (naive all-reduce after backward vs DDP's
  overlapped buckets: the step time ratio).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import Config, median_time

ROOT = Path(__file__).resolve().parent.parent
LAUNCH_WORLD = 4


def launch_overhead(cfg: Config) -> dict:
    from labs.launch import run_lab

    runs = []
    first_progress = []
    for _ in range(cfg.lab_repeats):
        t0 = time.perf_counter()
        seen: list[float] = []

        def on_event(event: dict, t0=t0, seen=seen) -> None:
            if event.get("kind") == "progress" and not seen:
                seen.append(time.perf_counter() - t0)

        outcome = run_lab("ring", {"size": 1 << 20}, world_size=LAUNCH_WORLD, backend="gloo",
                          on_event=on_event, hang_timeout=60)
        if not outcome.ok:
            raise RuntimeError(f"labs ring: {outcome.kind}: {outcome.message}")
        runs.append(outcome)
        first_progress.extend(seen)
    mid = sorted(runs, key=lambda r: r.wall_s)[len(runs) // 2]
    return {"lab": "ring", "world_size": LAUNCH_WORLD, "size_bytes": 1 << 20,
            "launcher": mid.launcher, "wall_s": mid.wall_s, "collective_s": mid.work_s,
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
    from labs.launch import run_lab

    world = max(cfg.ddp_world_sizes)
    params: dict = {"sections": ["breakdown", "scaling"],
                    "scaling_world_sizes": list(cfg.ddp_world_sizes)}
    if cfg.ddp_steps is not None:
        params["steps"] = cfg.ddp_steps
    outcome = run_lab("ddp", params, world_size=world, backend="gloo", timeout=1800,
                      hang_timeout=300)
    if not outcome.ok:
        raise RuntimeError(f"labs ddp: {outcome.kind}: {outcome.message}")
    sections = outcome.summary["sections"]
    scaling = {str(r["world_size"]): {"samples_per_s": r["samples_per_s"],
                                      "step_ms": r["step_ms"], "efficiency": r["efficiency"]}
               for r in sections["scaling"]["rows"]}
    b = sections["breakdown"]
    return {"world_size": world, "parameters": b["parameters"], "scaling": scaling,
            "breakdown_world_size": world,
            "naive_step_ms": b["naive"]["total"], "ddp_step_ms": b["ddp"]["total"],
            "overlap_vs_naive_step_ratio": b["ddp"]["total"] / b["naive"]["total"],
            "comm_hidden_ms": b["comm_hidden_by_overlap"], "wall_s": outcome.wall_s}
