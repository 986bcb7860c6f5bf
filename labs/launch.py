"""Run a lab on N local processes, watch them, and report what happened.

    from labs.launch import run_lab
    from labs.params import Run
    from labs.ring import lab as ring
    outcome = run_lab(Run(world_size=4), ring.Params(size=1 << 20), on_event=print)
    print(outcome.to_dict())          # a LabResult, or a LabError (outcome.ok is False)

This is the lab side of the process machinery: what a rank runs and reports,
and the supervisor that reads the reports. Starting, reaping and killing the
rank processes is ``labs.processes`` (shared with the exercise harness). What
a lab itself needs (`RankContext`, `FailSpec`, the backend choice, the shared
clock, `run_in_env` under torchrun) is in ``labs.context``; the rules that
turn the ranks' reports into "crashed", "hung" or "timed out" are the pure
functions of ``labs.verdict``.

How the launcher keeps its promises:

- Rendezvous: the launcher binds a listening socket on 127.0.0.1 port 0 and
  hands the open socket to rank 0, which serves the TCPStore on it. The OS
  picked the port and nobody else can take it, so two labs never collide.
- Start-up: when this process has a single thread and no GPU is in play the
  ranks are ``fork``-ed from it, so they inherit the imported torch and start
  in a fraction of a second; otherwise (NCCL, a threaded caller such as a
  web server) each rank is a fresh ``python`` process.
- No orphans: the ranks stay in the caller's process group (killing that
  group kills them), ask the kernel to SIGKILL them if the launcher dies
  (`labs.processes.die_with_parent`), and are SIGKILLed and reaped by the
  launcher (`labs.processes.Group.kill`) on success, failure, timeout and
  cancellation alike.
- Naming the culprit: each rank reports progress and, from a second thread, a
  heartbeat saying where its main thread is and how much CPU the process has
  used. The supervisor keeps these in one `labs.verdict.RankSnapshot` per
  rank and asks `labs.verdict.judge` whether the run is over and whose fault
  it was.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import selectors
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from labs import processes

# LabError, LabResult, FailSpec, machine_summary and resolve_backend are also
# imported from here by callers of run_lab.
from labs.context import (
    FailSpec,
    LabError,
    LabResult,
    RankContext,
    event,
    lab_of,
    load_lab,
    machine_summary,
    params_dict,
    rank_code,
    resolve_backend,
    stored_summary,
)
from labs.params import Run
from labs.settings import Limits
from labs.verdict import HEARTBEAT_S, RankSnapshot, exit_text, judge

CPU_BUSY = 0.05  # a rank using more than 5% of a core between heartbeats is working
_REPO_ROOT = str(Path(__file__).resolve().parent.parent)

# Phrases in the exceptions a rank raises when a *peer* went away; a rank that
# fails with one of these is a victim, not the cause.
_PEER_FAILURE_HINTS = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "connection refused",
    "socket closed",
    "read error",
    "timed out",
    "timeout",
    "nccl communicator was aborted",
)


# --------------------------------------------------------------------------
# The rank side


class _Channel:
    """JSON lines to the launcher over a pipe; the lock keeps lines whole."""

    def __init__(self, fd: int):
        self.fd = fd
        self.lock = threading.Lock()

    def send(self, msg: dict) -> None:
        data = (json.dumps(msg, default=str) + "\n").encode()
        with self.lock:
            view = memoryview(data)
            while view:
                n = os.write(self.fd, view)
                view = view[n:]


def _heartbeat(chan: _Channel, ctx: RankContext, main_ident: int, parent_pid: int) -> None:
    while True:
        time.sleep(HEARTBEAT_S)
        if os.getppid() != parent_pid:  # the launcher is gone (non-Linux fallback)
            os._exit(1)
        frame = sys._current_frames().get(main_ident)
        where, innermost = [], ""
        while frame is not None and len(where) < 4:
            code = frame.f_code
            if not innermost:
                innermost = code.co_filename
            where.append(f"{Path(code.co_filename).name}:{frame.f_lineno} {code.co_name}")
            frame = frame.f_back
        try:
            chan.send({"type": "hb", "step": ctx.step, "phase": ctx.phase,
                       "waiting": ctx.waiting_on_peers(innermost), "where": where,
                       "cpu": time.process_time()})
        except OSError:
            os._exit(1)


def _looks_like_peer_failure(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}".lower()
    return isinstance(exc, dist.DistNetworkError) or any(h in text for h in _PEER_FAILURE_HINTS)


def _rank_main(spec: dict) -> int:
    """Body of one rank started by `run_lab`; returns the exit code. ``spec["event_fd"]``
    is its report pipe, ``spec["listen_fd"]`` (rank 0) the store's listening socket."""
    processes.die_with_parent(spec["parent_pid"])
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked rank inherits the CLI's handlers
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    rank, world_size, backend = spec["rank"], spec["world_size"], spec["backend"]
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(spec["port"]),
                       "OMP_NUM_THREADS": "1"})
    torch.set_num_threads(1)  # N ranks share the machine's cores
    chan = _Channel(spec["event_fd"])
    fail = FailSpec(**spec["fail"]) if spec.get("fail") else None
    ctx = RankContext(rank=rank, world_size=world_size, local_rank=rank, backend=backend,
                      fail=fail, emit=chan.send)
    threading.Thread(target=_heartbeat, args=(chan, ctx, threading.get_ident(), spec["parent_pid"]),
                     daemon=True).start()
    timeout = timedelta(seconds=spec["timeout"])
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
        store = dist.TCPStore("127.0.0.1", spec["port"], world_size, rank == 0, timeout,
                              master_listen_fd=spec.get("listen_fd"))
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=timeout)
        chan.send({"type": "ready"})
        module = load_lab(spec["lab"])
        out = rank_code(spec["lab"]).run_rank(ctx, module.Params(**spec["params"]))
        chan.send({"type": "result", "data": out})
        # Leave together: rank 0 serves the store, so it must not vanish first.
        dist.barrier()
        dist.destroy_process_group()
        return 0
    except BaseException as exc:  # noqa: BLE001 - report everything, then exit non-zero
        with contextlib.suppress(OSError):
            chan.send({"type": "error", "exc": type(exc).__name__, "message": str(exc),
                       "traceback": traceback.format_exc(limit=8),
                       "peer_error": _looks_like_peer_failure(exc)})
        traceback.print_exc()
        return 1


def _forked_rank(spec: dict, env: dict[str, str], listener: socket.socket) -> int:
    """Body of a forked rank (``start="fork"``): the ranks' environment, and not the
    launcher's listener (rank 0 serves the store on a copy of its own)."""
    os.environ.clear()
    os.environ.update(env)
    listener.close()
    return _rank_main(spec)


def _spawned_rank_entry() -> None:
    """Entry point of a rank started as a fresh interpreter (``start="spawn"``)."""
    code = _rank_main(json.loads(os.environ.pop("LABS_WORKER_SPEC")))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# --------------------------------------------------------------------------
# The launcher side


@dataclass
class _Rank:
    """One rank's report pipe and its `RankSnapshot` for the verdicts (its process is
    the supervisor's `labs.processes.Group`, at the index of its rank)."""

    s: RankSnapshot
    fd: int
    buf: bytes = b""
    result: dict | None = None
    cpu: float | None = None  # process CPU seconds at the last heartbeat
    cpu_t: float = 0.0

    def describe(self, log_tail: str) -> dict:
        s = self.s
        return {"rank": s.rank, "pid": s.pid, "exit_code": s.exit_code,
                "step": s.step, "total_steps": s.total_steps, "phase": s.phase,
                "waiting_on_peers": s.waiting, "where": s.where,
                "error": (s.error or {}).get("message"), "log_tail": log_tail}


def run_lab(run: Run, params, *, on_event: Callable[[dict], None] | None = None,
            cancel: threading.Event | None = None) -> LabResult | LabError:
    """Run the lab of ``params`` (a lab's ``Params``) as ``run`` says; its result or error.

    The two models are the request as checked where it was made
    (``labs.request.Request``): this does not check them again. What only this
    machine can say is asked here: the backend (``run.backend``: NCCL needs a
    GPU per rank) and the lab's modules. ``run.world_size`` local processes;
    ``run.timeout`` bounds the whole run and ``run.hang_timeout`` is how long
    all ranks may go without progress before the run counts as hung (None: the
    `labs.settings.Limits` in force); ``run.fail_*`` injects a failure;
    ``run.start`` is "fork", "spawn" or "auto" (see the module docstring).
    ``on_event`` receives progress dicts (kind, rank, step, total_steps, phase,
    fraction, message, t, overall) as they happen; setting ``cancel`` stops
    the run.
    """
    t0 = time.perf_counter()
    lab, world_size, start, fail = lab_of(params), run.world_size, run.start, FailSpec.of(run)
    backend = run.backend

    def invalid(message: str) -> LabError:
        return LabError(kind="invalid", rank=None, message=message, lab=lab, world_size=world_size,
                        backend=backend, wall_s=time.perf_counter() - t0)

    try:
        module = load_lab(lab)
        rank_code(lab)  # imported here, before the ranks fork and inherit it
        backend = resolve_backend(run.backend, world_size)
    except (ValueError, ImportError) as exc:
        return invalid(str(exc))
    limits = Limits.from_env() if run.timeout is None or run.hang_timeout is None else None
    timeout = run.timeout if run.timeout is not None else limits.timeout_s
    hang_timeout = run.hang_timeout if run.hang_timeout is not None else limits.hang_timeout_s
    if hasattr(module, "LAUNCHER"):  # a lab that starts its ranks itself (labs.context: LAUNCHER)
        return importlib.import_module(module.LAUNCHER).launch(
            run, params, backend=backend, timeout=timeout, hang_timeout=hang_timeout, on_event=on_event,
            cancel=cancel)
    if start == "auto":
        single_threaded = threading.active_count() == 1
        start = "fork" if (backend == "gloo" and single_threaded and hasattr(os, "fork")
                           and not torch.cuda.is_available()) else "spawn"

    emit = on_event or (lambda _e: None)
    sup = _Supervisor(name=lab, world_size=world_size, backend=backend, timeout=timeout,
                      hang_timeout=hang_timeout, emit=emit, cancel=cancel, t0=t0)
    plain = params_dict(params)
    try:
        sup.start(start=start, spec={"lab": lab, "params": plain, "backend": backend,
                                     "world_size": world_size, "timeout": timeout,
                                     "fail": asdict(fail) if fail else None,
                                     "parent_pid": os.getpid()})
        outcome = sup.watch()
    finally:
        sup.kill_all()
    wall = time.perf_counter() - t0
    if isinstance(outcome, LabError):
        outcome.wall_s = wall
        emit(event(outcome.rank, None, None, "error", outcome.message, kind="status",
                   t=sup.elapsed(), error_kind=outcome.kind))
        return outcome
    ranks = [r.result for r in sup.ranks]
    work = max((float(r.get("work_s", 0.0)) for r in ranks), default=0.0)
    snaps = [r.s for r in sup.ranks]
    warnings = [f"rank {s.rank} sent its result but then ended with {exit_text(s.exit_code)}"
                for s in snaps if s.exit_code not in (0, None)]
    if fail is not None and fail.step >= max(s.total_steps for s in snaps):
        warnings.append(f"nothing injected: the lab has {max(s.total_steps for s in snaps)} "
                        f"steps, fail step {fail.step} was never reached")
    summary = stored_summary(module.summarize(params, ranks, world_size=world_size, backend=backend))
    result = LabResult(lab=lab, world_size=world_size, backend=backend, params=plain,
                       summary=summary, ranks=ranks, wall_s=wall, work_s=work,
                       overhead_s=max(0.0, wall - work), pids=sup.pids, launcher=start,
                       machine=machine_summary(), warnings=warnings)
    emit(event(None, 1, 1, "done", f"finished in {wall:.2f} s", kind="status", t=sup.elapsed()))
    return result


class _Supervisor:
    """Starts the ranks, reads their reports and decides when the run is over."""

    def __init__(self, *, name, world_size, backend, timeout, hang_timeout, emit, cancel, t0):
        self.name, self.world_size, self.backend = name, world_size, backend
        self.timeout, self.hang_timeout = timeout, hang_timeout
        self.emit, self.cancel, self.t0 = emit, cancel, t0
        self.ranks: list[_Rank] = []
        self.procs = processes.Group()  # each rank's output: a file with no name, in TMPDIR
        self.sel = selectors.DefaultSelector()

    @property
    def pids(self) -> list[int]:
        return [r.s.pid for r in self.ranks]

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    # -- starting

    def start(self, *, start: str, spec: dict) -> None:
        # The OS picks the port when we bind to 0; we keep the socket open and
        # give it to rank 0's TCPStore, so no other program can grab the port.
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        spec["port"] = listener.getsockname()[1]
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        if os.path.exists("/sys/class/net/lo"):
            env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # local ranks talk over loopback
        try:
            for rank in range(self.world_size):
                # Only the rank writes its report pipe (we see EOF when it exits); rank 0
                # also gets a copy of the listener. Both are closed here once it started.
                r_fd, w_fd = os.pipe()
                listen_fd = os.dup(listener.fileno()) if rank == 0 else None
                theirs = [w_fd] if listen_fd is None else [w_fd, listen_fd]
                rank_spec = dict(spec, rank=rank, event_fd=w_fd, listen_fd=listen_fd)
                if start == "fork":
                    self.procs.fork(lambda s=rank_spec: _forked_rank(s, env, listener),
                                    child_fds=theirs, parent_fds=[r_fd])
                else:
                    path = os.pathsep.join(filter(None, [_REPO_ROOT, env.get("PYTHONPATH")]))
                    self.procs.spawn(
                        [sys.executable, "-c", "from labs.launch import _spawned_rank_entry as m; m()"],
                        env=dict(env, LABS_WORKER_SPEC=json.dumps(rank_spec), PYTHONPATH=path),
                        cwd=_REPO_ROOT, child_fds=theirs, parent_fds=[r_fd])
                os.set_blocking(r_fd, False)
                self.ranks.append(_Rank(RankSnapshot(rank=rank, pid=self.procs.pids[rank],
                                                     last_hb=time.monotonic()), fd=r_fd))
                self.sel.register(r_fd, selectors.EVENT_READ, rank)
        finally:
            listener.close()  # rank 0 holds its own copy now
        self.emit(event(None, 0, 1, "launch", f"started {self.world_size} ranks ({start})",
                        kind="status", t=self.elapsed(), pids=self.pids,
                        world_size=self.world_size, backend=self.backend))

    # -- watching

    def watch(self) -> LabResult | LabError | None:
        """Read the ranks' reports until `judge` gives a verdict; None when every rank finished."""
        started = time.monotonic()
        while True:
            if self.cancel is not None and self.cancel.is_set():
                return self._error("cancelled", None, "the run was cancelled")
            for key, _ in self.sel.select(timeout=0.05):
                self._read(self.ranks[key.data])
            now = time.monotonic()
            for r in self.ranks:
                if r.s.alive:
                    r.s.exit_code = self.procs.exit_code(r.s.rank)
                if r.s.failed_at is None and r.s.failed:
                    r.s.failed_at = now
                    lines = self.procs.tail(r.s.rank, 300).strip().splitlines()
                    r.s.last_output = lines[-1] if lines else ""
            verdict = judge([r.s for r in self.ranks], now=now, started=started,
                            elapsed=self.elapsed(), timeout=self.timeout,
                            hang_timeout=self.hang_timeout)
            if verdict is None:
                continue
            if verdict.kind == "ok":
                for r in self.ranks:  # results are in; give them a moment to exit cleanly
                    r.s.exit_code = self.procs.exit_code(r.s.rank, wait_s=3.0)
                return None
            return self._error(verdict.kind, verdict.rank, verdict.message)

    def _read(self, r: _Rank) -> None:
        try:
            data = os.read(r.fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            r.s.eof = True
            self.sel.unregister(r.fd)
            return
        r.buf += data
        *lines, r.buf = r.buf.split(b"\n")
        for line in lines:
            if line.strip():
                self._handle(r, json.loads(line))

    def _handle(self, r: _Rank, msg: dict) -> None:
        now = time.monotonic()
        kind = msg.get("type") or msg.get("kind")
        r.s.last_hb = now
        if kind == "hb":
            # A rank that burns CPU (computing, or its gloo threads moving a
            # big message) or whose stack moves is working, not hung: it keeps
            # the run alive. A hung or blocked rank sleeps: no CPU, same stack.
            burnt = msg["cpu"] - r.cpu if r.cpu is not None else 0.0
            busy = burnt > CPU_BUSY * max(now - r.cpu_t, HEARTBEAT_S)
            if busy or (not msg["waiting"] and msg["where"] != r.s.where):
                r.s.active_t = now
            r.cpu, r.cpu_t = msg["cpu"], now
            r.s.waiting, r.s.where = msg["waiting"], msg["where"]
        elif kind == "ready":
            r.s.ready = True
            r.s.progress_t = now
            self.emit(event(r.s.rank, 0, None, "ready", "joined the process group",
                            kind="status", t=self.elapsed()))
        elif kind == "progress":
            r.s.step, r.s.total_steps, r.s.phase = msg["step"], msg["total_steps"], msg["phase"]
            r.s.fraction = msg.get("fraction") or 0.0
            r.s.progress_t = now
            overall = sum(x.s.fraction for x in self.ranks) / self.world_size
            self.emit(dict(msg, t=self.elapsed(), overall=overall))
        elif kind == "result":
            r.result = msg["data"]
            r.s.progress_t = now
            r.s.fraction = 1.0
            r.s.done = True
        elif kind == "error":
            r.s.error = msg

    def kill_all(self) -> None:
        """SIGKILL every rank still alive and reap them all: nothing outlives the run."""
        for r in self.ranks:
            with contextlib.suppress(OSError, KeyError, ValueError):
                self.sel.unregister(r.fd)
        self.sel.close()
        self.procs.kill()  # closes the report pipes too
        for r in self.ranks:
            r.s.exit_code = self.procs.exit_code(r.s.rank)

    # -- verdicts

    def _error(self, kind: str, rank: int | None, message: str) -> LabError:
        for r in self.ranks:  # read what is left before killing: last words, tracebacks
            if not r.s.eof:
                self._read(r)
        return LabError(kind=kind, rank=rank, message=message, lab=self.name,
                        world_size=self.world_size, backend=self.backend, pids=self.pids,
                        ranks=[r.describe(self.procs.tail(r.s.rank, 1500)) for r in self.ranks])
