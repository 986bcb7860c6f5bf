"""Run a Python program we did not write, with nothing of ours in reach (issue #16).

    from labs.sandbox import Limits, run_python
    outcome = run_python("harness", [], files={"submission.py": source, "plan.json": plan},
                         limits=Limits(wall_s=30), on_line=print)
    outcome.returncode, outcome.stopped, outcome.stdout

Why this module exists: the exercises run a learner's code on our server.
The harness and its guard make grading honest, but only the operating system
can keep a hostile program away from the database, the issuer keys, the
network and other learners. This module is that boundary; it knows nothing
about exercises.

Two modes (``EXERCISE_SANDBOX``, default ``bwrap``):

- ``bwrap``: bubblewrap (Debian's ``bubblewrap``) builds a network namespace
  with loopback only, and pid, ipc, uts and cgroup namespaces. The program
  sees ``/usr``, the interpreter at ``/opt/python``, the site-packages at
  ``/opt/site`` and the harness at ``/opt/harness``, all read-only, its files
  read-only at ``/opt/input``, a small ``/etc`` of our own, a fresh ``/proc``
  and a private tmpfs ``/tmp`` (its cwd and HOME). Run as root, bwrap builds
  the namespaces and ``setpriv`` drops to a uid of its own for this run
  (``UID_BASE + slot``), so two runs can neither signal each other nor share
  a process count. Not root, bwrap makes a user namespace instead
  (``--unshare-user``) and the limits are rlimits only.
- ``none``: a plain child process with the same cleared environment, a
  private temporary cwd and the files in a read-only folder. For a
  single-user machine only; it must be asked for by name, and is never
  picked because bwrap is missing.

Limits: a cgroup made for the run caps the memory and the number of
processes of the whole sandbox when ``/sys/fs/cgroup`` is writable (cgroup v1
``memory``/``pids`` hierarchies, or v2 with those controllers); rlimits apply
always (file size, CPU seconds per process, no core dumps, and the process
count of the per-run uid; ``RLIMIT_DATA`` holds each process's memory where
no cgroup can). The wall clock and the output cap are enforced here: the
whole sandbox is killed and `Outcome.stopped` says which limit ended it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import selectors
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path

MODES = ("bwrap", "none")
ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "labs" / "exercises" / "runtime"  # bound read-only at /opt/harness
UID_BASE = 200_000  # per-run uids are UID_BASE + slot (root only)
SLOTS = 1000
MiB = 1 << 20
# What the program may run after its own exit before we stop waiting for its
# output pipes to close (mode none: a grandchild that kept them open).
_DRAIN_S = 1.0


@dataclass(frozen=True)
class Limits:
    """What one run may use. `from_env` reads ``EXERCISE_<FIELD>`` overrides
    (e.g. ``EXERCISE_MEMORY_MB=1024``) so an operator can tune a server
    without code."""

    memory_mb: int = 2048  # the whole sandbox (cgroup); else RLIMIT_DATA per process
    processes: int = 64  # cgroup pids.max, and RLIMIT_NPROC of the per-run uid
    file_size_mb: int = 16  # RLIMIT_FSIZE: the largest file the program may write
    cpu_s: int = 120  # RLIMIT_CPU per process: SIGXCPU, then SIGKILL a second later
    wall_s: float = 60.0  # the whole run; then the whole sandbox is killed
    output_bytes: int = 1 << 20  # stdout and stderr each; more stops the run
    tmpfs_mb: int = 64  # the private /tmp (mode bwrap)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: object) -> Limits:
        environ = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = environ.get(f"EXERCISE_{f.name.upper()}")
            if raw is not None:
                values[f.name] = float(raw) if f.type == "float" else int(raw)
        values.update(overrides)
        return cls(**values)


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
    stopped: str | None = None  # None | "wall_time" | "output" | "memory" | "cpu_time" | "processes"
    details: dict = field(default_factory=dict)  # what the limits saw: oom kills, pids hits, cgroup kind


class SandboxUnavailable(RuntimeError):
    """No sandbox can start here; ``reason`` is a short English reason for logs
    and the CLI (the page shows a translated message instead)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def mode() -> str:
    """The mode from ``EXERCISE_SANDBOX``: "bwrap" unless "none" is asked for by name."""
    value = os.environ.get("EXERCISE_SANDBOX", "").strip() or "bwrap"
    if value not in MODES:
        raise SandboxUnavailable(f"EXERCISE_SANDBOX={value!r} is not one of {', '.join(MODES)}")
    return value


_checked: dict[str, str | None] = {}  # mode -> None (works) or the reason it does not


def check_available(mode_: str | None = None) -> None:
    """Raise `SandboxUnavailable` unless a run in this mode can start. The first
    call for bwrap starts a tiny sandbox once; the answer is kept."""
    chosen = mode() if mode_ is None else mode_
    if chosen not in MODES:
        raise SandboxUnavailable(f"unknown sandbox mode {chosen!r}")
    if chosen not in _checked:
        _checked[chosen] = _probe(chosen)
    if _checked[chosen] is not None:
        raise SandboxUnavailable(_checked[chosen])


def _probe(chosen: str) -> str | None:
    if chosen == "none":
        return None
    for tool in ("bwrap", "prlimit") + (("setpriv",) if os.geteuid() == 0 else ()):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install {_PACKAGES[tool]})"
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
               limits: Limits = Limits(), mode: str | None = None,  # noqa: B008 - frozen
               on_line: Callable[[bytes], object] | None = None,
               harness: Path | None = None) -> Outcome:
    """Run ``python -m module *args`` in the sandbox and wait for it.

    ``files`` are written read-only into the input folder (``/opt/input``; its
    path is in the program's ``SANDBOX_INPUT``); ``harness`` is the folder on
    the program's path (default `HARNESS`, bound at ``/opt/harness``).
    ``on_line`` gets each line of stdout, without its newline, as it arrives.
    Raises `SandboxUnavailable` when the mode cannot run here.
    """
    chosen = globals()["mode"]() if mode is None else mode
    check_available(chosen)
    return _run(["-m", module, *args], files=files, limits=limits, chosen=chosen,
                on_line=on_line, harness=HARNESS if harness is None else harness, stdin=stdin)


def _run(python_args: list[str], *, files: dict[str, bytes], limits: Limits, chosen: str,
         on_line, harness: Path, stdin: bytes = b"") -> Outcome:
    work = Path(tempfile.mkdtemp(prefix="dpa-sandbox-"))
    try:
        inputs = work / "input"
        inputs.mkdir()
        for name, data in files.items():
            if "/" in name or name in ("", ".", ".."):
                raise ValueError(f"file names are plain names: {name!r}")
            (inputs / name).write_bytes(data)
            (inputs / name).chmod(0o444)
        inputs.chmod(0o555)
        with contextlib.ExitStack() as stack:
            if chosen == "bwrap":
                uid = stack.enter_context(_slot()) if os.geteuid() == 0 else None
                cmd, env = _bwrap_command(python_args, work=work, harness=harness, limits=limits,
                                          uid=uid)
            else:
                uid = None
                cmd, env = _none_command(python_args, work=work, harness=harness, limits=limits)
            group = stack.enter_context(_Cgroup.make(limits))
            return _supervise(group.wrap(cmd), env=env, cwd=work if chosen == "bwrap"
                              else work / "tmp", stdin=stdin, limits=limits, on_line=on_line,
                              chosen=chosen, group=group)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _rlimits(limits: Limits, *, nproc: bool, memory: bool) -> list[str]:
    """``prlimit`` options: set in the process that execs bwrap (or python), so
    every process of the run inherits them."""
    opts = [f"--fsize={limits.file_size_mb * MiB}", f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}",
            "--core=0"]
    if nproc:
        opts.append(f"--nproc={limits.processes}")
    if memory:
        opts.append(f"--data={limits.memory_mb * MiB}")
    return opts


def _base_env(*, path: str, home: str, inputs: str, pythonpath: str) -> dict[str, str]:
    return {"PATH": path, "HOME": home, "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1",
            "GLOO_SOCKET_IFNAME": "lo", "PYTHONDONTWRITEBYTECODE": "1", "SANDBOX_INPUT": inputs,
            "PYTHONPATH": pythonpath}


def _none_command(python_args, *, work: Path, harness: Path, limits: Limits):
    tmp = work / "tmp"
    tmp.mkdir(mode=0o700)
    env = _base_env(path=f"{Path(sys.executable).parent}:{os.defpath}", home=str(tmp),
                    inputs=str(work / "input"), pythonpath=str(harness))
    cmd = [shutil.which("prlimit") or "prlimit",
           *_rlimits(limits, nproc=False, memory=not _Cgroup.possible()), "--",
           sys.executable, "-s", "-B", *python_args]
    return cmd, env


def _python_layout() -> tuple[Path, str, Path | None]:
    """(the interpreter's prefix, its binary relative to it, the venv's
    site-packages when it is outside the prefix)."""
    base = Path(sys.base_prefix).resolve()
    binary = Path(sys.executable).resolve()
    try:
        rel = str(binary.relative_to(base))
    except ValueError:
        rel = f"bin/python{sys.version_info.major}.{sys.version_info.minor}"
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    return base, rel, (None if site.is_relative_to(base) else site)


def _etc(work: Path, uid: int) -> Path:
    """A small /etc: enough for gloo (hosts), getpass and pwd (passwd, group)."""
    etc = work / "etc"
    etc.mkdir()
    (etc / "passwd").write_text(f"root:x:0:0::/:/usr/sbin/nologin\n"
                                f"learner:x:{uid}:{uid}::/tmp:/usr/sbin/nologin\n")
    (etc / "group").write_text(f"root:x:0:\nlearner:x:{uid}:\n")
    (etc / "hosts").write_text("127.0.0.1 localhost sandbox\n::1 localhost\n")
    (etc / "nsswitch.conf").write_text("passwd: files\ngroup: files\nhosts: files\n")
    for f in etc.iterdir():
        f.chmod(0o444)
    etc.chmod(0o555)
    return etc


def _bwrap_command(python_args, *, work: Path, harness: Path, limits: Limits, uid: int | None):
    base, rel, site = _python_layout()
    root = uid is not None
    etc = _etc(work, uid if root else os.getuid())
    cmd = [shutil.which("prlimit") or "prlimit",
           *_rlimits(limits, nproc=root, memory=not _Cgroup.possible()), "--",
           shutil.which("bwrap") or "bwrap",
           "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
           "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    if root:
        # setpriv needs these three to drop to the run's uid; it then clears them all.
        cmd += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                "--cap-add", "CAP_SETPCAP"]
    else:
        cmd += ["--unshare-user"]
    cmd += ["--ro-bind", "/usr", "/usr"]
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / top
        if host.is_symlink():
            cmd += ["--symlink", os.readlink(host), f"/{top}"]
        elif host.is_dir():
            cmd += ["--ro-bind", str(host), f"/{top}"]
    cmd += ["--proc", "/proc", "--dev", "/dev",
            "--perms", "1777", "--size", str(limits.tmpfs_mb * MiB), "--tmpfs", "/tmp",
            "--perms", "0755", "--dir", "/etc"]
    for f in sorted(etc.iterdir()):
        cmd += ["--ro-bind", str(f), f"/etc/{f.name}"]
    if Path("/etc/ld.so.cache").is_file():
        cmd += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    # bwrap makes the parents of a bind mode 0700: make /opt ourselves first.
    cmd += ["--perms", "0755", "--dir", "/opt", "--ro-bind", str(base), "/opt/python"]
    pythonpath = "/opt/harness"
    if site is not None:
        cmd += ["--ro-bind", str(site), "/opt/site"]
        pythonpath += ":/opt/site"
    cmd += ["--ro-bind", str(harness.resolve()), "/opt/harness",
            "--ro-bind", str(work / "input"), "/opt/input", "--chdir", "/tmp", "--"]
    if root:
        cmd += [shutil.which("setpriv") or "/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}",
                "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    cmd += [f"/opt/python/{rel}", "-s", "-B", *python_args]
    env = _base_env(path="/opt/python/bin:/usr/bin:/bin", home="/tmp", inputs="/opt/input",
                    pythonpath=pythonpath)
    # The pyenv/python.org interpreter finds libpython through an absolute RUNPATH.
    env["LD_LIBRARY_PATH"] = "/opt/python/lib"
    return cmd, env


@contextlib.contextmanager
def _slot():
    """A uid no other run on this host holds: a lock file per slot, held for the run."""
    lockdir = Path(tempfile.gettempdir()) / "dpa-sandbox-slots"
    lockdir.mkdir(mode=0o700, exist_ok=True)
    start = os.getpid() % SLOTS  # spread concurrent callers out
    for i in range(SLOTS):
        slot = (start + i) % SLOTS
        fd = os.open(lockdir / f"{slot}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            yield UID_BASE + slot
        finally:
            os.close(fd)
        return
    raise SandboxUnavailable(f"all {SLOTS} sandbox slots are busy")


class _Cgroup:
    """The run's own cgroup: memory and process caps for the whole sandbox,
    its OOM and pids counters, and a kill that reaches every process in it.

    A no-op object where no cgroup can be made (not root, read-only
    /sys/fs/cgroup); the rlimits still apply then."""

    def __init__(self, dirs: dict[str, Path], kind: str):
        self.dirs = dirs  # "memory" and "pids" -> the run's directory (the same one on v2)
        self.kind = kind

    @classmethod
    def possible(cls) -> bool:
        return bool(cls._parents())

    @staticmethod
    def _parents() -> dict[str, Path] | None:
        """Where this process's memory and pids cgroups are, if both are writable."""
        if os.geteuid() != 0:
            return None
        mine = {}
        try:
            for line in Path("/proc/self/cgroup").read_text().splitlines():
                _, controllers, path = line.split(":", 2)
                for c in controllers.split(",") if controllers else [""]:
                    mine[c] = path
            mounts = Path("/proc/self/mountinfo").read_text().splitlines()
        except OSError:
            return None
        v1, v2 = {}, None
        for line in mounts:
            pre, _, post = line.partition(" - ")
            parts, post = pre.split(), post.split()
            fstype, options = post[0], post[-1].split(",")
            mount_root, point = parts[3], parts[4]
            if fstype == "cgroup2":
                v2 = (mount_root, Path(point))
            elif fstype == "cgroup":
                for c in ("memory", "pids"):
                    if c in options and c in mine:
                        v1[c] = _under(Path(point), mount_root, mine[c])
        if set(v1) == {"memory", "pids"} and all(os.access(p, os.W_OK) for p in v1.values()):
            return v1
        if v2 is not None and "" in mine:
            parent = _under(v2[1], v2[0], mine[""])
            try:
                controllers = (parent / "cgroup.controllers").read_text().split()
            except OSError:
                return None
            if {"memory", "pids"} <= set(controllers) and os.access(parent, os.W_OK):
                return {"v2": parent}
        return None

    @classmethod
    @contextlib.contextmanager
    def make(cls, limits: Limits):
        parents = cls._parents()
        group = cls({}, "none")
        name = f"dpa-sandbox-{os.getpid()}-{time.monotonic_ns()}"
        try:
            if parents and "v2" in parents:
                group = cls._make_v2(parents["v2"], name, limits)
            elif parents:
                group = cls._make_v1(parents, name, limits)
        except OSError:
            group.remove()
            group = cls({}, "none")
        try:
            yield group
        finally:
            group.kill()
            group.remove()

    @classmethod
    def _make_v1(cls, parents, name, limits):
        group = cls({}, "v1")
        for c, parent in parents.items():
            (parent / name).mkdir()
            group.dirs[c] = parent / name
        memory = group.dirs["memory"]
        (memory / "memory.limit_in_bytes").write_text(str(limits.memory_mb * MiB))
        with contextlib.suppress(OSError):  # only where swap accounting is on
            (memory / "memory.memsw.limit_in_bytes").write_text(str(limits.memory_mb * MiB))
        (group.dirs["pids"] / "pids.max").write_text(str(limits.processes))
        return group

    @classmethod
    def _make_v2(cls, parent, name, limits):
        enabled = (parent / "cgroup.subtree_control").read_text().split()
        missing = [f"+{c}" for c in ("memory", "pids") if c not in enabled]
        if missing:  # fails (EBUSY) where the parent holds processes itself
            (parent / "cgroup.subtree_control").write_text(" ".join(missing))
        (parent / name).mkdir()
        group = cls({"memory": parent / name, "pids": parent / name}, "v2")
        (parent / name / "memory.max").write_text(str(limits.memory_mb * MiB))
        with contextlib.suppress(OSError):
            (parent / name / "memory.swap.max").write_text("0")
        (parent / name / "pids.max").write_text(str(limits.processes))
        return group

    def wrap(self, cmd: list[str]) -> list[str]:
        """Enter the cgroup before exec, so the very first process is inside."""
        if not self.dirs:
            return cmd
        targets = sorted({str(d / "cgroup.procs") for d in self.dirs.values()})
        script = "".join(f'echo $$ > "{t}" && ' for t in targets) + 'exec "$@"'
        return ["/bin/sh", "-c", script, "sh", *cmd]

    def counters(self) -> dict[str, int]:
        found = {}
        if "memory" in self.dirs:
            events = "memory.events" if self.kind == "v2" else "memory.oom_control"
            found["oom_kill"] = _counter(self.dirs["memory"] / events, "oom_kill")
        if "pids" in self.dirs:
            found["pids_max"] = _counter(self.dirs["pids"] / "pids.events", "max")
        return found

    def kill(self) -> None:
        if not self.dirs:
            return
        if self.kind == "v2" and (self.dirs["pids"] / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                (self.dirs["pids"] / "cgroup.kill").write_text("1")
        for _ in range(50):  # v1: kill what is there until nothing is left
            pids = set()
            for d in self.dirs.values():
                with contextlib.suppress(OSError):
                    pids |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)

    def remove(self) -> None:
        for d in set(self.dirs.values()):
            for _ in range(100):  # rmdir fails while a killed process is still exiting
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def _under(point: Path, mount_root: str, path: str) -> Path:
    """The directory of cgroup ``path`` in a hierarchy mounted at ``point``."""
    if mount_root != "/" and (path == mount_root or path.startswith(mount_root + "/")):
        path = path[len(mount_root):]
    candidate = point / path.lstrip("/")
    return candidate if candidate.is_dir() else point


def _counter(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _supervise(cmd, *, env, cwd, stdin: bytes, limits: Limits, on_line, chosen: str,
               group: _Cgroup) -> Outcome:
    """Start the run, stream and cap its output, enforce the wall clock, and
    say which limit (if any) ended it."""
    t0 = time.monotonic()
    deadline = t0 + limits.wall_s
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=cwd, start_new_session=True,
                            close_fds=True)
    out, err = bytearray(), bytearray()
    pending = bytearray()  # stdout not yet handed to on_line (no newline yet)
    ours: str | None = None  # the limit we enforced ourselves
    try:
        _feed(proc, stdin)
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
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
        cpu_used = _reap(proc)
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
        elif rc == -signal.SIGXCPU or (rc == -signal.SIGKILL and cpu_used >= limits.cpu_s):
            stopped = "cpu_time"  # the soft limit's SIGXCPU, or the hard limit's SIGKILL
        elif counters.get("pids_max") and rc != 0:
            stopped = "processes"
    return Outcome(returncode=None if ours else rc, stdout=bytes(out), stderr=bytes(err),
                   duration_s=time.monotonic() - t0, mode=chosen, stopped=stopped,
                   details={"cgroup": group.kind, "cpu_s": round(cpu_used, 3), **counters})


def _exited(proc: subprocess.Popen) -> bool:
    """Whether the first process has exited, without reaping it (`_reap` wants its rusage)."""
    return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _reap(proc: subprocess.Popen) -> float:
    """Wait for the run's first process and return the CPU seconds it and the
    descendants it reaped used (bwrap's init reaps the program): a SIGKILL
    after ``cpu_s`` of CPU is the hard CPU limit, not someone's kill."""
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except ChildProcessError:  # reaped elsewhere
        proc.wait()
        return 0.0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def _feed(proc: subprocess.Popen, data: bytes) -> None:
    """Write stdin and close it; a program that does not read it cannot block us
    (the rest is dropped once the pipe is full)."""
    try:
        if data:
            os.set_blocking(proc.stdin.fileno(), False)
            with contextlib.suppress(BlockingIOError):
                os.write(proc.stdin.fileno(), data)
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL the run's process group: bwrap, or the program and the children
    that stayed in its group; bwrap's --die-with-parent takes the namespace down."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
