"""Run a Python program we did not write, with nothing of ours in reach (issue #16).

    from labs.sandbox.run import Limits, run_python
    outcome = run_python("harness", [], files={"submission.py": source}, stdin=plan,
                         limits=Limits(wall_s=30), on_line=print)
    outcome.returncode, outcome.stopped, outcome.stdout

Why this module exists: the exercises run a learner's code on our server.
The harness and its guard make grading honest, but only the operating system
can keep a hostile program away from the database, the issuer keys, the
network and other learners. This module is that boundary; it knows nothing
about exercises.

Two modes (``EXERCISE_SANDBOX``, default ``bwrap``; `Limits.sandbox`):

- ``bwrap``: bubblewrap (Debian's ``bubblewrap``) builds a network namespace
  with loopback only, and pid, ipc, uts and cgroup namespaces. The program
  sees of ``/usr`` only the system libraries and, as root, ``setpriv``; the
  interpreter's binary, standard library and libpython at ``/opt/python``
  (never its whole prefix, which may be ``/usr``), the site-packages at
  ``/opt/site`` and the harness at ``/opt/harness`` (with this sandbox's own
  ``seccomp`` and ``processes`` modules beside it), all read-only, its files
  read-only at ``/opt/input``, a small ``/etc`` of our own, a fresh ``/proc``
  and a private tmpfs ``/tmp`` (its cwd and HOME). Run as root, bwrap builds
  the namespaces and ``setpriv`` drops to a uid of its own for this run
  (``UID_BASE + slot``), so two runs can neither signal each other nor share
  a process count. Not root, bwrap makes a user namespace instead
  (``--unshare-user``) and the limits are rlimits only (no process count:
  RLIMIT_NPROC would count the developer's own processes too). A seccomp
  filter (x86_64, aarch64: ``seccomp.sandbox_program``) refuses a user
  namespace of its own, ptrace and its cousins, socket families other than
  unix, IP and netlink (AF_VSOCK is outside the network namespace) and the
  kernel interfaces exploits favour. There are no terminals (every devpts
  shares the host's pty pool).
- ``none``: a plain child process with the same cleared environment, a
  private temporary cwd and the files in a read-only folder. For a
  single-user machine only; it must be asked for by name, and is never
  picked because bwrap is missing.

Limits: a cgroup made for the run caps the memory and the number of
processes of the whole sandbox when ``/sys/fs/cgroup`` is writable (cgroup v1
``memory``/``pids`` hierarchies, or v2 where our cgroup may have children with
those controllers: v2 forbids that while it holds processes itself, so a v2
host needs the server started in a delegated subtree; v1 needs a cap of
its own for socket buffers, which its memory limit leaves out); rlimits
apply always (file size, CPU seconds and open files per process, no core
dumps, no real-time priority, and the process count of the per-run uid;
``RLIMIT_DATA`` holds each process's memory where no cgroup can). The wall
clock and the output cap are enforced here: the whole sandbox is killed and
`Outcome.stopped` says which limit ended it.

The parts, by job: this module runs the program and reads what it did
(`run_python`, the wall clock, the output cap, `Outcome`; `start_python`
starts it ahead of its input, for the warm grader);
``labs.sandbox.layout`` builds the command lines, what the program sees;
``labs.sandbox.limits`` holds `Limits`, the rlimits, the per-run uid slots and
the cgroup; ``labs.sandbox.seccomp`` the filters.
"""

from __future__ import annotations

import contextlib
import os
import select
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from labs.sandbox import layout as sandbox_layout
from labs.sandbox import seccomp

# Limits and SandboxUnavailable are this module's API too (``from labs.sandbox.run import Limits``).
from labs.sandbox.limits import Cgroup, Limits, SandboxUnavailable, slot
from labs.settings import SettingError

MODES = typing.get_args(Limits.model_fields["sandbox"].annotation)  # ("bwrap", "none")
HARNESS = sandbox_layout.PACKAGE / "exercises" / "runtime"  # bound read-only at /opt/harness
# What the program may run after its own exit before we stop waiting for its
# output pipes to close (mode none: a grandchild that kept them open).
_DRAIN_S = 1.0


@dataclass
class Outcome:
    """How a run ended. ``returncode`` is negative (-N) when signal N killed the
    program (bwrap reports that as 128+N; we turn it back); ``stopped`` names
    the limit that ended the run, or None when the program ended by itself
    within every limit."""

    returncode: int | None
    stdout: bytes
    stderr: bytes
    duration_s: float
    mode: str
    # None | "wall_time" | "output" | "memory" | "cpu_time" | "processes" | "file_size"
    stopped: str | None = None
    details: dict = field(default_factory=dict)  # what the limits saw: oom kills, pids hits, cgroup kind


def mode() -> str:
    """The mode from ``EXERCISE_SANDBOX`` (`Limits.sandbox`): "bwrap" unless "none" is asked
    for by name. A setting that cannot be used is a `SandboxUnavailable` naming it."""
    return _env_mode()


def _env_mode() -> str:
    try:
        return Limits.from_env().sandbox
    except SettingError as err:
        raise SandboxUnavailable(str(err)) from None


_checked: dict[str, str | None] = {}  # mode -> None (works) or the reason it does not


def check_available(mode: str | None = None) -> None:  # the design's name
    """Raise `SandboxUnavailable` unless a run in this mode can start. The first
    call for bwrap starts a tiny sandbox once; the answer is kept."""
    chosen = _env_mode() if mode is None else mode
    if chosen not in MODES:
        raise SandboxUnavailable(f"unknown sandbox mode {chosen!r}")
    if chosen not in _checked:
        _checked[chosen] = _probe(chosen)
    if _checked[chosen] is not None:
        raise SandboxUnavailable(_checked[chosen])


def _probe(chosen: str) -> str | None:
    tools = ("prlimit",) if chosen == "none" else \
        ("bwrap", "prlimit") + (("setpriv",) if os.geteuid() == 0 else ())
    for tool in tools:
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install {_PACKAGES[tool]})"
    if chosen == "none":
        return None
    with tempfile.TemporaryDirectory(prefix="dpa-probe-") as empty:
        try:
            outcome = _run(["-c", "print('ok')"], files={}, limits=Limits(wall_s=30, processes=8),
                           chosen="bwrap", on_line=None, harness=Path(empty))
        except OSError as exc:
            return f"bwrap cannot start: {exc}"
    if outcome.returncode != 0 or outcome.stdout.strip() != b"ok":
        why = (outcome.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        return f"bwrap cannot start a sandbox: {why[:200]}"
    return None


_PACKAGES = {"bwrap": "bubblewrap", "prlimit": "util-linux", "setpriv": "util-linux"}


def run_python(module: str, args: list[str], *, files: dict[str, bytes], stdin: bytes = b"",
               limits: Limits | None = None, mode: str | None = None,
               on_line: Callable[[bytes], object] | None = None,
               harness: Path | None = None) -> Outcome:
    """Run ``python -m module *args`` in the sandbox and wait for it.

    ``files`` are written read-only into the input folder (``/opt/input``; its
    path is in the program's ``SANDBOX_INPUT``); ``harness`` is the folder on
    the program's path (default `HARNESS`; a copy, with ``seccomp`` and
    ``processes`` beside it, bound at ``/opt/harness``).
    ``on_line`` gets each line of stdout, without its newline, as it arrives.
    ``limits`` default to `Limits.from_env()` (the operator's overrides).
    Raises `SandboxUnavailable` when the mode cannot run here.
    """
    with start_python(module, args, files=files, limits=limits, mode=mode, harness=harness) as started:
        return started.run(stdin=stdin, on_line=on_line)


@contextlib.contextmanager
def start_python(module: str, args: list[str], *, files: dict[str, bytes] | None = None,
                 limits: Limits | None = None, mode: str | None = None,
                 harness: Path | None = None) -> Iterator[Started]:
    """``python -m module *args`` started in the sandbox ahead of its input (`Started`):
    the warm grader's way (``labs.exercises.warm``). The sandbox, its limits and its
    cleanup are those of `run_python`; only the wall clock waits for `Started.run`.
    Leaving the block kills what still runs."""
    chosen = _env_mode() if mode is None else mode
    check_available(chosen)
    limits = Limits.from_env() if limits is None else limits
    with _start(["-m", module, *args], files=files or {}, limits=limits, chosen=chosen,
                harness=HARNESS if harness is None else harness) as started:
        yield started


def _run(python_args: list[str], *, files: dict[str, bytes], limits: Limits, chosen: str,
         on_line, harness: Path, stdin: bytes = b"") -> Outcome:
    with _start(python_args, files=files, limits=limits, chosen=chosen, harness=harness) as started:
        return started.run(stdin=stdin, on_line=on_line)


@contextlib.contextmanager
def _start(python_args: list[str], *, files: dict[str, bytes], limits: Limits, chosen: str,
           harness: Path) -> Iterator[Started]:
    _sweep()
    work = Path(tempfile.mkdtemp(prefix=f"dpa-sandbox-{os.getpid()}-"))
    try:
        inputs = work / "input"
        inputs.mkdir()
        for name, data in files.items():
            _put(inputs, name, data)
        inputs.chmod(0o555)
        program = sandbox_layout.program_folder(harness, work)
        with contextlib.ExitStack() as stack:
            group = stack.enter_context(Cgroup.make(limits))
            memory_rlimit = group.kind == "none"  # RLIMIT_DATA stands in for the cgroup
            fds: list[int] = []
            if chosen == "bwrap":
                uid = stack.enter_context(slot()) if os.geteuid() == 0 else None
                prefix, inner, env = sandbox_layout.bwrap_command(
                    python_args, work=work, program=program, limits=limits, uid=uid,
                    memory_rlimit=memory_rlimit)
                # bwrap reads its options from a pipe, so the sandbox's pid 1 shows
                # "bwrap --args N -- <command>" in /proc and not our paths.
                split = inner.index("--")
                options = inner[:split]
                if seccomp.supported():  # elsewhere: the namespaces and limits only
                    fds.append(_pipe_with(seccomp.sandbox_program(), stack))
                    options += ["--seccomp", str(fds[-1])]
                fds.append(_pipe_with(b"".join(a.encode() + b"\0" for a in options), stack))
                cmd, cwd = [*prefix, "--args", str(fds[-1]), *inner[split:]], work
            else:
                cmd, env = sandbox_layout.plain_command(python_args, work=work, program=program,
                                                        limits=limits, memory_rlimit=memory_rlimit)
                cwd = work / "tmp"
            started = Started(group.wrap(cmd), env=env, cwd=cwd, limits=limits, chosen=chosen,
                              group=group, pass_fds=tuple(fds), inputs=inputs)
            try:
                yield started
            finally:
                started.close()
    finally:
        _remove(work)


def _put(inputs: Path, name: str, data: bytes) -> None:
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"file names are plain names: {name!r}")
    (inputs / name).write_bytes(data)
    (inputs / name).chmod(0o444)


def _remove(work: Path) -> None:
    """Delete a work folder, read-only folders in it included (their owner may
    not delete entries without write permission when it is not root)."""
    for path in [work, *work.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            with contextlib.suppress(OSError):
                path.chmod(0o700)
    shutil.rmtree(work, ignore_errors=True)


def _pipe_with(data: bytes, stack: contextlib.ExitStack) -> int:
    """A pipe already holding ``data`` (bwrap reads it to the end); returns its read end."""
    if len(data) > 60_000:  # a pipe holds 64 KiB; ours hold a few KiB
        raise ValueError("too much for a pipe")
    read, write = os.pipe()
    stack.callback(os.close, read)
    try:
        os.write(write, data)
    finally:
        os.close(write)
    return read


def _sweep() -> None:
    """Remove what a run left behind when its caller was killed (SIGKILL skips
    our cleanup): work folders and cgroups named after a pid that is gone."""
    for path in Path(tempfile.gettempdir()).glob("dpa-sandbox-*-*"):
        if not _alive(path.name):
            _remove(path)
    for parent in (Cgroup.parents() or {}).values():
        for path in parent.glob("dpa-sandbox-*-*"):
            if not _alive(path.name):
                with contextlib.suppress(OSError):
                    path.rmdir()


def _alive(name: str) -> bool:
    """Whether the pid in a name made as ``dpa-sandbox-<pid>-...`` is running."""
    try:
        pid = int(name.split("-")[2])
    except (IndexError, ValueError):
        return True  # not ours to judge
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


class Started:
    """A program running in the sandbox (`start_python`), its input still to come.

    `put` adds a file to its input folder, `wait` waits for something outside
    (the warm grader's job) while noticing the program's end, and `run` feeds
    its stdin, streams and caps its output, enforces the wall clock, counted
    from the call, and says which limit (if any) ended it. Every other limit
    (memory, processes, CPU time, file size) holds from the start."""

    def __init__(self, cmd, *, env, cwd, limits: Limits, chosen: str, group: Cgroup,
                 pass_fds: tuple[int, ...], inputs: Path) -> None:
        self.limits, self.chosen, self.group, self.inputs = limits, chosen, group, inputs
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, cwd=cwd, start_new_session=True,
                                     close_fds=True, pass_fds=pass_fds)
        self.out, self.err = bytearray(), bytearray()
        self.ended = False

    def alive(self) -> bool:
        return not self.ended and not _exited(self.proc)

    def put(self, name: str, data: bytes) -> None:
        """A read-only file in the input folder (``SANDBOX_INPUT``); the program sees it at once."""
        self.inputs.chmod(0o755)
        try:
            _put(self.inputs, name, data)
        finally:
            self.inputs.chmod(0o555)

    def wait(self, fd: int, timeout: float) -> bool:
        """Wait until ``fd`` has something to read: False when the program ended first (or
        closed its output, or wrote more than the cap: then it is killed) or ``timeout``
        passed. What it writes meanwhile is kept for `run`."""
        deadline = time.monotonic() + timeout
        pipes = {self.proc.stdout.fileno(): self.out, self.proc.stderr.fileno(): self.err}
        while (now := time.monotonic()) < deadline and not _exited(self.proc):
            readable, _, _ = select.select([fd, *pipes], [], [], min(deadline - now, 0.5))
            if fd in readable:
                return True
            for pipe in readable:
                chunk = os.read(pipe, 65536)
                if not chunk or len(pipes[pipe]) + len(chunk) > self.limits.output_bytes:
                    self.close()  # its output closed, or a flood before any input: not to be run
                    return False
                pipes[pipe] += chunk
        return False

    def close(self) -> None:
        """Kill whatever of the sandbox still runs (a `run` that never came, or was cut short)."""
        if not self.ended:
            _kill(self.proc)
            self.group.kill()
            self.proc.wait()
            self.ended = True
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(OSError):
                pipe.close()

    def run(self, *, stdin: bytes = b"", on_line: Callable[[bytes], object] | None = None) -> Outcome:
        """Feed ``stdin``, stream the output (``on_line`` per line of stdout), enforce the
        wall clock from now and the output cap; wait for the end and say how it came."""
        limits, chosen, group = self.limits, self.chosen, self.group
        t0 = time.monotonic()
        deadline = t0 + limits.wall_s
        proc, out, err = self.proc, self.out, self.err
        pending = bytearray(out)  # stdout not yet handed to on_line (no newline yet)
        ours: str | None = None  # the limit we enforced ourselves
        try:
            sel = selectors.DefaultSelector()
            sel.register(proc.stdout, selectors.EVENT_READ, out)
            sel.register(proc.stderr, selectors.EVENT_READ, err)
            feeding = memoryview(stdin)  # what the program has yet to read
            if stdin:
                os.set_blocking(proc.stdin.fileno(), False)
                sel.register(proc.stdin, selectors.EVENT_WRITE, None)
            else:
                proc.stdin.close()
            exited_at = None
            while sel.get_map():
                now = time.monotonic()
                if now >= deadline:
                    ours = "wall_time"
                    break
                if exited_at is None and _exited(proc):
                    exited_at = now
                if exited_at is not None and now - exited_at > _DRAIN_S:
                    break  # something the program left behind holds its pipes open
                for key, _ in sel.select(timeout=min(deadline - now, 0.2)):
                    if key.fileobj is proc.stdin:
                        feeding = _feed(proc, feeding, sel)
                        continue
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    buf = key.data
                    room = limits.output_bytes - len(buf)
                    buf += chunk[:room]
                    if buf is out and on_line is not None:
                        pending += chunk[:room]
                        *lines, rest = pending.split(b"\n")
                        pending[:] = rest
                        for line in lines:
                            on_line(bytes(line))
                    if len(chunk) > room:
                        ours = "output"
                        break
                if ours:
                    break
            sel.close()
        finally:
            if ours or not _exited(proc):
                _kill(proc)
            group.kill()
            cpu_used = _reap(proc) if chosen == "none" else None
            if chosen != "none":
                proc.wait()
            self.ended = True
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                with contextlib.suppress(OSError):
                    pipe.close()
        if on_line is not None and pending and ours != "output":
            on_line(bytes(pending))
        rc = proc.returncode
        if chosen == "bwrap" and rc is not None and rc > 128 and not ours:
            rc = -(rc - 128)  # bwrap's "killed by signal N" is 128+N
        counters = group.counters()
        stopped = ours
        if ours == "wall_time" and counters.get("pids_max"):
            stopped = "processes"
        elif not ours:
            if counters.get("oom_kill"):
                stopped = "memory"
            elif rc == -signal.SIGXCPU or (rc == -signal.SIGKILL and cpu_used is not None
                                           and cpu_used >= limits.cpu_s):
                stopped = "cpu_time"  # the soft limit's SIGXCPU, or the hard limit's SIGKILL
            elif counters.get("pids_max") and rc != 0:
                stopped = "processes"
            elif rc == -signal.SIGXFSZ:  # Python ignores it (EFBIG instead) unless told otherwise
                stopped = "file_size"
            elif group.kind == "none" and rc != 0 and _last_line(err).startswith(b"MemoryError"):
                stopped = "memory"  # RLIMIT_DATA: Python raises instead of being killed
        return Outcome(returncode=None if ours else rc, stdout=bytes(out), stderr=bytes(err),
                       duration_s=time.monotonic() - t0, mode=chosen, stopped=stopped,
                       details={"cgroup": group.kind, **counters,
                                **({} if cpu_used is None else {"cpu_s": round(cpu_used, 3)})})


def _last_line(data: bytes | bytearray) -> bytes:
    lines = bytes(data).strip().splitlines()
    return lines[-1] if lines else b""


def _exited(proc: subprocess.Popen) -> bool:
    """Whether the first process has exited, without reaping it (`_reap` wants its rusage)."""
    return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _reap(proc: subprocess.Popen) -> float:
    """Wait for the program (mode none) and return the CPU seconds it and the
    children it reaped used: a SIGKILL after ``cpu_s`` of CPU is the hard CPU
    limit (a program that ignores SIGXCPU), not someone's kill. In mode bwrap
    the program is bwrap's grandchild and its time does not reach us; there
    only SIGXCPU names the CPU limit."""
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except ChildProcessError:  # reaped elsewhere
        proc.wait()
        return 0.0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def _feed(proc: subprocess.Popen, rest: memoryview, sel: selectors.BaseSelector) -> memoryview:
    """Write what the pipe takes of ``rest`` to stdin; close it when all is
    written or the program closed its end. Returns what is still to write."""
    try:
        rest = rest[os.write(proc.stdin.fileno(), rest[:65536]):]
    except BlockingIOError:
        return rest
    except OSError:  # BrokenPipeError: the program does not want the rest
        rest = rest[:0]
    if not rest:
        sel.unregister(proc.stdin)
        proc.stdin.close()
    return rest


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL the run's process group: bwrap, or the program and the children
    that stayed in its group; bwrap's --die-with-parent takes the namespace down."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
