"""The failure lab's launcher: ``torchrun`` with elastic restarts, watched until it ends.

``labs.launch.run_lab`` (so ``python -m labs failure``, and the lab worker)
hands the checked request's two models here (the lab's ``LAUNCHER``). `launch` starts

    python -m torch.distributed.run --nnodes 1 --nproc-per-node N --max-restarts R \\
        --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:0 --rdzv-id failure-<pid> --monitor-interval 0.1 \\
        --no-python python -c RANK_PRELUDE failure <the request's argv> --run-dir DIR --events E --out O

(port 0: the rendezvous store takes a free port), reads the progress events
that rank 0 of each attempt appends to ``E``, and returns the last attempt's
result from ``O`` as a `LabResult` (``launcher`` "torchrun").

No process outlives a run: torchrun is started in our process group (a
worker's cancel, which signals the group, reaches it) and dies with us
(``PR_SET_PDEATHSIG``); its ranks, which it starts in sessions of their own,
die with it (``labs.processes.RANK_PRELUDE``). A cancel or a timeout sends
torchrun SIGTERM (it stops its ranks), then SIGKILL after `STOP_GRACE_S`.
The run folder (checkpoint, logs, result) is removed at the end; one left by a
launcher killed with SIGKILL is removed by the next launch on the machine.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from labs.context import LabError, LabResult, event, params_dict
from labs.params import Run
from labs.processes import RANK_PRELUDE
from labs.settings import Limits

POLL_S = 0.05
STOP_GRACE_S = 5.0  # after SIGTERM, how long torchrun may take to stop its ranks
PREFIX = "labs-failure-"
_PRCTL = None
with contextlib.suppress(OSError, AttributeError):
    _PRCTL = ctypes.CDLL("libc.so.6", use_errno=True).prctl  # looked up before any fork


def _die_with_us() -> None:
    """torchrun, between fork and exec: SIGKILL it when we die."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def sweep(base: Path) -> None:
    """Remove run folders whose launcher (the pid in their name) is gone."""
    for path in base.glob(f"{PREFIX}*-*"):
        try:
            os.kill(int(path.name[len(PREFIX):].split("-")[0]), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (ValueError, PermissionError):
            continue


def command(run: Run, params, *, folder: Path) -> list[str]:
    """The torchrun line of this run: its ranks are ``python -m labs`` with the request's own
    argv (``labs.request.Request.argv``), the run folder in it; torchrun gives the ranks
    their count and starts them (its parser would also take ``--start`` for its ``--start-method``)."""
    from labs.request import Request

    request = Request("failure", run, dataclasses.replace(params, run_dir=str(folder)))
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(run.world_size),
            "--max-restarts", str(params.max_restarts), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", "127.0.0.1:0", "--rdzv-id", f"failure-{os.getpid()}", "--monitor-interval", "0.1",
            "--no-python", sys.executable, "-c", RANK_PRELUDE, *request.argv(without=("world_size", "start")),
            "--events", str(folder / "events.jsonl"), "--out", str(folder / "result.json")]


class _Tail:
    """New whole lines of a file that another process appends to."""

    def __init__(self, path: Path):
        self.path, self.offset, self.rest = path, 0, b""

    def lines(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        parts = (self.rest + chunk).split(b"\n")
        self.rest = parts.pop()
        out = []
        for line in parts:
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM (torchrun stops its ranks), then SIGKILL; reaped either way."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()


def _why(log: str, params, code: int) -> str:
    """What went wrong, in a sentence, with the last lines torchrun and the ranks printed."""
    lines = [line for line in log.splitlines() if line.strip()]
    tail = " | ".join(lines[-4:])[-600:]
    if params.kills > params.max_restarts:
        return (f"torchrun gave up: the lab killed rank {params.kill_rank} {params.kills} time(s) and torchrun "
                f"restarts a job at most --max-restarts {params.max_restarts} time(s) (exit code {code}). "
                f"Last output: {tail}")
    return f"torchrun ended with exit code {code}. Last output: {tail}"


def launch(run: Run, params, *, backend: str, timeout: float, hang_timeout: float,  # noqa: ARG001
           on_event: Callable[[dict], None] | None = None,
           cancel: threading.Event | None = None) -> LabResult | LabError:
    """Run the failure lab under torchrun, as ``run`` and ``params`` (the checked request's
    models) say, on ``backend`` (resolved) within ``timeout`` s; its result, or why not.
    ``hang_timeout`` is not used: a restart takes as long as PyTorch's import, and a hung
    collective ends at the process group's timeout (``timeout``), which torchrun answers
    with a restart."""
    t0 = time.perf_counter()
    world_size = run.world_size
    emit = on_event or (lambda _e: None)

    def error(kind: str, message: str, rank: int | None = None) -> LabError:
        return LabError(kind=kind, rank=rank, message=message, lab="failure", world_size=world_size,
                        backend=backend, wall_s=time.perf_counter() - t0)

    if run.fail_rank is not None:
        return error("invalid", "the failure lab kills its rank itself: use --kill-rank and --kill-step, "
                                "not --fail-rank")
    base = Path(tempfile.gettempdir())
    sweep(base)
    folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base))
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", **Limits.from_env().environ())
    if os.path.exists("/sys/class/net/lo"):
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # local ranks talk over loopback
    argv = command(dataclasses.replace(run, backend=backend, timeout=timeout), params, folder=folder)
    output = open(folder / "torchrun.log", "w+b")  # noqa: SIM115 - closed below
    emit(event(None, 0, params.steps, "launch", "starting torchrun", kind="status", t=0.0))
    proc = None
    try:
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                preexec_fn=_die_with_us)
        events = _Tail(folder / "events.jsonl")
        while True:
            for e in events.lines():
                emit(e)
            code = proc.poll()
            if code is not None:
                break
            if cancel is not None and cancel.is_set():
                _stop(proc)
                return error("cancelled", "cancelled")
            if time.perf_counter() - t0 > timeout:
                _stop(proc)
                return error("timeout", f"the lab did not finish within {timeout:g} s")
            time.sleep(POLL_S)
        for e in events.lines():
            emit(e)
        output.seek(0)
        log = output.read().decode(errors="replace")
        result = folder / "result.json"
        if code != 0 or not result.exists():
            outcome = error("crash", _why(log, params, code), rank=params.kill_rank)
            emit(event(params.kill_rank, None, None, "error", outcome.message, kind="status",
                       t=time.perf_counter() - t0, error_kind="crash"))
            return outcome
        inner = json.loads(result.read_text())
    finally:
        if proc is not None:
            _stop(proc)
        output.close()
        shutil.rmtree(folder, ignore_errors=True)
    wall = time.perf_counter() - t0
    emit(event(None, 1, 1, "done", f"finished in {wall:.2f} s", kind="status", t=wall))
    return LabResult(lab="failure", world_size=world_size, backend=backend, params=params_dict(params),
                     summary=inner["summary"], ranks=inner["ranks"], wall_s=wall, work_s=inner["work_s"],
                     overhead_s=max(0.0, wall - inner["work_s"]), pids=[proc.pid], launcher="torchrun",
                     machine=inner["machine"], warnings=inner.get("warnings", []))
