"""Run a lab on N local processes, watch them, and report what happened.

    from labs.launch import run_lab, FailSpec
    outcome = run_lab("ring", {"size": 1 << 20}, world_size=4, on_event=print)
    print(outcome.to_dict())          # a LabResult, or a LabError (outcome.ok is False)

A lab is a module with four names (``labs.ring``, ``labs.bench``, ``labs.ddp``):

- ``Params``: a dataclass of the lab's parameters (validates itself);
- ``check(params, world_size)``: raises ValueError if the lab cannot run so;
- ``run_rank(ctx, params) -> dict``: the work of one rank (JSON-serialisable,
  with ``work_s``, the seconds of timed work); ``ctx`` is a `RankContext`;
- ``summarize(params, ranks, *, world_size, backend) -> dict`` and
  ``format_text(summary) -> str``: combine the ranks' results and print them.

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
  (``PR_SET_PDEATHSIG``), and are SIGKILLed and reaped by the launcher on
  success, failure, timeout and cancellation alike.
- Naming the culprit: each rank reports progress and, from a second thread, a
  heartbeat saying where its main thread is and how much CPU the process has
  used. A rank that exits first, or without a peer's connection error, is
  the one that crashed. When no rank reports progress, uses CPU or moves its
  stack for ``hang_timeout`` seconds, the run is hung: the ranks waiting
  inside torch.distributed (or in a region the lab marked as communication)
  are victims, and the rank that is not waiting is the one that hung. We use heartbeats rather
  than ``monitored_barrier``: a rank blocked in a ``recv`` never reaches a
  barrier, and monitored_barrier is gloo-only.
- Torchrun: ``run_in_env`` runs the same lab in a process that torchrun (or
  any launcher that sets RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT) started.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import os
import platform
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, is_dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

LABS = {"ring": "labs.ring", "bench": "labs.bench", "ddp": "labs.ddp"}
MAX_WORLD_SIZE = 16
HEARTBEAT_S = 0.5
CPU_BUSY = 0.05  # a rank using more than 5% of a core between heartbeats is working
# After the first rank fails we wait this long for the others' reports, so the
# culprit can be told apart from the ranks that merely lost their peer.
FAILURE_GRACE_S = 0.5
INJECTED_CRASH_EXIT = 13
_TORCH_DIR = os.path.dirname(torch.__file__)
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


@dataclass
class FailSpec:
    """Inject a failure: rank ``rank`` crashes or hangs when it reaches ``step``."""

    rank: int
    step: int
    mode: str = "crash"  # "crash": the process exits at once; "hang": it sleeps forever

    def __post_init__(self) -> None:
        if self.mode not in ("crash", "hang"):
            raise ValueError(f"fail mode must be 'crash' or 'hang', not {self.mode!r}")
        if self.rank < 0 or self.step < 0:
            raise ValueError("fail rank and step must be >= 0")


@dataclass
class LabResult:
    """A lab that finished on every rank."""

    lab: str
    world_size: int
    backend: str
    params: dict
    summary: dict  # the lab's combined result (see the lab's ``summarize``)
    ranks: list[dict]  # each rank's own return value
    wall_s: float  # launch to last rank reaped
    work_s: float  # the slowest rank's timed work
    overhead_s: float  # wall_s - work_s: start-up, rendezvous, checks, shutdown
    pids: list[int]
    launcher: str  # "fork", "spawn" or "torchrun"
    machine: dict
    warnings: list[str] = field(default_factory=list)
    ok: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class LabError:
    """A lab that did not finish: what went wrong, and which rank it was."""

    kind: str  # "crash" | "hang" | "timeout" | "invalid" | "cancelled"
    rank: int | None  # the rank held responsible, when one can be named
    message: str
    lab: str
    world_size: int
    backend: str
    wall_s: float = 0.0
    pids: list[int] = field(default_factory=list)
    ranks: list[dict] = field(default_factory=list)  # per rank: exit code, step, where, log tail
    ok: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def machine_summary() -> dict:
    """What the labs run on: CPUs, torch, backends and GPUs."""
    gpus = []
    if torch.cuda.is_available():
        gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "gloo_available": dist.is_gloo_available(),
        "nccl_available": dist.is_nccl_available(),
        "default_backend": "nccl" if gpus and dist.is_nccl_available() else "gloo",
        "gpus": gpus,
    }


def resolve_backend(backend: str, world_size: int) -> str:
    """Pick the process-group backend; ValueError says why a request cannot be met.

    "auto" means NCCL when there is one GPU per rank, gloo otherwise.
    """
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend == "auto":
        return "nccl" if dist.is_nccl_available() and gpus >= world_size else "gloo"
    if backend == "gloo":
        if not dist.is_gloo_available():
            raise ValueError("this torch build has no gloo backend")
        return "gloo"
    if backend == "nccl":
        if not dist.is_nccl_available() or gpus == 0:
            raise ValueError(
                "backend nccl needs CUDA GPUs and a CUDA build of torch; "
                f"this machine shows {gpus} GPU(s) (torch {torch.__version__}). "
                "Use --backend gloo (or auto)."
            )
        if gpus < world_size:
            raise ValueError(
                f"backend nccl needs one GPU per rank: {world_size} ranks asked, "
                f"{gpus} GPU(s) visible. Use fewer ranks or --backend gloo."
            )
        return "nccl"
    raise ValueError(f"unknown backend {backend!r}: use auto, gloo or nccl")


class RankContext:
    """What a lab's ``run_rank`` gets: who it is, where to compute, how to report.

    ``progress(step, total_steps, phase)`` says that ``step`` steps are done
    (so ``fraction = step / total_steps``); it is also where an injected
    failure fires. ``communicating()`` marks a region in which the rank waits
    on its peers, which helps the launcher tell a hung rank from its victims.
    """

    def __init__(self, *, rank: int, world_size: int, local_rank: int, backend: str,
                 fail: FailSpec | None = None, emit: Callable[[dict], None] | None = None):
        self.rank = rank
        self.world_size = world_size
        self.local_rank = local_rank
        self.backend = backend
        self.device = torch.device(f"cuda:{local_rank}") if backend == "nccl" else torch.device("cpu")
        self.fail = fail
        self.step = 0
        self.total_steps = 0
        self.phase = "init"
        self._emit = emit
        self._comm_depth = 0
        self._in_progress = False

    def progress(self, step: int, total_steps: int, phase: str, message: str = "") -> None:
        self._in_progress = True
        self.step, self.total_steps, self.phase = step, total_steps, phase
        if self._emit is not None:
            self._emit(_event(self.rank, step, total_steps, phase, message, kind="progress"))
        fail = self.fail
        if fail is not None and fail.rank == self.rank and fail.step == step:
            _inject_failure(fail.mode, self.rank, step, phase)
        self._in_progress = False

    @contextlib.contextmanager
    def communicating(self):
        self._comm_depth += 1
        try:
            yield
        finally:
            self._comm_depth -= 1

    def waiting_on_peers(self, innermost_file: str) -> bool:
        """True when the main thread is blocked on other ranks, not in lab code."""
        if self._in_progress:
            return False
        return innermost_file.startswith(_TORCH_DIR) or self._comm_depth > 0


def _inject_failure(mode: str, rank: int, step: int, phase: str) -> None:
    sys.stderr.write(f"rank {rank}: injected {mode} at step {step} ({phase})\n")
    sys.stderr.flush()
    if mode == "crash":
        # A hard exit, like an OOM kill or a segfault: no exception, no goodbye.
        os._exit(INJECTED_CRASH_EXIT)
    while True:  # "hang": alive, heartbeating, and never reaching the next collective
        time.sleep(3600)


def _event(rank, step, total_steps, phase, message="", *, kind="progress", **extra) -> dict:
    fraction = None
    if step is not None and total_steps:
        fraction = min(1.0, step / total_steps)
    return {"kind": kind, "rank": rank, "step": step, "total_steps": total_steps,
            "phase": phase, "fraction": fraction, "message": message, **extra}


def _jsonable(obj):
    return asdict(obj) if is_dataclass(obj) else dict(obj or {})


def _load_lab(lab: str):
    """A lab module by short name ("ring") or, for experiments, by module path."""
    if lab not in LABS and "." not in lab:
        raise ValueError(f"unknown lab {lab!r}: choose one of {', '.join(LABS)}")
    return importlib.import_module(LABS.get(lab, lab))


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


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process when the launcher dies; bail if it already has."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:
        os._exit(1)


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


def _rank_main(spec: dict, event_fd: int, listen_fd: int | None) -> int:
    """Body of one rank started by `run_lab`; returns the exit code."""
    _die_with_parent(spec["parent_pid"])
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked rank inherits the CLI's handlers
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    rank, world_size, backend = spec["rank"], spec["world_size"], spec["backend"]
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(spec["port"]),
                       "OMP_NUM_THREADS": "1"})
    torch.set_num_threads(1)  # N ranks share the machine's cores
    chan = _Channel(event_fd)
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
                              master_listen_fd=listen_fd if rank == 0 else None)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=timeout)
        chan.send({"type": "ready"})
        module = _load_lab(spec["lab"])
        out = module.run_rank(ctx, module.Params(**spec["params"]))
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


def _spawned_rank_entry() -> None:
    """Entry point of a rank started as a fresh interpreter (``start="spawn"``)."""
    spec = json.loads(os.environ.pop("LABS_WORKER_SPEC"))
    code = _rank_main(spec, spec["event_fd"], spec.get("listen_fd"))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# --------------------------------------------------------------------------
# The launcher side


@dataclass
class _Rank:
    rank: int
    pid: int
    fd: int
    log: str
    popen: subprocess.Popen | None = None
    buf: bytes = b""
    eof: bool = False
    exit_code: int | None = None  # negative: killed by that signal
    ready: bool = False
    result: dict | None = None
    error: dict | None = None
    failed_at: float | None = None
    step: int = 0
    total_steps: int = 0
    phase: str = "start"
    fraction: float = 0.0
    last_hb: float = 0.0
    progress_t: float | None = None  # when it last reported progress (monotonic)
    active_t: float | None = None  # when it last used CPU or moved its stack
    cpu: float | None = None  # process CPU seconds at the last heartbeat
    cpu_t: float = 0.0
    waiting: bool = False
    where: list = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.result is not None

    @property
    def alive(self) -> bool:
        return self.exit_code is None

    def describe(self) -> dict:
        return {"rank": self.rank, "pid": self.pid, "exit_code": self.exit_code,
                "step": self.step, "total_steps": self.total_steps, "phase": self.phase,
                "waiting_on_peers": self.waiting, "where": self.where,
                "error": (self.error or {}).get("message"), "log_tail": _tail(self.log)}


def _tail(path: str, limit: int = 1500) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def run_lab(lab: str, params=None, *, world_size: int = 2, backend: str = "auto",
            timeout: float = 120.0, hang_timeout: float = 10.0, fail: FailSpec | None = None,
            on_event: Callable[[dict], None] | None = None,
            cancel: threading.Event | None = None, start: str = "auto") -> LabResult | LabError:
    """Run ``lab`` on ``world_size`` local processes and return its result or error.

    ``params`` is the lab's ``Params`` (or a dict of its fields). ``timeout``
    bounds the whole run; ``hang_timeout`` is how long all ranks may go
    without progress before the run counts as hung. ``on_event`` receives
    progress dicts (kind, rank, step, total_steps, phase, fraction, message,
    t, overall) as they happen; setting ``cancel`` stops the run. ``start``
    is "fork", "spawn" or "auto" (see the module docstring).
    """
    t0 = time.perf_counter()
    name = lab
    resolved = backend

    def invalid(message: str) -> LabError:
        return LabError(kind="invalid", rank=None, message=message, lab=name,
                        world_size=world_size, backend=resolved,
                        wall_s=time.perf_counter() - t0)

    try:
        module = _load_lab(lab)
        p = params if is_dataclass(params) else module.Params(**_jsonable(params))
        if not 1 <= world_size <= MAX_WORLD_SIZE:
            raise ValueError(f"world size must be between 1 and {MAX_WORLD_SIZE}, not {world_size}")
        if fail is not None and fail.rank >= world_size:
            raise ValueError(f"fail rank {fail.rank} does not exist with {world_size} ranks")
        if timeout <= 0 or hang_timeout <= 0:
            raise ValueError("timeouts must be positive")
        resolved = resolve_backend(backend, world_size)
        module.check(p, world_size)
    except (ValueError, TypeError, ImportError) as exc:
        return invalid(str(exc))
    if start == "auto":
        single_threaded = threading.active_count() == 1
        start = "fork" if (resolved == "gloo" and single_threaded and hasattr(os, "fork")
                           and not torch.cuda.is_available()) else "spawn"
    if start not in ("fork", "spawn"):
        return invalid(f"start must be auto, fork or spawn, not {start!r}")

    emit = on_event or (lambda _e: None)
    sup = _Supervisor(name=name, world_size=world_size, backend=resolved, timeout=timeout,
                      hang_timeout=hang_timeout, emit=emit, cancel=cancel, t0=t0)
    try:
        sup.start(start=start, spec={"lab": lab, "params": _jsonable(p), "backend": resolved,
                                     "world_size": world_size, "timeout": timeout,
                                     "fail": asdict(fail) if fail else None,
                                     "parent_pid": os.getpid()})
        outcome = sup.watch()
    finally:
        sup.kill_all()
    wall = time.perf_counter() - t0
    if isinstance(outcome, LabError):
        outcome.wall_s = wall
        emit(_event(outcome.rank, None, None, "error", outcome.message, kind="status",
                    t=sup.elapsed(), error_kind=outcome.kind))
        return outcome
    ranks = [r.result for r in sup.ranks]
    work = max((float(r.get("work_s", 0.0)) for r in ranks), default=0.0)
    warnings = [f"rank {r.rank} sent its result but then ended with {_exit_text(r.exit_code)}"
                for r in sup.ranks if r.exit_code not in (0, None)]
    if fail is not None and fail.step >= max(r.total_steps for r in sup.ranks):
        warnings.append(f"nothing injected: the lab has {max(r.total_steps for r in sup.ranks)} "
                        f"steps, fail step {fail.step} was never reached")
    summary = module.summarize(p, ranks, world_size=world_size, backend=resolved)
    result = LabResult(lab=name, world_size=world_size, backend=resolved, params=_jsonable(p),
                       summary=summary, ranks=ranks, wall_s=wall, work_s=work,
                       overhead_s=max(0.0, wall - work), pids=sup.pids, launcher=start,
                       machine=machine_summary(), warnings=warnings)
    emit(_event(None, 1, 1, "done", f"finished in {wall:.2f} s", kind="status", t=sup.elapsed()))
    return result


class _Supervisor:
    """Starts the ranks, reads their reports and decides when the run is over."""

    def __init__(self, *, name, world_size, backend, timeout, hang_timeout, emit, cancel, t0):
        self.name, self.world_size, self.backend = name, world_size, backend
        self.timeout, self.hang_timeout = timeout, hang_timeout
        self.emit, self.cancel, self.t0 = emit, cancel, t0
        self.ranks: list[_Rank] = []
        self.logdir = tempfile.mkdtemp(prefix="labs-")
        self.sel = selectors.DefaultSelector()

    @property
    def pids(self) -> list[int]:
        return [r.pid for r in self.ranks]

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
                r_fd, w_fd = os.pipe()
                log = os.path.join(self.logdir, f"rank{rank}.log")
                rank_spec = dict(spec, rank=rank)
                if start == "fork":
                    pid = self._fork(rank_spec, w_fd, r_fd, listener, log, env)
                    popen = None
                else:
                    popen = self._spawn(rank_spec, w_fd, listener, log, env)
                    pid = popen.pid
                os.close(w_fd)  # only the rank writes; we see EOF when it exits
                os.set_blocking(r_fd, False)
                self.ranks.append(_Rank(rank=rank, pid=pid, fd=r_fd, log=log, popen=popen,
                                        last_hb=time.monotonic()))
                self.sel.register(r_fd, selectors.EVENT_READ, rank)
        finally:
            listener.close()  # rank 0 holds its own copy now
        self.emit(_event(None, 0, 1, "launch", f"started {self.world_size} ranks ({start})",
                         kind="status", t=self.elapsed(), pids=self.pids,
                         world_size=self.world_size, backend=self.backend))

    def _fork(self, spec, w_fd, r_fd, listener, log, env) -> int:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            return pid
        code = 1
        try:  # the child: never return into the caller's code
            os.close(r_fd)
            for other in self.ranks:
                with contextlib.suppress(OSError):
                    os.close(other.fd)
            os.environ.clear()
            os.environ.update(env)
            out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(out, 1)
            os.dup2(out, 2)
            sys.stdout = sys.stderr = open(out, "w", buffering=1, closefd=False)  # noqa: SIM115
            listen_fd = listener.fileno() if spec["rank"] == 0 else None
            if listen_fd is None:
                listener.close()
            code = _rank_main(spec, w_fd, listen_fd)
        except BaseException:  # noqa: BLE001
            with contextlib.suppress(Exception):
                traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
            os._exit(code)

    def _spawn(self, spec, w_fd, listener, log, env) -> subprocess.Popen:
        fds = [w_fd]
        spec = dict(spec, event_fd=w_fd)
        if spec["rank"] == 0:
            spec["listen_fd"] = listener.fileno()
            fds.append(listener.fileno())
        child_env = dict(env, LABS_WORKER_SPEC=json.dumps(spec),
                         PYTHONPATH=os.pathsep.join(filter(None, [_REPO_ROOT,
                                                                  env.get("PYTHONPATH")])))
        with open(log, "wb") as out:
            return subprocess.Popen(
                [sys.executable, "-c", "from labs.launch import _spawned_rank_entry as m; m()"],
                env=child_env, pass_fds=fds, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, cwd=_REPO_ROOT)

    # -- watching

    def watch(self) -> LabResult | LabError | None:
        deadline = self.t0 + self.timeout
        last_progress = time.monotonic()
        first_failure = None
        while True:
            if self.cancel is not None and self.cancel.is_set():
                return self._error("cancelled", None, "the run was cancelled")
            for key, _ in self.sel.select(timeout=0.05):
                self._read(self.ranks[key.data])
            now = time.monotonic()
            for r in self.ranks:
                if r.alive:
                    self._reap(r, block=False)
                gone = r.eof or not r.alive
                if r.failed_at is None and (r.error is not None or (gone and not r.done)):
                    r.failed_at = now
                for t in (r.progress_t, r.active_t):
                    if t is not None:
                        last_progress = max(last_progress, t)
            if all(r.done for r in self.ranks):
                for r in self.ranks:  # results are in; give them a moment to exit cleanly
                    self._reap(r, block=True, timeout=3.0)
                return None
            failed = [r for r in self.ranks if r.failed_at is not None and not r.done]
            if failed:
                first_failure = first_failure or now
                settled = all(not r.alive or r.done for r in self.ranks)
                if settled or now - first_failure > FAILURE_GRACE_S:
                    return self._crash(failed)
            elif all(r.ready or r.done for r in self.ranks) and \
                    now - last_progress > self.hang_timeout:
                return self._hang(now)
            if time.perf_counter() > deadline:
                return self._timeout()

    def _read(self, r: _Rank) -> None:
        try:
            data = os.read(r.fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            r.eof = True
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
        r.last_hb = now
        if kind == "hb":
            # A rank that burns CPU (computing, or its gloo threads moving a
            # big message) or whose stack moves is working, not hung: it keeps
            # the run alive. A hung or blocked rank sleeps: no CPU, same stack.
            burnt = msg["cpu"] - r.cpu if r.cpu is not None else 0.0
            busy = burnt > CPU_BUSY * max(now - r.cpu_t, HEARTBEAT_S)
            if busy or (not msg["waiting"] and msg["where"] != r.where):
                r.active_t = now
            r.cpu, r.cpu_t = msg["cpu"], now
            r.waiting, r.where = msg["waiting"], msg["where"]
        elif kind == "ready":
            r.ready = True
            r.progress_t = now
            self.emit(_event(r.rank, 0, None, "ready", "joined the process group",
                             kind="status", t=self.elapsed()))
        elif kind == "progress":
            r.step, r.total_steps, r.phase = msg["step"], msg["total_steps"], msg["phase"]
            r.fraction = msg.get("fraction") or 0.0
            r.progress_t = now
            overall = sum(x.fraction for x in self.ranks) / self.world_size
            self.emit(dict(msg, t=self.elapsed(), overall=overall))
        elif kind == "result":
            r.result = msg["data"]
            r.progress_t = now
            r.fraction = 1.0
        elif kind == "error":
            r.error = msg

    def _reap(self, r: _Rank, *, block: bool, timeout: float = 5.0) -> None:
        if not r.alive:
            return
        if r.popen is not None:
            try:
                code = r.popen.wait(timeout=timeout) if block else r.popen.poll()
            except subprocess.TimeoutExpired:
                code = None
            r.exit_code = code
            return
        end = time.monotonic() + (timeout if block else 0)
        while True:
            try:
                pid, status = os.waitpid(r.pid, os.WNOHANG)
            except ChildProcessError:
                r.exit_code = r.exit_code if r.exit_code is not None else -1
                return
            if pid:
                r.exit_code = os.waitstatus_to_exitcode(status)
                return
            if time.monotonic() >= end:
                return
            time.sleep(0.01)

    def kill_all(self) -> None:
        """SIGKILL every rank still alive and reap them all: nothing outlives the run."""
        for r in self.ranks:
            if r.alive:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(r.pid, signal.SIGKILL)
        for r in self.ranks:
            self._reap(r, block=True, timeout=10.0)
            with contextlib.suppress(OSError, KeyError, ValueError):
                self.sel.unregister(r.fd)
            with contextlib.suppress(OSError):
                os.close(r.fd)
        self.sel.close()
        for r in self.ranks:
            with contextlib.suppress(OSError):
                os.unlink(r.log)
        with contextlib.suppress(OSError):
            os.rmdir(self.logdir)

    # -- verdicts

    def _error(self, kind: str, rank: int | None, message: str) -> LabError:
        for r in self.ranks:  # read what is left before killing: last words, tracebacks
            if not r.eof:
                self._read(r)
        return LabError(kind=kind, rank=rank, message=message, lab=self.name,
                        world_size=self.world_size, backend=self.backend, pids=self.pids,
                        ranks=[r.describe() for r in self.ranks])

    def _crash(self, failed: list[_Rank]) -> LabError:
        # The culprit failed on its own (no "peer went away" error), and first.
        def blame(r: _Rank):
            return ((r.error or {}).get("peer_error", False), r.failed_at, r.rank)

        culprit = min(failed, key=blame)
        at = f"at step {culprit.step}" + (f"/{culprit.total_steps}" if culprit.total_steps else "")
        at += f" ({culprit.phase})"
        if culprit.error:
            message = (f"rank {culprit.rank} raised {culprit.error['exc']} {at}: "
                       f"{culprit.error['message']}")
        else:
            message = f"rank {culprit.rank} died ({_exit_text(culprit.exit_code)}) {at}"
            last = _tail(culprit.log, 300).strip().splitlines()
            if last:
                message += f"; its last output: {last[-1]!r}"
        others = sorted(r.rank for r in failed if r is not culprit)
        message = message.rstrip(".") + "."
        if others:
            message += f" Then rank(s) {others} failed too: they lost their peer."
        return self._error("crash", culprit.rank, message)

    def _hang(self, now: float) -> LabError:
        pending = [r for r in self.ranks if not r.done]
        silent = [r for r in pending if now - r.last_hb > 4 * HEARTBEAT_S]
        busy = [r for r in pending if not r.waiting]
        suspects = silent or busy
        stalled = f"no rank made progress for {self.hang_timeout:g} s"
        if not suspects:
            return self._error("hang", None, f"{stalled}; every rank is waiting inside a "
                                             "collective, a deadlock rather than one stuck rank.")
        # The one frozen longest (its stack stopped moving first) is the likeliest.
        culprit = min(suspects, key=lambda r: (r.active_t or 0.0, r.step, r.rank))
        how = "stopped sending heartbeats" if culprit in silent else \
            f"is stuck outside communication ({culprit.where[0] if culprit.where else '?'})"
        victims = sorted(r.rank for r in pending if r is not culprit and r.waiting)
        message = (f"rank {culprit.rank} hung at step {culprit.step}/{culprit.total_steps} "
                   f"({culprit.phase}): {stalled}, and it {how}.")
        if victims:
            message += f" Rank(s) {victims} are waiting for it inside collectives."
        return self._error("hang", culprit.rank, message)

    def _timeout(self) -> LabError:
        late = [r for r in self.ranks if not r.ready and not r.done]
        if late:
            r = late[0]
            return self._error("timeout", r.rank, f"rank {r.rank} never joined the process group "
                                                  f"within the {self.timeout:g} s timeout.")
        slow = min((r for r in self.ranks if not r.done), key=lambda r: r.fraction, default=None)
        where = f"; rank {slow.rank} was at step {slow.step}/{slow.total_steps}" if slow else ""
        return self._error("timeout", None, f"the lab did not finish within {self.timeout:g} s"
                                            f"{where}. It was still progressing: raise --timeout "
                                            "or shrink the lab.")


# --------------------------------------------------------------------------
# Under torchrun (or any launcher that sets RANK and WORLD_SIZE)


def launched_externally() -> bool:
    """True when torchrun (or similar) started this process as one rank of a job."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def run_in_env(lab: str, params=None, *, backend: str = "auto", timeout: float = 300.0,
               fail: FailSpec | None = None,
               on_event: Callable[[dict], None] | None = None) -> LabResult | None:
    """Run ``lab`` as one rank of a job whose launcher set RANK/WORLD_SIZE/MASTER_*.

    Every rank calls this; rank 0 returns the LabResult, the others None.
    Failures raise: torchrun notices a failed rank and stops the others.
    """
    t0 = time.perf_counter()
    module = _load_lab(lab)
    p = params if is_dataclass(params) else module.Params(**_jsonable(params))
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    resolved = resolve_backend(backend, local_world)
    module.check(p, world_size)
    if resolved == "nccl":
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(resolved, timeout=timedelta(seconds=timeout))
    ctx = RankContext(rank=rank, world_size=world_size, local_rank=local_rank, backend=resolved,
                      fail=fail, emit=on_event if rank == 0 else None)
    out = module.run_rank(ctx, p)
    gathered = [None] * world_size if rank == 0 else None
    dist.gather_object(out, gathered, dst=0)
    dist.barrier()
    dist.destroy_process_group()
    if rank != 0:
        return None
    wall = time.perf_counter() - t0
    work = max(float(r.get("work_s", 0.0)) for r in gathered)
    return LabResult(lab=lab, world_size=world_size, backend=resolved, params=_jsonable(p),
                     summary=module.summarize(p, gathered, world_size=world_size,
                                              backend=resolved),
                     ranks=gathered, wall_s=wall, work_s=work, overhead_s=max(0.0, wall - work),
                     pids=[], launcher="torchrun", machine=machine_summary())


# Shared helper for labs that record times on several ranks.


def shared_clock_origin(device: torch.device | None = None) -> tuple[float, str]:
    """A time origin all ranks agree on, for per-step traces.

    Every rank reads ``time.perf_counter()`` right after a barrier. On Linux
    that is CLOCK_MONOTONIC, one clock for the whole machine, so when all
    ranks share a host we use rank 0's reading: offsets from it are exactly
    comparable across processes. Ranks on different hosts have unrelated
    clocks; there each rank keeps its own post-barrier reading, which is off
    only by how unevenly the ranks left the barrier.
    """
    hosts = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, socket.gethostname())
    dist.barrier()
    mine = time.perf_counter()
    if len(set(hosts)) == 1:
        box = [mine]
        dist.broadcast_object_list(box, src=0, device=device)
        return box[0], "one host: rank 0's CLOCK_MONOTONIC reading after a barrier"
    return mine, "several hosts: each rank's own clock, aligned by a barrier"
