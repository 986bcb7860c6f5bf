"""A lab worker: takes lab runs from the job queue and runs them, here or on another machine.

    python -m academy.worker                          # CPU labs, lab_concurrency at a time
                                                   # (and NCCL labs, one at a time, if there are GPUs)
    python -m academy.worker --concurrency 4          # four CPU labs at once
    python -m academy.worker --queues gpu --devices 0,1 --devices 2,3   # two NCCL labs, 2 GPUs each
    python -m academy.worker --queues cpu,gpu --devices 0

The worker reads the same settings as the app (DATABASE_URL, LAB_QUEUE_URL;
see docs/operators/several-machines.md): it must reach the database and the
queue, nothing else. Each run is ``python -m labs ...`` in its own process
group under this process, so the web servers never start a rank. SIGTERM or
Ctrl-C stops the worker: labs still going are stopped and recorded as failed
(kind ``worker_stopped``). A worker that dies without that chance takes its
labs with it, and the reaper fails its runs once their heartbeat is stale.

A node of a multi-node run (LAB_MAX_NODES > 1) is a job like any other: the
worker that takes it starts that node's torchrun, whose rendezvous at
LAB_RENDEZVOUS_ENDPOINT meets the other nodes' (see academy/labruns/job.py).
"""

from __future__ import annotations

import argparse
import glob
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
from pathlib import Path


def _device_sets(values: list[str]) -> list[tuple[int, ...]]:
    """``["0,1", "2,3"]`` or ``["0,1;2,3"]`` -> [(0, 1), (2, 3)]."""
    sets = []
    for value in values:
        for part in value.split(";"):
            if part.strip():
                sets.append(tuple(int(d) for d in part.split(",")))
    return sets


def _gpu_count() -> int:
    """GPUs CUDA sees; without an NVIDIA device node, 0 without importing torch (seconds)."""
    if not glob.glob("/dev/nvidia[0-9]*"):
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _parser() -> argparse.ArgumentParser:
    from academy.labruns.queue import QUEUES

    parser = argparse.ArgumentParser(prog="python -m academy.worker", description=__doc__.split("\n")[0])
    parser.add_argument("--queues",
                        help=f"comma-separated queues to serve, of {', '.join(QUEUES)} (default: "
                             "cpu, and gpu too when this machine has a GPU)")
    parser.add_argument("--concurrency", type=int, default=0,
                        help="CPU labs at once (default: the LAB_MAX_CONCURRENT setting, "
                             "or one per two cores)")
    parser.add_argument("--devices", action="append", default=[], metavar="IDS",
                        help="a GPU device set, e.g. 0,1; repeat for more sets (default: all "
                             "visible GPUs as one set). One GPU lab runs per set at a time.")
    parser.add_argument("--name", help="worker name in the database (default host:pid)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from huey.consumer import Consumer

    from academy import exercises
    from academy.db import get_engine
    from academy.labruns import job as labjob
    from academy.labruns import kinds
    from academy.labruns import queue as labqueue
    from academy.labruns.pool import GraderPool, WarmPool, lab_env
    from academy.settings import ROOT, get_settings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.queues is None:  # one machine with a GPU runs its NCCL labs too, with no flags
        args.queues = "cpu,gpu" if args.devices or _gpu_count() else "cpu"
    queues = [q.strip() for q in args.queues.split(",") if q.strip()]
    unknown = set(queues) - set(labqueue.QUEUES)
    if unknown or not queues:
        print(f"unknown queue(s): {', '.join(sorted(unknown)) or '(none given)'}", file=sys.stderr)
        return 2
    devices = None
    if "gpu" in queues:
        sets = _device_sets(args.devices)
        if not sets:
            count = _gpu_count()
            sets = [tuple(range(count))] if count else []
        if not sets:
            print("the gpu queue needs GPUs: none visible and no --devices given", file=sys.stderr)
            return 2
        devices = labjob.DevicePool(sets)
    get_engine()  # migrate before the first job touches the tables

    base = Path(tempfile.gettempdir()) / "dpa-labs"
    base.mkdir(parents=True, exist_ok=True)
    labjob.tidy_workroots(base)
    state = labjob.WorkerState(name=args.name or labjob.worker_name(),
                                 workroot=base / f"{socket.gethostname()}-{os.getpid()}",
                                 devices=devices)
    state.workroot.mkdir()
    # Every lab's module (its parameters; no PyTorch: that is the ranks' code) loads
    # here, once, before the first claim: a claimed run's command is then built at
    # once, so its first heartbeat never waits on an import.
    kinds.load_labs()
    if "cpu" in queues and get_settings().lab_warm_pool:
        # A warm lab process (academy.labruns.pool): a CPU lab run forks from it, PyTorch imported.
        # A run waits for it (importing, then its answer) a quarter of the time the reaper
        # allows a silent heartbeat, and one second more at most.
        state.pool = WarmPool(get_settings().lab_warm_pool, lab_env(), ROOT, labjob._die_with_worker,
                              ready_wait_s=get_settings().lab_dead_after_s / 4)
        state.pool.refill()
    if "cpu" in queues and get_settings().lab_warm_exercises:
        # Warm graders: an exercise run is graded in a sandbox started ahead, one per submission.
        state.graders = GraderPool(get_settings().lab_warm_exercises,
                                   lab_env(exercises.grading_env()), ROOT,
                                   labjob._die_with_worker)
        state.graders.refill()
    labjob.set_worker(state)
    cpu_slots = args.concurrency or get_settings().lab_concurrency
    slots = {"cpu": cpu_slots, "gpu": len(devices.sets) if devices else 0}
    consumers = [
        # periodic=False: no scheduled tasks; max_delay: an idle SQLite queue is polled
        # ten times a second (a read of one row; Redis blocks on the list instead), so a
        # run is claimed within 0.1 s of its Run.
        Consumer(labqueue.get_huey(q), workers=slots[q], worker_type="thread", periodic=False,
                 max_delay=labjob.CLAIM_POLL_S, check_worker_health=False)
        for q in queues
    ]
    for consumer in consumers:
        consumer.start()

    stop = threading.Event()

    def on_signal(_signum, _frame) -> None:
        stop.set()

    # After the consumers' start(), which set huey's own handlers: the worker stops as one.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log = logging.getLogger("academy.worker")
    log.info("worker %s serving %s (%s)", state.name, ",".join(queues),
             ", ".join(f"{q}: {slots[q]} at once" for q in queues))
    try:
        while True:
            try:
                labjob.register_worker(state, queues=queues, slots=sum(slots[q] for q in queues))
                labqueue.reap()
                labqueue.requeue_lost(queues)
                labqueue.forget_workers()
                if state.graders is not None and not state.running:  # one that waited too long
                    state.graders.refill(idle=True)
            except Exception:  # a database hiccup must not stop the worker
                log.exception("heartbeat or reap failed")
            if stop.wait(labjob.REAP_EVERY_S):
                break
    finally:
        log.info("worker %s stopping", state.name)
        for consumer in consumers:
            consumer.stop_flag.set()  # take no new job ...
        state.stopping.set()  # ... and stop the labs going (recorded as worker_stopped)
        for consumer in consumers:
            consumer.stop(graceful=True)
        for pool in (state.pool, state.graders):
            if pool is not None:
                pool.close()
        labjob.unregister_worker(state)
        shutil.rmtree(state.workroot, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
