"""The worker's warm lab process: a CPU lab run starts without paying PyTorch's import.

The warm process is ``python -m labs.warm`` (PyTorch and every lab imported
once): for each run ``take`` hands it the run's ``python -m labs ...`` command,
and it forks a child that is that command, in a session of its own, with its
output in the run's file; the run's ranks fork from that child. Every run is a
fresh fork of the same untouched process, so nothing crosses from one run to
the next, and no import is paid per run. ``take`` returns a :class:`WarmRun`,
which answers what the worker asks of a ``subprocess.Popen`` (``pid``,
``poll``, ``wait``, ``returncode``); the run dies with the warm process, and
the warm process with the worker.

With none ready (the setting at 0, the process still importing, dead, or a
run whose environment differs from the one the pool was started with) ``take``
returns None and the run starts as a fresh process, as without a pool; a dead
one is replaced by ``refill``, which the worker calls after each run, so an
import never shares the CPU with a run's timings. Size: the ``lab_warm_pool``
setting (each process serves any number of runs; more than one is a spare),
fewer when memory is short.

Exercise runs have a pool of their own, :class:`GraderPool`: pre-started
sandboxes that can grade any exercise, each used for exactly one submission
and then discarded.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("academy.labruns.pool")
PROCESS_MB = 400  # a warm process's resident memory with PyTorch imported, rounded up
REPLY_S = 1.0  # a fork takes milliseconds: a warm process silent this long (past the wait) is taken for stuck
IMPORT_S = 120.0  # a warm process not ready this long after its start is taken for stuck and replaced
SIGKILL_CODE = -9  # PR_SET_PDEATHSIG's signal: how a run ends when its warm process dies


def _free_mb() -> int:
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return int(info["MemAvailable"].split()[0]) // 1024
    except (OSError, KeyError, ValueError):
        return 0


class WarmRun:
    """One run forked by a warm process, seen as the worker sees a ``subprocess.Popen``:
    the exit status comes from the warm process, which is its parent."""

    def __init__(self, pid: int) -> None:
        self.pid, self.returncode = pid, None
        self._ended = threading.Event()
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except (OSError, AttributeError):  # gone already (its exit is on its way), or no pidfd
            self._pidfd = None

    def _end(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
        self._ended.set()
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            self._pidfd = None

    def _orphaned(self) -> None:
        """Its warm process died without saying how it ended: it was SIGKILLed with it
        (``PR_SET_PDEATHSIG``); wait, bounded, until it is gone."""
        if self._pidfd is not None:
            with contextlib.suppress(OSError, ValueError):
                select.select([self._pidfd], [], [], 10.0)
        self._end(SIGKILL_CODE)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(["python", "-m", "labs.warm"], timeout)
        return self.returncode


class _Warm:
    """One ``python -m labs.warm`` and the thread that reads what it says."""

    ARGS = ("-m", "labs.warm")  # after the interpreter (a test gives a process that never gets ready)

    def __init__(self, env: dict[str, str], cwd: Path, preexec: Callable[[], None] | None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, *self.ARGS], cwd=cwd, env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True, preexec_fn=preexec)
        self.ready, self.started = threading.Event(), time.monotonic()
        self.replies: queue.Queue[dict] = queue.Queue()
        self.runs: dict[int, WarmRun] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._read, name=f"labs.warm-{self.proc.pid}", daemon=True).start()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                said = json.loads(line)
            except ValueError:
                continue
            if "ready" in said:
                log.info("warm lab process %s ready", self.proc.pid)
                self.ready.set()
            elif "pid" in said:  # registered here, before its exit can be read
                with self.lock:
                    run = self.runs[said["pid"]] = WarmRun(said["pid"])
                self.replies.put({"run": run})
            elif "exit" in said:
                with self.lock:
                    run = self.runs.pop(said["exit"], None)
                if run is not None:
                    run._end(said["code"])
            else:
                self.replies.put(said)
        self.proc.wait()  # its stdout closed: it is gone, and the runs it forked with it
        self.replies.put({"error": "the warm lab process ended"})
        with self.lock:
            orphans, self.runs = list(self.runs.values()), {}
        for run in orphans:
            run._orphaned()

    def fork(self, argv: list[str], out: Path, deadline: float) -> WarmRun | None:
        """The run forked for ``argv``, waiting for this process until ``deadline`` (monotonic)
        at most, and then for its answer at most `REPLY_S` more; None if it cannot (then it
        is killed: a job it might still fork would die with it)."""
        if not self.ready.wait(max(0.0, deadline - time.monotonic())) or not self.alive():
            return None  # still importing: the run starts fresh and this one stays for the next
        try:
            self.proc.stdin.write(json.dumps({"argv": argv, "out": str(out)}).encode() + b"\n")
            self.proc.stdin.flush()
            said = self.replies.get(timeout=max(0.0, deadline - time.monotonic()) + REPLY_S)
        except (OSError, queue.Empty):
            said = {"error": "no answer"}
        if "run" not in said:
            log.warning("warm lab process %s: %s", self.proc.pid, said.get("error"))
            self.proc.kill()  # no wait here: its reader thread reaps it
            return None
        return said["run"]

    def stuck(self) -> bool:
        """Still importing long after its start (a hung import): replaced by the next refill."""
        return not self.ready.is_set() and time.monotonic() - self.started > IMPORT_S

    def stop(self) -> None:
        """Close its stdin (it exits, and its runs with it); kill it if it does not at once."""
        _stop(self.proc)


class WarmPool:
    """Up to ``size`` warm lab processes started with ``env`` in ``cwd``. A run waits at
    most ``ready_wait_s`` for one still importing (the run's heartbeat waits with it)."""

    def __init__(self, size: int, env: dict[str, str], cwd: Path,
                 preexec: Callable[[], None] | None = None, *, ready_wait_s: float = 2.0) -> None:
        self.size, self.env, self.cwd, self.preexec = size, dict(env), cwd, preexec
        self.ready_wait_s = ready_wait_s
        self.ready: list[_Warm] = []
        self.lock = threading.Lock()

    def refill(self) -> None:
        """Start warm processes until ``size`` are up (or memory for another is short);
        one stuck importing is replaced."""
        with self.lock:
            for warm in self.ready:
                if warm.alive() and warm.stuck():
                    log.warning("warm lab process %s not ready after %.0f s: replaced", warm.proc.pid, IMPORT_S)
                    warm.proc.kill()
            self.ready = [w for w in self.ready if w.alive() and not w.stuck()]
            while len(self.ready) < self.size and _free_mb() > 2 * PROCESS_MB:
                try:
                    self.ready.append(_Warm(self.env, self.cwd, self.preexec))
                except OSError as err:
                    log.warning("no warm lab process: %s", err)
                    return

    def take(self, argv: list[str], env: dict[str, str], out: Path) -> WarmRun | None:
        """The run of ``argv`` (a ``python -m labs`` command) forked by a warm process, its
        output to ``out``; None when none is ready or the run's environment is not the pool's."""
        if argv[1:3] != ["-m", "labs"] or env != self.env:
            return None
        deadline = time.monotonic() + self.ready_wait_s  # one wait for the whole pool, not one each
        with self.lock:
            for warm in list(self.ready):
                if not warm.alive():  # killed, out of memory: refill replaces it after this run
                    self.ready.remove(warm)
                    continue
                run = warm.fork(argv, out, deadline)
                if run is not None:
                    return run
                if warm.proc.returncode is not None or warm.ready.is_set():  # killed by fork
                    self.ready.remove(warm)
        return None

    def close(self) -> None:
        """Stop the warm processes (and any run still going in them)."""
        with self.lock:
            for warm in self.ready:
                warm.stop()
            self.ready = []


GRADER_MB = 400  # a warm grader and its sandbox (harness, PyTorch and torch._dynamo, 22 ranks: 3 sets of 2, 2 of 3, one of 4 and of 6): 302 MB PSS, rounded up
GRADER_WAIT_S = 600  # a warm grader with no job this long exits; the next refill replaces it
TAKE_MARGIN_S = 30.0  # a grader this close to its --max-wait gets no job
IDLE_REFILL_S = 60.0  # an idle worker starts a grader at most this often (one that keeps dying costs little)


class GraderPool:
    """Warm graders for exercise runs: ``python -m labs.exercises warm``, each with a
    sandbox started up to the point where the exercise is chosen (the harness, PyTorch
    and every exercise's preloads imported, ranks forked for every world size any
    exercise uses, as many sets of each as save-and-resume's restarts need), waiting
    for one submission of any exercise.

    ``take`` hands a run's ``grade`` command to a waiting grader and returns that
    process, which grades it as the command alone would (the seed drawn only then,
    the same report and exit code) and exits: each grader serves exactly one
    submission, so nothing crosses from one learner to the next. ``refill``, which
    the worker calls once each run is recorded (so a start-up does not share the
    CPU with that grading or the storing of its report; with several runs at once
    it may with another's) and while idle, starts them up to ``size`` (fewer when
    memory is short) and replaces those that exited (killed, or no job within
    `GRADER_WAIT_S`). None waiting, a dead one, or a run whose environment is not
    the pool's: ``take`` returns None and the run is graded by a fresh ``grade``
    process, as without a pool.
    """

    def __init__(self, size: int, env: dict[str, str], cwd: Path,
                 preexec: Callable[[], None] | None = None, *, max_wait_s: float = GRADER_WAIT_S) -> None:
        self.size, self.env, self.cwd, self.preexec = size, dict(env), cwd, preexec
        self.max_wait_s = max_wait_s
        self.ready: list[tuple[subprocess.Popen, float]] = []  # (grader, started)
        self.lock = threading.Lock()
        self.started_at = -IDLE_REFILL_S

    def refill(self, *, idle: bool = False) -> None:
        """Start graders up to ``size``; ``idle`` (the worker's own loop, no run going): only
        if none was started in the last `IDLE_REFILL_S`."""
        with self.lock:
            if idle and time.monotonic() - self.started_at < IDLE_REFILL_S:
                return
            self.ready = [(proc, started) for proc, started in self.ready if proc.poll() is None]
            while len(self.ready) < self.size and _free_mb() > 2 * GRADER_MB:
                try:
                    self.ready.append((subprocess.Popen(
                        [sys.executable, "-m", "labs.exercises", "warm", "--max-wait", str(self.max_wait_s)],
                        cwd=self.cwd, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                        start_new_session=True, preexec_fn=self.preexec), time.monotonic()))
                except OSError as err:
                    log.warning("no warm grader: %s", err)
                    return
                self.started_at = time.monotonic()

    def take(self, argv: list[str], env: dict[str, str], out: Path) -> subprocess.Popen | None:
        """The warm grader now grading ``argv`` (a ``python -m labs.exercises grade EX ...``
        command), its output to ``out``; None when none is waiting."""
        if argv[1:4] != ["-m", "labs.exercises", "grade"] or env != self.env:
            return None
        with self.lock:
            while self.ready:
                proc, started = self.ready.pop(0)
                if proc.poll() is not None:
                    continue
                if time.monotonic() - started > self.max_wait_s - TAKE_MARGIN_S:
                    # Near its own --max-wait (counted from a moment after `started`), it
                    # could end with no job just as this one arrives: the run starts fresh.
                    _stop(proc)
                    continue
                try:
                    proc.stdin.write(json.dumps({"argv": argv[3:], "output": str(out)}).encode() + b"\n")
                    proc.stdin.close()
                except OSError:  # it died while waiting (killed): the run starts fresh
                    _stop(proc)
                    continue
                log.info("warm grader %s grades this %s run", proc.pid, argv[4] if len(argv) > 4 else "?")
                return proc
        return None

    def close(self) -> None:
        """Stop the waiting graders (each takes its sandbox down)."""
        with self.lock:
            for proc, _started in self.ready:
                _stop(proc)
            self.ready = []


STOP_GRACE_S = 0.5  # a waiting warm process or grader reads the end of its stdin and exits at once


def _stop(proc: subprocess.Popen) -> None:
    """Close a warm process's or grader's stdin (it exits with no job, its runs or its
    sandbox with it); kill it if it has not exited within ``STOP_GRACE_S``: one still
    importing PyTorch reads its stdin only once that is done, seconds later, and holds
    nothing a kill could lose (what it started dies with it, ``PR_SET_PDEATHSIG`` and
    bwrap's ``--die-with-parent``)."""
    with contextlib.suppress(OSError):
        proc.stdin.close()
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def lab_env(extra: dict[str, str] | None = None) -> dict[str, Any]:
    """The environment a lab's process runs in: the worker's, the labs' limits from
    Settings (they may have come from .env), one thread per rank."""
    from academy.settings import get_settings

    return {**os.environ, **get_settings().labs.environ(), "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1", **(extra or {})}
