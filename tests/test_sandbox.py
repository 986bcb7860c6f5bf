"""Red team for ``labs.sandbox``: hostile programs stay inside (issue #16).

Each payload is a small Python program run through `run_python` in mode
bwrap with small limits. Every test checks two sides: what the sandbox
reports (``stopped``, the return code, what the program printed about its
attempts) and, on the host, that nothing reached us: the listener got no
connection, no file appeared, our processes and other runs are alive, no
process of the run's uid is left.

The bwrap tests are skipped only where bubblewrap is missing and we are not
root (a developer's laptop); as root (CI) a missing sandbox fails them, and
`test_ci_has_a_sandbox` fails outright when ``CI`` is set.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

import pytest

from labs.sandbox import layout as sandbox_layout
from labs.sandbox import limits as sandbox_limits
from labs.sandbox import run as sandbox
from labs.sandbox import seccomp
from labs.sandbox.run import Limits, SandboxUnavailable, run_python
from tests.labstack import free_port
from tests.procs import command_lines

ROOT = Path(__file__).resolve().parent.parent
as_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="the per-run uid and the cgroup limits need root (CI runs as root)")
SMALL = Limits(memory_mb=256, processes=16, file_size_mb=1, cpu_s=10, wall_s=20,
               output_bytes=64 << 10, tmpfs_mb=16)
KiB = 1 << 10

# The payloads: each prints one JSON line of what it managed, where that matters.
PAYLOADS = {
    "report": r"""
import json, os, sys
print(json.dumps({"env": dict(os.environ), "cwd": os.getcwd(), "uid": os.getuid(),
                  "files": {n: open(os.path.join(os.environ["SANDBOX_INPUT"], n)).read()
                            for n in sorted(os.listdir(os.environ["SANDBOX_INPUT"]))},
                  "self_environ": open("/proc/self/environ", "rb").read().decode(errors="replace")}))
""",
    "echo": r"""
import hashlib, sys
data = sys.stdin.buffer.read()
print(len(data), hashlib.sha256(data).hexdigest())
""",
    "later": r"""
import json, os, runpy, sys
print(json.dumps(sorted(os.listdir(os.environ["SANDBOX_INPUT"]))), flush=True)
for line in sys.stdin:  # a payload per line, run only once its line comes: "read /root", "network 8000"
    sys.argv = line.split()
    runpy.run_module(sys.argv[0], run_name="__main__")
print(json.dumps(sorted(os.listdir(os.environ["SANDBOX_INPUT"]))))
""",
    "network": r"""
import errno, json, os, socket, sys
port = int(sys.argv[1])
found = {"interfaces": [l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]]}
for name, addr in (("host_listener", ("127.0.0.1", port)), ("outside", ("192.0.2.1", 80))):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(addr)
        found[name] = "connected"
    except OSError as exc:
        found[name] = errno.errorcode.get(exc.errno, str(exc))
    finally:
        s.close()
print(json.dumps(found))
""",
    "read": r"""
import json, os, sys
found = {}
for path in sys.argv[1:]:
    try:
        if os.path.isdir(path):
            found[path] = "listed: " + ",".join(os.listdir(path))
        else:
            with open(path, "rb") as f:
                found[path] = "read: " + f.read(200).decode(errors="replace")
    except OSError as exc:
        found[path] = type(exc).__name__
print(json.dumps(found))
""",
    "view": r"""
import json, os, sys
found = {}
for path in sys.argv[1:]:  # names only: nothing is read
    if os.path.isdir(path):
        found[path] = sorted(os.listdir(path))
    else:
        found[path] = "exists" if os.path.lexists(path) else "absent"
print(json.dumps(found))
""",
    "proc": r"""
import json, os, sys
host_pid = sys.argv[1]
found = {"pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()), "me": os.getpid()}
for what in ("environ", "cmdline"):
    try:
        found[what] = open(f"/proc/{host_pid}/{what}", "rb").read().decode(errors="replace")
    except OSError as exc:
        found[what] = type(exc).__name__
try:
    found["init_environ"] = open("/proc/1/environ", "rb").read().decode(errors="replace")
except OSError as exc:
    found["init_environ"] = type(exc).__name__
print(json.dumps(found))
""",
    "write": r"""
import errno, json, os, sys
found = {}
for path in sys.argv[1:]:
    try:
        with open(os.path.join(path, "pwned"), "w") as f:
            f.write("x")
        found[path] = "written"
    except OSError as exc:
        found[path] = errno.errorcode.get(exc.errno, str(exc))
big = 0
try:
    with open("/tmp/big", "wb") as f:
        for _ in range(64):
            f.write(b"x" * (1 << 20))
            f.flush()
except OSError as exc:
    found["big"] = errno.errorcode.get(exc.errno, str(exc))
found["big_size"] = os.path.getsize("/tmp/big")
print(json.dumps(found))
""",
    "nested": r"""
import ctypes, errno, json, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
found = {}
child = os.fork()
if child == 0:
    __import__("time").sleep(30)
    os._exit(0)
for name, call in (("unshare_user", lambda: libc.unshare(0x10000000)),  # CLONE_NEWUSER
                   ("ptrace_child", lambda: libc.ptrace(16, child, 0, 0))):  # PTRACE_ATTACH
    found[name] = errno.errorcode.get(ctypes.get_errno(), "?") if call() == -1 else "allowed"
os.kill(child, 9)
os.waitpid(child, 0)
found["clone3"] = errno.errorcode.get(ctypes.get_errno(), "?") \
    if libc.syscall(435, 0, 0) == -1 else "allowed"  # the kernel alone would say EFAULT
try:  # the host's tools are not in the sandbox (review N-11); the call itself is refused above
    tool = subprocess.run(["/usr/bin/unshare", "--user", "--map-root-user", "id", "-u"],
                          capture_output=True, text=True)
    found["unshare_tool"] = tool.stdout.strip() or "refused"
except FileNotFoundError:
    found["unshare_tool"] = "absent"
pid = os.fork()  # plain processes and threads still work
if pid == 0:
    os._exit(3)
found["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
print(json.dumps(found))
""",
    "forkbomb": r"""
import os, time
print(os.getuid(), flush=True)
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
""",
    "membomb": r"""
hog = []
while True:
    hog.append(b"\1" * (8 << 20))
""",
    "loop": r"""
print("looping", flush=True)
while True:
    pass
""",
    "flood": r"""
import sys
stream = getattr(sys, sys.argv[1])
print("first line", file=stream, flush=True)
while True:
    stream.write("y" * 65536)
""",
    "lingering": r"""
import os, sys, time
if os.fork() == 0:  # a grandchild in its own session, that outlives its parent
    os.setsid()
    time.sleep(600)
    os._exit(0)
print(os.getuid(), flush=True)
time.sleep(600)
""",
    "neighbour": r"""
import json, os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
open("/tmp/mine", "w").write("secret of run A")
print(json.dumps({"ready": True}), flush=True)
got = signal.sigtimedwait([signal.SIGUSR1], 30)  # the test says when the other run is done
print(json.dumps({"still_mine": open("/tmp/mine").read(), "woken": got is not None}), flush=True)
""",
    "killer": r"""
import json, os, sys
found = {"tmp": os.listdir("/tmp"), "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}
for name, target in (("parent", os.getppid()), ("init", 1), ("everyone", -1)):
    try:
        os.kill(target, 9)
        found[name] = "sent"
    except OSError as exc:
        found[name] = type(exc).__name__
print(json.dumps(found), flush=True)
""",
    "families": r"""
import ctypes, errno, json, os, socket
found = {}
for name, family, kind in (("vsock", 40, socket.SOCK_STREAM), ("alg", 38, socket.SOCK_SEQPACKET),
                           ("tipc", 30, socket.SOCK_STREAM), ("unix", 1, socket.SOCK_STREAM),
                           ("inet", 2, socket.SOCK_STREAM), ("inet6", 10, socket.SOCK_DGRAM),
                           ("netlink", 16, socket.SOCK_RAW)):
    try:
        socket.socket(family, kind).close()
        found[name] = "created"
    except OSError as exc:
        found[name] = errno.errorcode.get(exc.errno, str(exc))
try:
    socket.socketpair(40, socket.SOCK_STREAM)
    found["vsock_pair"] = "created"
except OSError as exc:
    found["vsock_pair"] = errno.errorcode.get(exc.errno, str(exc))
# A neighbouring process of the same uid (a rank, the harness): its memory and its fds.
libc = ctypes.CDLL(None, use_errno=True)
secret = ctypes.create_string_buffer(b"expected values")
child = os.fork()
if child == 0:
    __import__("time").sleep(30)
    os._exit(0)
class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
mine = Iovec(ctypes.addressof(secret), len(secret))
for name, nr in (("process_vm_readv", 310), ("process_vm_writev", 311)):
    n = libc.syscall(nr, child, ctypes.byref(mine), 1, ctypes.byref(mine), 1, 0)
    found[name] = "allowed" if n >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
pidfd = libc.syscall(434, child, 0)  # pidfd_open
fd = libc.syscall(438, pidfd, 0, 0)  # pidfd_getfd: the neighbour's stdin
found["pidfd_getfd"] = "allowed" if fd >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
os.kill(child, 9)
os.waitpid(child, 0)
print(json.dumps(found))
""",
    "channel": r"""
import json, os, time
r, w = os.pipe()
pid = os.fork()
if pid == 0:  # the sender: its own group and its own CPU
    os.setpgid(0, 0)
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    os.write(w, b"x")
    time.sleep(30)
    os._exit(0)
os.read(r, 1)
stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
status = dict(line.split(":\t", 1) for line in open(f"/proc/{pid}/status").read().splitlines()
              if ":\t" in line)
print(json.dumps({"affinity": sorted(os.sched_getaffinity(pid)), "mine": min(os.sched_getaffinity(0)),
                  "pgid": os.getpgid(pid), "pid": pid, "stat_pgrp": int(stat[2]),
                  "status_cpus": status["Cpus_allowed_list"].strip(),
                  "tasks": os.listdir(f"/proc/{pid}/task")}))
os.kill(pid, 9)
""",
    "nodump": r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
secret = ctypes.create_string_buffer(b"expected")
found = {}
for dumpable in (1, 0):
    libc.prctl(4, dumpable, 0, 0, 0)  # PR_SET_DUMPABLE, as a harness does before it forks
    r, w = os.pipe()
    if os.fork() == 0:
        libc.prctl(4, 1, 0, 0, 0)  # the child making itself dumpable changes nothing for the parent
        try:
            with open(f"/proc/{os.getppid()}/mem", "rb") as f:
                f.seek(ctypes.addressof(secret))
                got = f.read(8).decode()
        except OSError as exc:
            got = type(exc).__name__
        os.write(w, got.encode())
        os._exit(0)
    os.close(w)
    found[f"dumpable_{dumpable}"] = os.read(r, 100).decode()
    os.wait()
print(json.dumps(found))
""",
    "realtime": r"""
import errno, json, os
found = {}
for name, policy in (("fifo", os.SCHED_FIFO), ("rr", os.SCHED_RR)):
    try:
        os.sched_setscheduler(0, policy, os.sched_param(1))
        found[name] = "allowed"
    except OSError as exc:
        found[name] = errno.errorcode.get(exc.errno)
try:
    os.nice(-1)
    found["nice"] = "allowed"
except OSError as exc:
    found["nice"] = errno.errorcode.get(exc.errno)
print(json.dumps(found))
""",
    "udp": r"""
import errno, json, socket, sys
def udp_pages():
    with open("/proc/net/sockstat") as f:  # the host's count: memory is not per namespace
        fields = next(line for line in f if line.startswith("UDP:")).split()
    return int(fields[fields.index("mem") + 1])
before = udp_pages()
tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
tx.setblocking(False)
queues = []
for _ in range(int(sys.argv[1])):  # queues nobody reads, each asking for a huge buffer
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 30)
    queues.append(rx)
    for _ in range(100):
        try:
            tx.sendto(b"\0" * 60000, rx.getsockname())
        except OSError:
            break
held = (udp_pages() - before) * 4096 >> 20
print(json.dumps({"held_mb": held, "queues": len(queues)}), flush=True)
""",
    "fds": r"""
import errno, json, os, resource
found = {"nofile": list(resource.getrlimit(resource.RLIMIT_NOFILE))}
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 16, 1 << 16))
    found["raised"] = True
except (ValueError, OSError):
    found["raised"] = False
fds = []
try:
    while True:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as exc:
    found["stop"] = errno.errorcode.get(exc.errno)
found["opened"] = len(fds)
print(json.dumps(found))
""",
    "privileges": r"""
import ctypes, errno, json, os, socket, subprocess, sys
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines()
              if ":\t" in line)
found = {k: status[k].strip() for k in ("NoNewPrivs", "CapEff", "CapPrm", "CapBnd", "CapAmb")}
for tool, args in (("mount", ["-t", "tmpfs", "x", "/tmp"]), ("su", ["-c", "id -u"])):
    try:
        found[tool] = subprocess.run([f"/usr/bin/{tool}", *args], capture_output=True,
                                     stdin=subprocess.DEVNULL).returncode
    except FileNotFoundError:  # the host's tools are not in the sandbox (review N-11)
        found[tool] = "absent"
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("\0" + sys.argv[1])  # an abstract socket the host listens on
    found["abstract"] = "connected"
except OSError as exc:
    found["abstract"] = errno.errorcode.get(exc.errno)
libc = ctypes.CDLL(None, use_errno=True)
q = libc.msgget(int(sys.argv[2]), 0)  # a SysV message queue the host made
found["sysv_queue"] = "found" if q >= 0 else errno.errorcode.get(ctypes.get_errno())
try:  # terminals come from a pool the whole host shares (kernel.pty.max)
    os.close(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY))
    found["pty"] = "opened"
except OSError as exc:
    found["pty"] = errno.errorcode.get(exc.errno)
print(json.dumps(found))
""",
    "orphan": r"""
import os, time
if os.fork() == 0:  # setsid and a double fork: the classic daemon, with no pipe left open
    os.setsid()
    if os.fork() == 0:
        os.closerange(0, 3)
        time.sleep(600)
    os._exit(0)
print(os.getuid(), flush=True)
""",
    "fill": r"""
import errno, json
found = {}
for folder in ("/tmp", "/dev/shm"):
    written = 0
    try:
        for i in range(10_000):
            with open(f"{folder}/f{i}", "wb") as f:
                for _ in range(8):
                    written += f.write(b"x" * (1 << 20))
    except OSError as exc:
        found[folder] = [written >> 20, errno.errorcode.get(exc.errno)]
print(json.dumps(found), flush=True)
""",
    "gloo": r"""
import os, socket, sys
import torch, torch.distributed as dist
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
children = []
for rank in range(2):
    pid = os.fork()
    if pid == 0:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
        t = torch.full((256,), float(rank + 1))
        dist.all_reduce(t)
        print(f"rank {rank}: {t[0].item()}", flush=True)
        dist.destroy_process_group()
        os._exit(0)
    children.append(pid)
sys.exit(max(os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in children))
""",
}


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("payloads")
    for name, text in PAYLOADS.items():
        (folder / f"{name}.py").write_text(text)
    return folder


def run(harness: Path, name: str, *args: str, limits: Limits = SMALL, mode: str = "bwrap",
        **kw) -> sandbox.Outcome:
    return run_python(name, list(args), files=kw.pop("files", {}), limits=limits, mode=mode,
                      harness=harness, **kw)


def report(outcome: sandbox.Outcome) -> dict:
    assert outcome.stdout, outcome.stderr.decode(errors="replace")[-2000:]
    return json.loads(outcome.stdout.splitlines()[-1])


def uid_tasks(uid: int) -> list[int]:
    """Pids (threads included) on the host whose real uid is ``uid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                for line in (entry / "status").read_text().splitlines():
                    if line.startswith("Uid:") and int(line.split()[1]) == uid:
                        found.append(int(entry.name))
            except (OSError, ValueError):
                continue
    return found


def none_left(uid: int, wait: float = 10.0) -> bool:
    """True once no process of ``uid`` is left (a bounded wait for the kernel to reap)."""
    deadline = time.monotonic() + wait
    while uid_tasks(uid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def our_cgroups(pid: int) -> list[Path]:
    return [p for parent in (sandbox_limits.Cgroup.parents() or {}).values()
            for p in parent.glob(f"dpa-sandbox-{pid}-*")]


# --- the mode and the environment ------------------------------------------------------------

def test_the_mode_is_bwrap_unless_none_is_asked_for_by_name(monkeypatch):
    monkeypatch.delenv("EXERCISE_SANDBOX", raising=False)
    assert sandbox.mode() == "bwrap"
    monkeypatch.setenv("EXERCISE_SANDBOX", "none")
    assert sandbox.mode() == "none"
    monkeypatch.setenv("EXERCISE_SANDBOX", "off")
    with pytest.raises(SandboxUnavailable, match="EXERCISE_SANDBOX"):
        sandbox.mode()


def test_a_missing_bwrap_refuses_and_never_falls_back_to_none(monkeypatch, harness):
    monkeypatch.delenv("EXERCISE_SANDBOX", raising=False)
    monkeypatch.setattr(sandbox, "_checked", {})
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SandboxUnavailable) as caught:
        run_python("report", [], files={}, harness=harness)
    assert "bwrap is not installed" in caught.value.reason
    assert "apt-get install bubblewrap" in caught.value.reason


def test_limits_read_their_overrides_from_the_environment(harness, monkeypatch):
    for name in Limits.model_fields:
        monkeypatch.delenv(f"EXERCISE_{name.upper()}", raising=False)
    monkeypatch.setenv("EXERCISE_MEMORY_MB", "512")
    monkeypatch.setenv("EXERCISE_WALL_S", "2.5")
    limits = Limits.from_env(cpu_s=7)
    assert (limits.memory_mb, limits.wall_s, limits.cpu_s) == (512, 2.5, 7)
    assert limits.processes == Limits.model_fields["processes"].default == 64
    # A caller that passes no limits gets the operator's.
    monkeypatch.setenv("EXERCISE_WALL_S", "0.5")
    out = run_python("loop", [], files={}, mode="none", harness=harness)
    assert out.stopped == "wall_time"


def test_one_settings_class_reads_the_sandbox_for_the_app_and_the_grader(tmp_path, monkeypatch):
    """``EXERCISE_*`` from the environment or ``.env`` reach ``Settings.exercises`` and the
    sandbox alike; the worker hands what was set to the grading command; a bad value is
    an error that names its variable."""
    from academy.settings import Settings
    from labs.exercises.grader import run_limits
    from labs.settings import SettingError

    for name in Limits.model_fields:
        monkeypatch.delenv(f"EXERCISE_{name.upper()}", raising=False)
    (tmp_path / ".env").write_text("EXERCISE_MEMORY_MB=700\nEXERCISE_SANDBOX=none\n")
    monkeypatch.chdir(tmp_path)
    assert Settings().exercises == Limits.from_env() == Limits(memory_mb=700, sandbox="none")
    assert sandbox.mode() == "none" and run_limits(1, 5.0).memory_mb == 700
    monkeypatch.setenv("EXERCISE_PROCESSES", "33")  # the environment wins over .env, as for every setting
    monkeypatch.setenv("EXERCISE_SANDBOX", "bwrap")
    assert Settings().exercises.processes == Limits.from_env().processes == run_limits(1, 5.0).processes == 33
    assert sandbox.mode() == "bwrap"
    # Only what the operator set travels, so that the grader still fits its wall clock.
    assert Settings().exercises.environ() == {"EXERCISE_MEMORY_MB": "700", "EXERCISE_PROCESSES": "33",
                                              "EXERCISE_SANDBOX": "bwrap"}
    assert run_limits(1, 5.0).wall_s == 30.0
    monkeypatch.setenv("EXERCISE_WALL_S", "12.5")
    assert run_limits(1, 5.0).wall_s == 12.5
    monkeypatch.setenv("EXERCISE_PROCESSES", "many")
    for read in (Settings, Limits.from_env, lambda: run_limits(1, 5.0)):
        with pytest.raises(SettingError, match="EXERCISE_PROCESSES='many'"):
            read()
    with pytest.raises(SandboxUnavailable, match="EXERCISE_PROCESSES"):
        sandbox.mode()


def test_ci_has_a_sandbox():
    if not os.environ.get("CI"):
        pytest.skip("only CI must have bwrap (it runs as root and installs it)")
    sandbox.check_available("bwrap")


@pytest.mark.parametrize("mode", [pytest.param("bwrap", marks=pytest.mark.needs_sandbox), "none"])
def test_the_program_sees_its_files_and_a_cleared_environment(harness, monkeypatch, mode):
    monkeypatch.setenv("DPA_FAKE_SECRET", "hunter2-in-the-host-env")
    lines = []
    out = run(harness, "report", mode=mode, files={"submission.py": b"x = 1\n"},
              on_line=lines.append)
    assert out.returncode == 0 and out.stopped is None and out.mode == mode
    found = report(out)
    assert lines == [out.stdout.rstrip(b"\n")]  # on_line got the line, without its newline
    assert set(found["env"]) - {"PWD", "LD_LIBRARY_PATH"} == {
        "PATH", "HOME", "LANG", "OMP_NUM_THREADS", "GLOO_SOCKET_IFNAME", "PYTHONDONTWRITEBYTECODE",
        "SANDBOX_INPUT", "PYTHONPATH"}
    assert found["files"] == {"submission.py": "x = 1\n"}
    assert "hunter2" not in out.stdout.decode()
    assert found["env"]["HOME"] == found["cwd"]
    if mode == "bwrap":
        assert found["cwd"] == "/tmp" and found["env"]["SANDBOX_INPUT"] == "/opt/input"
        if os.geteuid() == 0:
            assert found["uid"] >= sandbox_limits.UID_BASE  # not root, a uid of its own


@pytest.mark.parametrize("mode", [pytest.param("bwrap", marks=pytest.mark.needs_sandbox), "none"])
def test_stdin_larger_than_a_pipe_reaches_the_program(harness, mode):
    import hashlib
    data = os.urandom(300 * KiB)
    out = run(harness, "echo", mode=mode, stdin=data)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(len(data)).encode(), hashlib.sha256(data).hexdigest().encode()]


# --- network ---------------------------------------------------------------------------------

@pytest.mark.needs_sandbox
def test_the_network_is_loopback_only_and_not_the_hosts(harness):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        accepted = []

        def accept():
            with contextlib.suppress(OSError):
                accepted.append(listener.accept())
        waiter = threading.Thread(target=accept)
        waiter.start()
        out = run(harness, "network", str(port))
        waiter.join()
        found = report(out)
        assert accepted == [], "the sandboxed program reached the host's listener"
    assert found["interfaces"] == ["lo"]
    assert found["host_listener"] == "ECONNREFUSED"  # its own loopback, where nobody listens
    assert found["outside"] == "ENETUNREACH"  # no route: nothing left the namespace


@pytest.mark.needs_sandbox
def test_a_program_started_ahead_of_its_input_is_as_confined_and_its_clock_starts_with_run(harness):
    """`sandbox.start_python` (the warm grader's sandbox, started long before the submission):
    the same loopback-only network and the same missing host files as `run_python`, a file
    put in after the start is seen, and the wait before `run` is not on the wall clock."""
    paths = [str(ROOT / "labs" / "sandbox.py"), os.environ["SECRETS_DIR"], sys.prefix]
    nothing, never_written = os.pipe()
    try:
        with sandbox.start_python("later", [], limits=Limits(memory_mb=256, processes=16, file_size_mb=1, cpu_s=10, wall_s=3,
                                                                output_bytes=64 * KiB, tmpfs_mb=16), mode="bwrap",
                                  harness=harness) as started:
            assert not started.wait(nothing, 4.0) and started.alive(), "waited past its wall clock"
            started.put("submission.py", b"x = 1\n")
            out = started.run(stdin=f"read {' '.join(paths)}\nnetwork {free_port()}\n".encode())
    finally:
        os.close(nothing)
        os.close(never_written)
    assert out.stopped is None and out.returncode == 0, out.stderr.decode(errors="replace")[-2000:]
    before, found, net, after = (json.loads(line) for line in out.stdout.splitlines())
    assert (before, after) == ([], ["submission.py"])
    assert found == dict.fromkeys(paths, "FileNotFoundError")
    assert net["interfaces"] == ["lo"] and net["outside"] == "ENETUNREACH"


# --- the host's files and processes ----------------------------------------------------------

@pytest.mark.needs_sandbox
def test_secrets_database_and_project_files_are_out_of_reach(harness, tmp_path):
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "issuer.key").write_text("PRIVATE KEY of the issuer")
    db = tmp_path / "academy.db"
    import sqlite3
    with sqlite3.connect(db) as conn:
        conn.execute("create table learner (email text)")
        conn.execute("insert into learner values ('ada@example.org')")
    reference = ROOT / "labs" / "sandbox.py"
    paths = [str(secrets / "issuer.key"), str(secrets), str(db), str(reference), str(ROOT),
             os.environ["SECRETS_DIR"], os.environ["DATABASE_URL"].removeprefix("sqlite:///"),
             sys.prefix, "/root"]
    found = report(run(harness, "read", *paths))
    assert set(found) == set(paths)
    # Not "permission denied": none of it exists in the sandbox at all.
    assert found == dict.fromkeys(paths, "FileNotFoundError")


@pytest.mark.needs_sandbox
def test_a_layout_that_would_bind_the_project_in_is_refused(harness, monkeypatch, tmp_path):
    """The project (its data/ holds the database and the secrets by default)
    inside a folder we bind, or a copy of our packages among the site-packages
    (the reference solutions with it): refused rather than run."""
    python, site = sandbox_layout.python_layout()
    stdlib = next(host for host, inside in python if inside.startswith("/opt/python/lib/python"))
    monkeypatch.setattr(sandbox_layout, "ROOT", stdlib / "dp-academy")
    with pytest.raises(SandboxUnavailable, match="project"):
        run(harness, "report")
    monkeypatch.setattr(sandbox_layout, "ROOT", ROOT)
    installed = tmp_path / "site-packages"
    (installed / "labs" / "exercises").mkdir(parents=True)
    monkeypatch.setattr(sandbox_layout, "python_layout", lambda: (python, installed))
    with pytest.raises(SandboxUnavailable, match="site-packages"):
        run(harness, "report")


# What the sandbox may show of /usr and of the interpreter (review N-11): the libraries and
# setpriv, the interpreter's binary, standard library and libpython; never the host's tools
# or their configuration (/usr/local/etc and /usr/etc held an npmrc, /usr/local/bin docker).
HIDDEN = ["/usr/local", "/usr/local/etc", "/usr/local/bin/docker", "/usr/etc", "/usr/etc/npmrc",
          "/usr/share", "/usr/share/doc", "/usr/include", "/usr/sbin", "/usr/bin/python3",
          "/bin/sh", "/opt/python/etc", "/opt/python/local", "/opt/python/share",
          "/opt/python/include"]
SHOWN = ["/usr", "/usr/lib", "/usr/bin", "/opt/python", "/opt/python/bin"]


def check_view(found: dict, *, root: bool) -> None:
    assert {p: found[p] for p in HIDDEN} == dict.fromkeys(HIDDEN, "absent")
    assert found["/opt/python"] == ["bin", "lib"]
    assert found["/opt/python/bin"] == [f"python{sys.version_info.major}.{sys.version_info.minor}"]
    under = {Path(f).relative_to("/usr").parts for f in sandbox_layout.system_libraries()}
    assert found["/usr"] == sorted({p[0] for p in under} | ({"bin"} if root else set()))
    assert found["/usr/lib"] == sorted({p[1] for p in under if len(p) > 1})
    assert found["/usr/bin"] == (["setpriv"] if root else "absent")


@pytest.mark.needs_sandbox
def test_of_usr_only_the_libraries_and_of_the_interpreter_only_its_own_files(harness):
    check_view(report(run(harness, "view", *SHOWN, *HIDDEN)), root=os.geteuid() == 0)


@pytest.mark.needs_sandbox
@pytest.mark.skipif(not os.path.exists("/usr/bin/python3.11") or sys.version_info[:2] != (3, 11),
                    reason="needs the system's python3.11 (Debian's), prefix /usr")
def test_a_system_python_whose_prefix_is_usr_shows_no_more(harness):
    """Debian's python3 has /usr as its prefix: binding the prefix (as the
    sandbox did for any interpreter) showed all of /usr again at /opt/python."""
    code = ("import sys; from pathlib import Path; from labs.sandbox import run as sandbox; "
            "out = sandbox.run_python('view', sys.argv[2:], files={}, mode='bwrap', "
            "harness=Path(sys.argv[1]), limits=sandbox.Limits(wall_s=30)); "
            "sys.stdout.buffer.write(out.stdout); sys.stderr.buffer.write(out.stderr)")
    # The sandbox's own side reads its settings with pydantic, from our virtualenv; what the
    # program sees is what the sandbox binds for this interpreter.
    path = os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]])
    done = subprocess.run(["/usr/bin/python3.11", "-s", "-c", code, str(harness), *SHOWN, *HIDDEN],
                          capture_output=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": path},
                          timeout=120)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    check_view(json.loads(done.stdout.splitlines()[-1]), root=os.geteuid() == 0)


@pytest.mark.needs_sandbox
def test_proc_shows_only_the_sandbox(harness):
    found = report(run(harness, "proc", str(os.getpid())))
    assert found["pids"] == [1, found["me"]]  # bwrap's init and the program, nothing of ours
    assert found["environ"] == "FileNotFoundError" and found["cmdline"] == "FileNotFoundError"
    assert "DATABASE_URL" not in found["init_environ"]


@pytest.mark.needs_sandbox
def test_writes_stay_in_tmp_and_files_stop_at_the_size_limit(harness):
    targets = ["/", "/usr", "/etc", "/opt", "/opt/input", "/opt/harness", "/opt/python",
               str(harness), str(ROOT)]
    out = run(harness, "write", *targets, files={"submission.py": b""})
    found = report(out)
    assert {t: found[t] for t in targets} == {
        t: found[t] for t in targets if found[t] in ("EROFS", "EACCES", "EPERM", "ENOENT")}
    assert found["big"] == "EFBIG" and found["big_size"] == SMALL.file_size_mb << 20
    assert not (harness / "pwned").exists() and not (ROOT / "pwned").exists()


@pytest.mark.needs_sandbox
@pytest.mark.skipif(not seccomp.supported(), reason="no seccomp filter for this CPU architecture")
def test_no_user_namespace_of_its_own_and_no_ptrace(harness):
    found = report(run(harness, "nested"))
    # clone3 hides its flags from the filter: refused as if the kernel lacked it.
    assert found == {"unshare_user": "EPERM", "ptrace_child": "EPERM", "unshare_tool": "absent",
                     "fork": 3, "clone3": "ENOSYS"}


@pytest.mark.needs_sandbox
@pytest.mark.skipif(not seccomp.supported(), reason="no seccomp filter for this CPU architecture")
def test_only_internet_unix_and_netlink_sockets_and_no_reading_a_neighbour(harness):
    """AF_VSOCK is not in the network namespace (it reaches the hypervisor), and
    the rarer families are where kernel bugs are (their modules load on demand).
    A rank may not read or write another's memory nor take its fds."""
    found = report(run(harness, "families"))
    assert found == {"vsock": "EAFNOSUPPORT", "alg": "EAFNOSUPPORT", "tipc": "EAFNOSUPPORT",
                     "vsock_pair": "EAFNOSUPPORT", "unix": "created", "inet": "created",
                     "inet6": "created", "netlink": "created", "process_vm_readv": "EPERM",
                     "process_vm_writev": "EPERM", "pidfd_getfd": "EPERM"}


@pytest.mark.needs_sandbox
def test_the_covert_channel_primitives_the_docs_list_are_there_also_through_proc(harness):
    """Not a wish, a record (review N-17): what docs/contributors/sandbox.md says
    stays open inside one run, and why refusing the calls would not close it."""
    found = report(run(harness, "channel"))
    pid, cpu = found["pid"], found["mine"]
    assert found == {"affinity": [cpu], "mine": cpu, "pgid": pid, "pid": pid, "stat_pgrp": pid,
                     "status_cpus": str(cpu), "tasks": [str(pid)]}


@pytest.mark.needs_sandbox
def test_a_non_dumpable_parent_keeps_its_memory_from_its_children(harness):
    """What docs/contributors/sandbox.md tells a harness to do: /proc/PID/mem of a same-uid
    process is readable (no filter sees it) until that process says no."""
    assert report(run(harness, "nodump")) == {"dumpable_1": "expected",
                                               "dumpable_0": "PermissionError"}


@pytest.mark.needs_sandbox
@as_root
def test_no_privileges_and_nothing_the_host_shares_by_name(harness):
    """no-new-privs and no capabilities (a setuid binary would stay
    powerless; the host's, such as mount and su, are not even there); abstract unix sockets and SysV IPC are the host's own; no
    terminals, which come from one pool for the whole host."""
    import ctypes
    name = f"dpa-redteam-{os.getpid()}"
    key = 0x5EED0000 + os.getpid() % 0xFFFF
    libc = ctypes.CDLL(None, use_errno=True)
    queue = libc.msgget(key, 0o1600)  # IPC_CREAT, owner-only
    assert queue >= 0
    try:
        with socket.socket(socket.AF_UNIX) as listener:
            listener.bind("\0" + name)
            listener.listen(1)
            found = report(run(harness, "privileges", name, str(key)))
    finally:
        libc.msgctl(queue, 0, None)  # IPC_RMID
    zero = "0000000000000000"
    assert found == {"NoNewPrivs": "1", "CapEff": zero, "CapPrm": zero, "CapBnd": zero,
                     "CapAmb": zero, "mount": "absent", "su": "absent",
                     "abstract": "ECONNREFUSED", "sysv_queue": "ENOENT", "pty": "ENOENT"}


def run_filter(program: bytes, arch: int, nr: int, arg0: int = 0) -> tuple[str, int]:
    """What the kernel would do with one call under our classic BPF program: a
    small interpreter for the four instructions `labs.sandbox.seccomp`'s programs use."""
    import struct
    data = struct.pack("=iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    insns = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # BPF_LD|BPF_W|BPF_ABS
            acc = struct.unpack_from("=I", data, k)[0]
        elif code in (0x15, 0x45):  # BPF_JMP|BPF_JEQ|BPF_K, BPF_JMP|BPF_JSET|BPF_K
            hit = acc == k if code == 0x15 else bool(acc & k)
            pc += jt if hit else jf
        elif code == 0x06:  # BPF_RET|BPF_K
            action = {0x7FFF0000: "allow", 0x80000000: "kill"}.get(k & 0xFFFF0000, "errno")
            return action, k & 0xFFFF
        else:
            raise AssertionError(f"unknown instruction {code:#x}")
        pc += 1


@pytest.mark.skipif(not seccomp.supported(), reason="no seccomp filter for this CPU architecture")
def test_the_seccomp_filter_decides_each_call_as_documented():
    """The filter itself, on any kernel: some of its branches (x32, say) only
    matter where the kernel would otherwise run the call."""
    import errno
    import platform
    arch, nrs = seccomp.AUDIT_ARCH[platform.machine()], seccomp.numbers()
    program = seccomp.sandbox_program()

    def decide(nr, arg0=0, on=arch):
        return run_filter(program, on, nr, arg0)
    assert decide(nrs["clone"] + 1000) == ("allow", 0)  # not a call we name
    assert decide(39, on=0x40000003) == ("kill", 0)  # i386 numbers from an x86_64 process
    assert decide(nrs["unshare"]) == ("errno", errno.EPERM)
    assert decide(nrs["process_vm_readv"]) == ("errno", errno.EPERM)
    assert decide(nrs["clone3"]) == ("errno", errno.ENOSYS)
    assert decide(nrs["clone"], 17) == ("allow", 0)  # fork
    assert decide(nrs["clone"], 17 | seccomp.CLONE_NEWUSER) == ("errno", errno.EPERM)
    for call in ("socket", "socketpair"):
        for family in (1, 2, 10, 16):
            assert decide(nrs[call], family) == ("allow", 0)
        for family in (40, 38, 30, 21, 0):  # vsock, alg, tipc, rds, unspec
            assert decide(nrs[call], family) == ("errno", errno.EAFNOSUPPORT)
    if arch == 0xC000003E:
        assert decide(0x40000000 | nrs["unshare"]) == ("errno", errno.ENOSYS)  # x32


# --- resource limits -------------------------------------------------------------------------

@pytest.mark.needs_sandbox
@as_root
def test_a_fork_bomb_hits_the_process_limit_and_the_host_can_still_fork(harness):
    out = run(harness, "forkbomb", limits=Limits(processes=12, wall_s=2, cpu_s=5, memory_mb=256))
    assert out.stopped == "processes" and out.returncode is None, out.details
    uid = int(out.stdout.split()[0])
    assert none_left(uid)
    assert subprocess.run(["true"], check=False).returncode == 0
    assert our_cgroups(os.getpid()) == []


@pytest.mark.needs_sandbox
@as_root
def test_a_memory_bomb_is_killed_by_the_memory_limit(harness):
    out = run(harness, "membomb", limits=Limits(memory_mb=96, wall_s=20))
    assert out.stopped == "memory", (out.returncode, out.details, out.stderr[-500:])
    assert out.returncode == -signal.SIGKILL and out.details["oom_kill"] >= 1
    assert bytearray(64 << 20)  # and the host can still allocate


@pytest.mark.needs_sandbox
@as_root
def test_no_realtime_priority_even_where_the_server_may_have_one(harness):
    """A SCHED_FIFO spinner on each core would starve the server: the run gets
    RLIMIT_RTPRIO and RLIMIT_NICE of 0, not what the server was started with."""
    import resource
    # What prlimit sets, whatever this host allows (raising our own limits
    # below needs CAP_SYS_RESOURCE, which a container's root may lack).
    opts = sandbox_limits.rlimits(SMALL, nproc=True, memory=False)
    assert "--rtprio=0" in opts and "--nice=0" in opts
    saved = {r: resource.getrlimit(r) for r in (resource.RLIMIT_RTPRIO, resource.RLIMIT_NICE)}
    try:
        resource.setrlimit(resource.RLIMIT_RTPRIO, (50, 50))  # as systemd's LimitRTPRIO= would
        resource.setrlimit(resource.RLIMIT_NICE, (40, 40))
    except (ValueError, OSError):
        pytest.skip("cannot raise our own RLIMIT_RTPRIO here (no CAP_SYS_RESOURCE)")
    try:
        found = report(run(harness, "realtime"))
    finally:
        for r, value in saved.items():
            resource.setrlimit(r, value)
    assert found == {"fifo": "EPERM", "rr": "EPERM", "nice": "EPERM"}


@pytest.mark.needs_sandbox
def test_an_endless_loop_is_stopped_by_the_wall_clock(harness):
    out = run(harness, "loop", limits=Limits(wall_s=1, cpu_s=30))
    assert out.stopped == "wall_time" and out.returncode is None
    assert out.stdout == b"looping\n"


@pytest.mark.needs_sandbox
def test_the_cpu_limit_ends_a_program_that_spins(harness):
    out = run(harness, "loop", limits=Limits(cpu_s=1, wall_s=20))
    assert out.stopped == "cpu_time" and out.returncode == -signal.SIGXCPU, out.details


@pytest.mark.needs_sandbox
@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_flood_of_output_stops_at_the_cap(harness, stream):
    lines = []
    out = run(harness, "flood", stream, on_line=lines.append)
    assert out.stopped == "output" and out.returncode is None
    flooded, quiet = (out.stdout, out.stderr) if stream == "stdout" else (out.stderr, out.stdout)
    assert len(flooded) == SMALL.output_bytes  # kept up to the cap, the rest never buffered
    assert flooded.startswith(b"first line\n") and quiet == b""
    assert lines == ([b"first line"] if stream == "stdout" else [])[:len(lines)]


@pytest.mark.needs_sandbox
@as_root
def test_tmpfs_counts_against_the_memory_limit(harness):
    """/tmp and /dev/shm live in RAM: filling both (2 x 64 MiB) must end in the
    run's memory limit (96 MiB), not in host memory nobody accounts for."""
    out = run(harness, "fill", limits=Limits(memory_mb=96, tmpfs_mb=64, file_size_mb=16, wall_s=20))
    assert out.stopped == "memory", (out.stdout, out.details)


@pytest.mark.needs_sandbox
@as_root
def test_socket_buffers_count_against_the_memory_limit(harness):
    """UDP queues nobody reads, each asking for a huge buffer: cgroup v1 leaves
    socket memory out of the memory limit unless told (v2 counts it there)."""
    limits = Limits(memory_mb=128, wall_s=20)
    out = run(harness, "udp", "200", limits=limits)
    if out.stopped != "memory":  # v2: the same memory.max ends it
        found = report(out)
        assert found["queues"] == 200
        assert found["held_mb"] <= limits.memory_mb // 2, found  # a quarter, and a margin


@pytest.mark.needs_sandbox
def test_open_files_are_capped_and_cannot_be_raised(harness):
    found = report(run(harness, "fds", limits=Limits(open_files=64)))
    assert found == {"nofile": [64, 64], "raised": False, "stop": "EMFILE",
                     "opened": found["opened"]}
    assert 50 < found["opened"] < 64


# --- other runs and the server ---------------------------------------------------------------

def program_pids(module: str) -> list[int]:
    """Host pids of sandboxed interpreters running ``-m module`` (not bwrap's init)."""
    return [pid for pid, args in command_lines()
            if args[0].startswith(b"/opt/python/") and args[-3:] == [b"-m", module.encode(), b""]]


@pytest.mark.needs_sandbox
@pytest.mark.xdist_group("procs")  # finds run A by its command line
def test_killing_parent_and_everyone_reaches_only_its_own_sandbox(harness):
    """Run A holds a file and waits; run B, meanwhile, looks for A and kills
    everything it can. A must finish untouched, and so must the host."""
    ready = threading.Event()
    a_result = {}

    def run_a():
        a_result["out"] = run(harness, "neighbour", on_line=lambda _: ready.set(),
                              limits=Limits(wall_s=40))
    sentinel = subprocess.Popen(["sleep", "60"])  # a host process B must not reach
    a = threading.Thread(target=run_a)
    a.start()
    try:
        assert ready.wait(30), "run A did not start"
        found = report(run(harness, "killer"))
        assert found["tmp"] == []  # A's /tmp/mine is not in B's /tmp
        assert len(found["pids"]) == 2 and found["pids"][0] == 1  # init and B: A is not visible
        # Its parent is bwrap's init (root): refused. kill(-1) finds nobody it may signal.
        assert found["parent"] == found["init"] == "PermissionError"
        assert found["everyone"] in ("sent", "ProcessLookupError")
        assert sentinel.poll() is None  # kill(-1, 9) did not reach the host
    finally:
        for pid in program_pids("neighbour"):  # wake A (a bounded wait of its own otherwise)
            os.kill(pid, signal.SIGUSR1)
        a.join(60)
        sentinel.kill()
        sentinel.wait()
    a_out = a_result["out"]
    assert a_out.returncode == 0 and a_out.stopped is None, a_out.stderr
    assert json.loads(a_out.stdout.splitlines()[-1]) == {"still_mine": "secret of run A",
                                                         "woken": True}


@as_root
def test_runs_started_with_different_tmpdirs_still_get_different_uids(tmp_path, monkeypatch):
    """The lab worker's tests give it a TMPDIR of its own: its runs and ours
    must still not share a uid (nor its process count)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "a"))
    (tmp_path / "a").mkdir()
    with sandbox_limits.slot() as first:
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "b"))
        (tmp_path / "b").mkdir()
        with sandbox_limits.slot() as second:
            assert first != second


def test_a_slot_folder_someone_else_can_write_is_refused(tmp_path):
    (tmp_path / "dpa-sandbox-slots").mkdir(mode=0o777)
    (tmp_path / "dpa-sandbox-slots").chmod(0o777)  # past the umask
    with pytest.raises(SandboxUnavailable, match="not a folder of ours alone"):
        sandbox_limits.slot_locks(tmp_path)
    (tmp_path / "dpa-sandbox-slots").chmod(0o700)
    assert sandbox_limits.slot_locks(tmp_path) == tmp_path / "dpa-sandbox-slots"


@pytest.mark.needs_sandbox
def test_nothing_is_left_behind_after_the_wall_clock_kill(harness):
    out = run(harness, "lingering", limits=Limits(wall_s=1.5))
    assert out.stopped == "wall_time"
    if os.geteuid() == 0:
        assert none_left(int(out.stdout.split()[0]))
        assert our_cgroups(os.getpid()) == []


@pytest.mark.needs_sandbox
@as_root
def test_a_daemon_the_program_leaves_behind_ends_with_it(harness):
    """setsid and a double fork, pipes closed: the run ends when the program
    does (not at the wall clock), and the daemon with it."""
    out = run(harness, "orphan", limits=Limits(wall_s=30))
    assert out.returncode == 0 and out.stopped is None
    assert none_left(int(out.stdout.split()[0]))


@pytest.mark.needs_sandbox
@as_root
def test_a_failing_on_line_still_takes_the_sandbox_down(harness):
    seen = []

    def on_line(line: bytes) -> None:
        seen.append(int(line))
        raise RuntimeError("the caller broke")
    with pytest.raises(RuntimeError, match="the caller broke"):
        run(harness, "lingering", on_line=on_line, limits=Limits(wall_s=60))
    assert none_left(seen[0])
    assert our_cgroups(os.getpid()) == []


@pytest.mark.needs_sandbox
@as_root
def test_the_sandbox_dies_with_the_process_that_started_it(harness):
    code = ("import sys; from pathlib import Path; from labs.sandbox.run import Limits, run_python; "
            "run_python('lingering', [], files={}, harness=Path(sys.argv[1]), mode='bwrap', "
            "limits=Limits(wall_s=120), on_line=lambda l: print(l.decode(), flush=True))")
    host = subprocess.Popen([sys.executable, "-c", code, str(harness)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    try:
        uid = int(host.stdout.readline())
        assert uid_tasks(uid), "the sandbox should be running"
        host.send_signal(signal.SIGKILL)  # no cleanup of ours runs
        host.wait()
        assert none_left(uid), f"uid {uid} still has {uid_tasks(uid)}"
    finally:
        host.kill()
        host.wait()
        host.stdout.close()
    # What the killed caller could not clean up is swept by the next run.
    left = our_cgroups(host.pid) + list(Path(tempfile.gettempdir()).glob(f"dpa-sandbox-{host.pid}-*"))
    run(harness, "loop", limits=Limits(wall_s=0.5))
    assert [p for p in left if p.exists()] == []


# --- a real workload -------------------------------------------------------------------------

@pytest.mark.needs_sandbox
def test_torch_and_two_gloo_ranks_run_inside_the_default_limits(harness):
    out = run(harness, "gloo", limits=Limits(wall_s=60))
    assert out.returncode == 0 and out.stopped is None, out.stderr.decode()[-2000:]
    assert sorted(out.stdout.decode().split("\n")[:2]) == ["rank 0: 3.0", "rank 1: 3.0"]


# --- finding the cgroup (v1 here; v2-only hosts are read from the same files) --------------

def fake_cgroup_fs(tmp_path: Path, v2_controllers: str) -> tuple[str, str]:
    """/proc/self/cgroup and mountinfo texts of a host with v1 memory/pids
    hierarchies under tmp_path/v1 and a cgroup2 mount at tmp_path/v2."""
    for d in ("v1/memory/app", "v1/pids/app", "v2/app"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "v2/app/cgroup.controllers").write_text(v2_controllers)
    (tmp_path / "v2/app/cgroup.subtree_control").write_text("")
    mountinfo = "\n".join([
        f"30 25 0:26 / {tmp_path}/v1/memory rw,nosuid - cgroup cgroup rw,memory",
        f"31 25 0:27 / {tmp_path}/v1/pids rw,nosuid - cgroup cgroup rw,pids",
        f"32 25 0:28 / {tmp_path}/v2 rw,nosuid - cgroup2 cgroup2 rw",
    ])
    return "5:memory:/app\n4:pids:/app\n0::/app\n", mountinfo


def test_v1_hierarchies_are_found_where_they_are_mounted(tmp_path):
    cgroups, mountinfo = fake_cgroup_fs(tmp_path, "")
    assert sandbox_limits.find_parents(cgroups, mountinfo) == {
        "memory": tmp_path / "v1/memory/app", "pids": tmp_path / "v1/pids/app"}


def test_a_v2_only_host_gets_one_cgroup_with_both_limits(tmp_path):
    cgroups, mountinfo = fake_cgroup_fs(tmp_path, "cpu memory pids")
    v2_only = "0::/app\n"
    assert sandbox_limits.find_parents(v2_only, mountinfo) == {"v2": tmp_path / "v2/app"}
    parent = tmp_path / "v2/app"
    group = sandbox_limits.Cgroup._make_v2(parent, "dpa-sandbox-1-2", Limits(memory_mb=100, processes=7))
    assert (parent / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert (parent / "dpa-sandbox-1-2/memory.max").read_text() == str(100 << 20)
    assert (parent / "dpa-sandbox-1-2/pids.max").read_text() == "7"
    assert group.wrap(["prog"])[-2:] == ["sh", "prog"]
    assert f'echo $$ > "{parent}/dpa-sandbox-1-2/cgroup.procs"' in group.wrap(["prog"])[2]
    # Without the controllers there, no cgroup: the rlimits stand in.
    (parent / "cgroup.controllers").write_text("cpu io")
    assert sandbox_limits.find_parents(v2_only, mountinfo) is None
