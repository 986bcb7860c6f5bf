"""What one sandbox run may use, and what holds it there (``labs.sandbox``'s limits).

    from labs.sandbox.limits import Cgroup, Limits, rlimits, slot
    with Cgroup.make(limits) as group, slot() as uid:   # uid: as root only
        cmd = group.wrap([prlimit, *rlimits(limits, nproc=True, memory=group.kind == "none"), ...])

- `Limits`: the numbers, and the sandbox's mode, with the operator's
  ``EXERCISE_*`` settings (a pydantic-settings class, nested in the platform's
  settings as ``academy.settings.Settings.exercises``).
- `rlimits`: ``prlimit`` options for the process that execs the sandbox, which
  every process of the run inherits.
- `slot`: a uid of its own for the run (as root, ``UID_BASE + slot``), so two
  runs can neither signal each other nor share a process count.
- `Cgroup`: a cgroup of its own for the run where ``/sys/fs/cgroup`` is
  writable (v1 ``memory``/``pids`` hierarchies, or v2 where our cgroup may have
  children with those controllers), capping the memory and the processes of
  the whole sandbox, counting its OOM kills and pids hits, and killing every
  process in it.

`SandboxUnavailable` lives here because a slot may be missing; ``labs.sandbox``
offers it with the rest of its API.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import stat
import tempfile
import time
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from labs.settings import read

UID_BASE = 200_000  # per-run uids are UID_BASE + slot (root only)
SLOTS = 1000
MiB = 1 << 20


class Limits(BaseSettings):
    """What one run may use, and how it runs: the operator's ``EXERCISE_<FIELD>``
    (e.g. ``EXERCISE_MEMORY_MB=1024``), from the environment or ``.env`` in the
    working directory, so that an operator can tune a server without code.

    Like ``labs.settings.Limits`` (``LAB_*``): `from_env` reads the settings
    afresh, and the web app nests this class as ``Settings.exercises``; the
    worker hands what the operator set to the grading command (`environ`).
    ``Limits(wall_s=30)`` gives 30 s and the operator's settings for the rest.
    """

    model_config = SettingsConfigDict(env_prefix="EXERCISE_", env_file=".env", extra="ignore", frozen=True,
                                      env_ignore_empty=True)

    # How learners' code runs (``labs.sandbox.run.mode``): "bwrap" refuses to grade where
    # bubblewrap cannot start; "none" runs the code unconfined, only for a single-user
    # machine whose owner is the only learner. Never chosen by itself.
    sandbox: Literal["bwrap", "none"] = "bwrap"
    memory_mb: int = 2048  # the whole sandbox (cgroup); else RLIMIT_DATA per process
    processes: int = 64  # cgroup pids.max, and RLIMIT_NPROC of the per-run uid
    file_size_mb: int = 16  # RLIMIT_FSIZE: the largest file the program may write
    cpu_s: int = 120  # RLIMIT_CPU per process: SIGXCPU, then SIGKILL a second later
    wall_s: float = 60.0  # the whole run; then the whole sandbox is killed
    output_bytes: int = 1 << 20  # stdout and stderr each; more stops the run
    tmpfs_mb: int = 64  # the private /tmp (mode bwrap)
    # RLIMIT_NOFILE per process. Besides the usual reason, it bounds what
    # sockets hold on cgroup v1, where each TCP socket keeps a minimum buffer
    # even past the run's socket cap: about processes x open_files x 36 KiB.
    open_files: int = 256
    # Where the grading side keeps torch DDP's lanes for bucketed-overlap's report
    # (``labs.exercises.ddp_lanes``): by default a folder of this user's in the
    # temporary directory. Not the sandbox's: the learner's code never sees it.
    ddp_cache: Path = Field(default_factory=lambda: default_ddp_cache())

    @field_validator("sandbox", mode="before")
    @classmethod
    def _stripped(cls, value: object) -> object:
        return value.strip() if isinstance(value, str) else value

    @field_validator("ddp_cache", mode="before")
    @classmethod
    def _folder(cls, value: object) -> object:
        if isinstance(value, str):
            value = value.strip() or default_ddp_cache()  # blank: the default, as when unset
        if "\0" in str(value):
            raise ValueError("a folder's path cannot hold a NUL character")
        return value

    @classmethod
    def from_env(cls, **overrides: object) -> Limits:
        """The operator's settings now (read afresh, never cached), ``overrides`` winning;
        a bad value raises ``labs.settings.SettingError``, which names the variable."""
        return read(cls, **overrides)

    def environ(self) -> dict[str, str]:
        """The settings the operator set (not the defaults), as the variables they are
        read from: a grader that finds ``EXERCISE_WALL_S`` unset fits the wall clock to
        its plan (``labs.exercises.grader.run_limits``)."""
        prefix = self.model_config["env_prefix"]
        return {f"{prefix}{name.upper()}": str(value)
                for name, value in self.model_dump(exclude_unset=True).items()}


def default_ddp_cache() -> Path:
    """``EXERCISE_DDP_CACHE`` unset: a folder of this user's in the temporary directory."""
    return Path(tempfile.gettempdir()) / f"dpa-ddp-lanes-{os.getuid()}"


class SandboxUnavailable(RuntimeError):
    """No sandbox can start here; ``reason`` is a short English reason for logs
    and the CLI (the page shows a translated message instead)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def rlimits(limits: Limits, *, nproc: bool, memory: bool) -> list[str]:
    """``prlimit`` options: set in the process that execs bwrap (or python), so
    every process of the run inherits them. No real-time priority and no
    raised nice, whatever the server was started with (a SCHED_FIFO spinner
    per core would starve it)."""
    opts = [f"--fsize={limits.file_size_mb * MiB}", f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}",
            "--core=0", f"--nofile={limits.open_files}", "--rtprio=0", "--nice=0"]
    if nproc:
        opts.append(f"--nproc={limits.processes}")
    if memory:
        opts.append(f"--data={limits.memory_mb * MiB}")
    return opts


def slot_locks(root: Path | None = None) -> Path:
    """The folder of the slots' lock files: one per host, whatever the
    caller's TMPDIR (the lab worker may have its own), and ours alone (in a
    world-writable /tmp someone else could have made it first)."""
    if root is None:
        root = Path("/run" if os.access("/run", os.W_OK) else "/tmp")
    lockdir = root / "dpa-sandbox-slots"
    with contextlib.suppress(FileExistsError):
        lockdir.mkdir(mode=0o700)
    st = os.lstat(lockdir)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise SandboxUnavailable(f"{lockdir} is not a folder of ours alone")
    return lockdir


@contextlib.contextmanager
def slot():
    """A uid no other run on this host holds: a lock file per slot, held for the run."""
    lockdir = slot_locks()
    start = os.getpid() % SLOTS  # spread concurrent callers out
    for i in range(SLOTS):
        n = (start + i) % SLOTS
        fd = os.open(lockdir / f"{n}.lock", os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            yield UID_BASE + n
        finally:
            os.close(fd)
        return
    raise SandboxUnavailable(f"all {SLOTS} sandbox slots are busy")


class Cgroup:
    """The run's own cgroup: memory and process caps for the whole sandbox,
    its OOM and pids counters, and a kill that reaches every process in it.

    A no-op object where no cgroup can be made (not root, read-only
    /sys/fs/cgroup); the rlimits still apply then."""

    def __init__(self, dirs: dict[str, Path], kind: str):
        self.dirs = dirs  # "memory" and "pids" -> the run's directory (the same one on v2)
        self.kind = kind

    @staticmethod
    def parents() -> dict[str, Path] | None:
        """Where this process's memory and pids cgroups are, if we may make children there."""
        if os.geteuid() != 0:
            return None
        try:
            return find_parents(Path("/proc/self/cgroup").read_text(),
                                 Path("/proc/self/mountinfo").read_text())
        except OSError:
            return None

    @classmethod
    @contextlib.contextmanager
    def make(cls, limits: Limits):
        parents = cls.parents()
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
        # v1 leaves socket buffers out of memory.limit_in_bytes: loopback TCP and
        # UDP queues the program never reads would hold host RAM (up to the
        # host-wide tcp_mem/udp_mem, which the server's own sockets share)
        # beyond memory_mb. Setting this cap makes v1 count them, apart.
        with contextlib.suppress(OSError):  # gone from kernels without v1 kmem
            (memory / "memory.kmem.tcp.limit_in_bytes").write_text(str(_socket_bytes(limits)))
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


def _socket_bytes(limits: Limits) -> int:
    """What a run may hold in socket buffers on cgroup v1 (v2 counts them in
    memory.max): a quarter of its memory, plenty for gloo's messages."""
    return max(limits.memory_mb * MiB // 4, 16 * MiB)


def find_parents(cgroups: str, mountinfo: str) -> dict[str, Path] | None:
    """{"memory": dir, "pids": dir} on cgroup v1 (also hybrid hosts), {"v2": dir}
    on v2 where that dir offers both controllers, else None; from the texts of
    /proc/self/cgroup and /proc/self/mountinfo."""
    mine = {}
    for line in cgroups.splitlines():
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            mine[c] = path
    v1, v2 = {}, None
    for line in mountinfo.splitlines():
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
