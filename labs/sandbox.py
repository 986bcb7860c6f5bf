"""Run a Python program we did not write, with nothing of ours in reach (issue #16).

    from labs.sandbox import Limits, run_python
    outcome = run_python("harness", [], files={"submission.py": source}, stdin=plan,
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
  sees of ``/usr`` only the system libraries (`_system_libraries`) and, as
  root, ``setpriv``; the interpreter's binary, standard library and
  libpython at ``/opt/python`` (never its whole prefix, which may be
  ``/usr``), the site-packages at ``/opt/site`` and the harness at
  ``/opt/harness``, all read-only, its files read-only at ``/opt/input``, a
  small ``/etc`` of our own, a fresh ``/proc`` and a private tmpfs ``/tmp``
  (its cwd and HOME). Run as root, bwrap builds the namespaces and
  ``setpriv`` drops to a uid of its own for this run (``UID_BASE + slot``),
  so two runs can neither signal each other nor share a process count. Not
  root, bwrap makes a user namespace instead (``--unshare-user``) and the
  limits are rlimits only (no process count: RLIMIT_NPROC would count the
  developer's own processes too). A seccomp filter (x86_64, aarch64) refuses
  a user namespace of its own, ptrace and its cousins, socket families other
  than unix, IP and netlink (AF_VSOCK is outside the network namespace) and
  the kernel interfaces exploits favour. There are no terminals (every
  devpts shares the host's pty pool).
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
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import platform
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path

from labs.exercises.runtime import bpf

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
    # RLIMIT_NOFILE per process. Besides the usual reason, it bounds what
    # sockets hold on cgroup v1, where each TCP socket keeps a minimum buffer
    # even past the run's socket cap: about processes x open_files x 36 KiB.
    open_files: int = 256

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
    # None | "wall_time" | "output" | "memory" | "cpu_time" | "processes" | "file_size"
    stopped: str | None = None
    details: dict = field(default_factory=dict)  # what the limits saw: oom kills, pids hits, cgroup kind


class SandboxUnavailable(RuntimeError):
    """No sandbox can start here; ``reason`` is a short English reason for logs
    and the CLI (the page shows a translated message instead)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def mode() -> str:
    """The mode from ``EXERCISE_SANDBOX``: "bwrap" unless "none" is asked for by name."""
    return _env_mode()


def _env_mode() -> str:
    value = os.environ.get("EXERCISE_SANDBOX", "").strip() or "bwrap"
    if value not in MODES:
        raise SandboxUnavailable(f"EXERCISE_SANDBOX={value!r} is not one of {', '.join(MODES)}")
    return value


_checked: dict[str, str | None] = {}  # mode -> None (works) or the reason it does not


def check_available(mode: str | None = None) -> None:  # noqa: A002 - the design's name
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
    the program's path (default `HARNESS`, bound at ``/opt/harness``).
    ``on_line`` gets each line of stdout, without its newline, as it arrives.
    ``limits`` default to `Limits.from_env()` (the operator's overrides).
    Raises `SandboxUnavailable` when the mode cannot run here.
    """
    chosen = _env_mode() if mode is None else mode
    check_available(chosen)
    limits = Limits.from_env() if limits is None else limits
    return _run(["-m", module, *args], files=files, limits=limits, chosen=chosen,
                on_line=on_line, harness=HARNESS if harness is None else harness, stdin=stdin)


def _run(python_args: list[str], *, files: dict[str, bytes], limits: Limits, chosen: str,
         on_line, harness: Path, stdin: bytes = b"") -> Outcome:
    _sweep()
    work = Path(tempfile.mkdtemp(prefix=f"dpa-sandbox-{os.getpid()}-"))
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
            group = stack.enter_context(_Cgroup.make(limits))
            memory_rlimit = group.kind == "none"  # RLIMIT_DATA stands in for the cgroup
            fds: list[int] = []
            if chosen == "bwrap":
                uid = stack.enter_context(_slot()) if os.geteuid() == 0 else None
                prefix, inner, env = _bwrap_command(python_args, work=work, harness=harness,
                                                    limits=limits, uid=uid,
                                                    memory_rlimit=memory_rlimit)
                # bwrap reads its options from a pipe, so the sandbox's pid 1 shows
                # "bwrap --args N -- <command>" in /proc and not our paths.
                split = inner.index("--")
                options = inner[:split]
                if SECCOMP:
                    fds.append(_pipe_with(_seccomp_filter(), stack))
                    options += ["--seccomp", str(fds[-1])]
                fds.append(_pipe_with(b"".join(a.encode() + b"\0" for a in options), stack))
                cmd, cwd = [*prefix, "--args", str(fds[-1]), *inner[split:]], work
            else:
                cmd, env = _none_command(python_args, work=work, harness=harness, limits=limits,
                                         memory_rlimit=memory_rlimit)
                cwd = work / "tmp"
            return _supervise(group.wrap(cmd), env=env, cwd=cwd, stdin=stdin, limits=limits,
                              on_line=on_line, chosen=chosen, group=group,
                              pass_fds=tuple(fds))
    finally:
        _remove(work)


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
    for parent in (_Cgroup._parents() or {}).values():
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


def _rlimits(limits: Limits, *, nproc: bool, memory: bool) -> list[str]:
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


def _base_env(*, path: str, home: str, inputs: str, pythonpath: str) -> dict[str, str]:
    return {"PATH": path, "HOME": home, "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1",
            "GLOO_SOCKET_IFNAME": "lo", "PYTHONDONTWRITEBYTECODE": "1", "SANDBOX_INPUT": inputs,
            "PYTHONPATH": pythonpath}


def _none_command(python_args, *, work: Path, harness: Path, limits: Limits,
                  memory_rlimit: bool):
    tmp = work / "tmp"
    tmp.mkdir(mode=0o700)
    env = _base_env(path=f"{Path(sys.executable).parent}:{os.defpath}", home=str(tmp),
                    inputs=str(work / "input"), pythonpath=str(harness))
    cmd = [shutil.which("prlimit") or "prlimit",
           *_rlimits(limits, nproc=False, memory=memory_rlimit), "--",
           sys.executable, "-s", "-B", *python_args]
    return cmd, env


def _python_layout() -> tuple[list[tuple[Path, str]], Path | None]:
    """What the interpreter needs, as (host path, path in the sandbox) binds,
    and the site-packages when they are outside its standard library.

    Not the interpreter's whole prefix: where that is ``/usr`` (Debian's
    python3) or ``/usr/local`` (python.org's images) it holds every tool of
    the host and its configuration. A small prefix at ``/opt/python`` holds
    the binary, the standard library (with ``lib-dynload``) and libpython
    where it is shared; Python finds its prefix from ``lib/pythonX.Y/os.py``
    next to the binary, as at home."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()  # the base's, also in a venv
    binds = [(Path(sys.executable).resolve(), f"/opt/python/bin/{version}"),
             (stdlib, f"/opt/python/lib/{version}")]
    soname = sysconfig.get_config_var("INSTSONAME")
    libdir = sysconfig.get_config_var("LIBDIR")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and soname and libdir:
        libpython = Path(libdir) / soname
        if libpython.is_file():
            binds.append((libpython.resolve(), f"/opt/python/lib/{soname}"))
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    return binds, (None if site.is_relative_to(stdlib) else site)


def _system_libraries() -> list[str]:
    """The folders of ``/usr`` the dynamic loader needs for Python, its
    extension modules, torch and setpriv (their ``ldd`` names nothing else
    there): the multiarch library folder (Debian, Ubuntu), ``/usr/lib64``
    (the loader itself on Debian; every library on Fedora), and the C.UTF-8
    locale; a host with neither library folder gets ``/usr/lib``. Nothing
    else of ``/usr``: no binaries, ``/usr/local``, ``/usr/etc``, ``share``."""
    found = [f"/usr/lib/{arch}" for arch in [sysconfig.get_config_var("MULTIARCH")]
             if arch and Path(f"/usr/lib/{arch}").is_dir()]
    if Path("/usr/lib64").is_dir() and not Path("/usr/lib64").is_symlink():
        found.append("/usr/lib64")
    if not found:
        found.append("/usr/lib")
    if Path("/usr/lib/locale/C.utf8").is_dir():  # LANG=C.UTF-8
        found.append("/usr/lib/locale/C.utf8")
    return found


def _copy_harness(harness: Path, work: Path) -> Path:
    """A copy the run's uid can read whatever the checkout's modes (a umask of
    077, a pytest temp dir), without bytecode caches."""
    copy = work / "harness"
    shutil.copytree(harness, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for path in [copy, *copy.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    return copy


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


def _refuse_exposure(bound: list[Path], site: Path | None) -> None:
    """Raise `SandboxUnavailable` where what we bind would show the project:
    the checkout (whose data/ holds the database and secrets by default)
    inside a bound folder, or our packages (the reference solutions)
    installed among the site-packages."""
    for folder in bound:
        if ROOT.resolve().is_relative_to(folder.resolve()):
            raise SandboxUnavailable(f"the project at {ROOT} is inside {folder}, which the "
                                     "sandbox shows to the program: move one of them")
    if site is not None and (site / "labs" / "exercises").exists():
        raise SandboxUnavailable(f"the site-packages at {site} hold a copy of labs.exercises "
                                 "(reference solutions): uninstall it")


def _bwrap_command(python_args, *, work: Path, harness: Path, limits: Limits, uid: int | None,
                   memory_rlimit: bool):
    python, site = _python_layout()
    libraries = _system_libraries()
    tops = [top for top in ("lib", "lib32", "lib64", "libx32") if (Path("/") / top).is_dir()]
    root = uid is not None
    setpriv = Path(shutil.which("setpriv") or "/usr/bin/setpriv").resolve() if root else None
    _refuse_exposure([*(host for host, _ in python), *([site] if site else []),
                      *map(Path, libraries), *([setpriv] if setpriv else []),
                      *(Path("/") / top for top in tops if not (Path("/") / top).is_symlink())],
                     site if site is not None else Path(sysconfig.get_paths()["purelib"]))
    etc = _etc(work, uid if root else os.getuid())
    prefix = [shutil.which("prlimit") or "prlimit",
              *_rlimits(limits, nproc=root, memory=memory_rlimit), "--",
              shutil.which("bwrap") or "bwrap"]
    cmd = ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
           "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    if root:
        # setpriv needs these three to drop to the run's uid; it then clears them all.
        cmd += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                "--cap-add", "CAP_SETPCAP"]
    else:
        cmd += ["--unshare-user"]
    # Of /usr only the libraries (review N-11: all of it showed the host's
    # tools and their configuration), and setpriv where it drops the uid.
    for folder in libraries:
        cmd += _ro_bind(folder, folder)
    if setpriv is not None:
        cmd += _ro_bind(str(setpriv), "/usr/bin/setpriv")
    for top in tops:  # the loader's own path (/lib64/ld-linux-x86-64.so.2) and unmerged hosts
        host = Path("/") / top
        if host.is_symlink():
            cmd += ["--symlink", os.readlink(host), f"/{top}"]
        elif host.is_dir():
            cmd += ["--ro-bind", str(host), f"/{top}"]
    tmpfs = ["--perms", "1777", "--size", str(limits.tmpfs_mb * MiB), "--tmpfs"]
    # bwrap's /dev has a devpts of its own, but every devpts draws on one
    # host-wide pool (kernel.pty.max); a program needs no terminal: hide it.
    cmd += ["--proc", "/proc", "--dev", "/dev", "--perms", "0555", "--tmpfs", "/dev/pts",
            *tmpfs, "/dev/shm", *tmpfs, "/tmp",
            "--perms", "0755", "--dir", "/etc"]
    for f in sorted(etc.iterdir()):
        cmd += ["--ro-bind", str(f), f"/etc/{f.name}"]
    if Path("/etc/ld.so.cache").is_file():
        cmd += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    for host, inside in python:
        cmd += _ro_bind(str(host), inside)
    pythonpath = "/opt/harness"
    if site is not None:
        cmd += ["--ro-bind", str(site), "/opt/site"]
        pythonpath += ":/opt/site"
    cmd += ["--ro-bind", str(_copy_harness(harness, work)), "/opt/harness",
            "--ro-bind", str(work / "input"), "/opt/input", "--chdir", "/tmp", "--"]
    if root:
        cmd += ["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}",
                "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    cmd += [python[0][1], "-s", "-B", *python_args]
    env = _base_env(path="/opt/python/bin", home="/tmp", inputs="/opt/input",
                    pythonpath=pythonpath)
    # A shared libpython (pyenv, python.org) is found through an absolute RUNPATH at home.
    env["LD_LIBRARY_PATH"] = "/opt/python/lib"
    return prefix, cmd, env


def _ro_bind(host: str, inside: str) -> list[str]:
    """bwrap options binding ``host`` read-only at ``inside``, its parents made
    first with mode 0755 (bwrap would make them 0700, closed to the run's uid)."""
    parents = [str(p) for p in reversed(Path(inside).parents) if str(p) != "/"]
    return [*(a for p in parents for a in ("--perms", "0755", "--dir", p)),
            "--ro-bind", host, inside]


# A seccomp filter on top of the namespaces: no user namespace of its own
# (CLONE_NEWUSER would hand the program capabilities in it, the usual door to
# kernel bugs); no ptrace, nor its cousins that read or write another
# process's memory or take its fds (a rank must not reach the harness or a
# neighbour, which run as the same uid); and none of the calls a Python
# program never needs but kernel exploits like (keyrings, bpf, perf events,
# userfaultfd, io_uring, mounts, modules, the LDT). The numbers and the BPF
# instructions come from the harness's ``bpf`` module, which builds each
# rank's own filter from the same table (runtime/ holds nothing secret).
_BLOCKED_NAMES = ("unshare", "setns", "ptrace", "keyctl", "add_key", "request_key", "bpf",
                  "perf_event_open", "userfaultfd", "mount", "umount2", "pivot_root", "kexec_load",
                  "init_module", "finit_module", "delete_module", "open_by_handle_at", "acct",
                  "process_vm_readv", "process_vm_writev", "modify_ldt",
                  # The same numbers on every arch (io_uring, the new mount API, pidfd_getfd).
                  "io_uring_setup", "io_uring_enter", "io_uring_register", "open_tree",
                  "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
                  "pidfd_getfd")
# machine -> (audit arch, {blocked name: nr}, {"clone"/"socket"/"socketpair": nr})
_BLOCKED = {machine: (bpf.AUDIT_ARCH[machine],
                      {n: nr for n, nr in bpf.numbers(machine).items() if n in _BLOCKED_NAMES},
                      {n: bpf.numbers(machine)[n] for n in ("clone", "socket", "socketpair")})
            for machine in bpf.AUDIT_ARCH}
_CLONE3 = bpf.COMMON["clone3"]
_CLONE_NEWUSER = bpf.CLONE_NEWUSER
# The socket families a program may make: unix, IPv4, IPv6 (all inside the
# network namespace) and netlink (getifaddrs, which gloo calls). The others
# are refused: AF_VSOCK is not namespaced and reaches the hypervisor and the
# host's vsock listeners, and the rare ones (AF_ALG, TIPC, RDS...) are where
# kernel bugs are found, their modules loaded on first use.
_FAMILIES = (1, 2, 10, 16)  # AF_UNIX, AF_INET, AF_INET6, AF_NETLINK
SECCOMP = bpf.supported()  # elsewhere: the namespaces and limits only


def _seccomp_filter() -> bytes:
    """The classic BPF program for ``bwrap --seccomp``: a wrong arch is killed,
    a blocked call fails with EPERM, clone3 with ENOSYS (its flags sit in
    memory a filter cannot read; glibc then falls back to clone), clone with
    CLONE_NEWUSER with EPERM, and a socket of another family with EAFNOSUPPORT."""
    _, blocked, nrs = _BLOCKED[platform.machine()]
    jeq, jset, ret, ld = bpf.JEQ, bpf.JSET, bpf.RET, bpf.LD
    prog = bpf.prologue() + bpf.refuse(blocked.values())
    n = len(_FAMILIES)  # socket or socketpair: allow the listed families, refuse the rest
    prog += [(jeq, 1, 0, nrs["socket"]), (jeq, 0, n + 3, nrs["socketpair"]), (ld, 0, 0, bpf.ARG0)]
    prog += [(jeq, n - i, 0, family) for i, family in enumerate(_FAMILIES)]
    prog += [(ret, 0, 0, bpf.fail(errno.EAFNOSUPPORT)), (ret, 0, 0, bpf.ALLOW)]
    prog += [(jeq, 0, 1, _CLONE3), (ret, 0, 0, bpf.fail(errno.ENOSYS)),
             (jeq, 1, 0, nrs["clone"]), (ret, 0, 0, bpf.ALLOW),
             (ld, 0, 0, bpf.ARG0),
             (jset, 0, 1, _CLONE_NEWUSER), (ret, 0, 0, bpf.fail(errno.EPERM)), (ret, 0, 0, bpf.ALLOW)]
    return bpf.assemble(prog)


def _slot_locks(root: Path | None = None) -> Path:
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
def _slot():
    """A uid no other run on this host holds: a lock file per slot, held for the run."""
    lockdir = _slot_locks()
    start = os.getpid() % SLOTS  # spread concurrent callers out
    for i in range(SLOTS):
        slot = (start + i) % SLOTS
        fd = os.open(lockdir / f"{slot}.lock", os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
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

    @staticmethod
    def _parents() -> dict[str, Path] | None:
        """Where this process's memory and pids cgroups are, if we may make children there."""
        if os.geteuid() != 0:
            return None
        try:
            return _find_parents(Path("/proc/self/cgroup").read_text(),
                                 Path("/proc/self/mountinfo").read_text())
        except OSError:
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


def _find_parents(cgroups: str, mountinfo: str) -> dict[str, Path] | None:
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


def _supervise(cmd, *, env, cwd, stdin: bytes, limits: Limits, on_line, chosen: str,
               group: _Cgroup, pass_fds: tuple[int, ...] = ()) -> Outcome:
    """Start the run, stream and cap its output, enforce the wall clock, and
    say which limit (if any) ended it."""
    t0 = time.monotonic()
    deadline = t0 + limits.wall_s
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=cwd, start_new_session=True,
                            close_fds=True, pass_fds=pass_fds)
    out, err = bytearray(), bytearray()
    pending = bytearray()  # stdout not yet handed to on_line (no newline yet)
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
