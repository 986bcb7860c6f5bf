"""Red team: submissions that try to get the result, or the answers, some way they may not.

Every route to a collective (the name, ``getattr``, ``distributed_c10d``,
``importlib``, the group and backend objects, ``torch.ops.c10d``, the
functional collectives, ctypes) must end in a clear ``forbidden_call``
finding or error, never a pass; reaching into the harness (frames, gc) in
``guard_refused``. Reading the reference solution or the hidden cases,
through the host's paths or by searching the file system, must find
nothing. Each submission runs one small case on 2 ranks, in the sandbox
mode of ``EXERCISE_SANDBOX`` (bwrap in CI).

The last part is the closed router (issue #35): every channel by which the
router once answered a rank with more than the payloads it counted (a size
mismatch echoed as an error, a meta tensor's size, tags, an any-source
completion, a collective's declared size or source, zero-byte and extra
messages, receives left waiting), each at the router's level without
processes; the property itself, tested with hypothesis; and the
representative attacks graded end to end, with the direct reduce-scatter
and all-gather that passed as a ring.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from labs import exercises
from labs.exercises.__main__ import render
from labs.exercises.grader import grade
from labs.exercises.report import Finding, GradeReport, Problem
from labs.sandbox import run as sandbox
from tests.test_exercises_router import ROOMY, Rank, frames, pump, routing

ROOT = Path(__file__).resolve().parent.parent
CASES = {"ring-allreduce": {"w2-n5-float32"}, "broadcast": {"w2-src1-n6-int64"}}
HEADER = "import torch\nimport torch.distributed as dist\n\n\ndef ring_allreduce(tensor):\n"


def _grade(body: str, exercise_id: str = "ring-allreduce", header: str = HEADER) -> GradeReport:
    lines = "".join(f"    {line}\n" for line in body.strip().splitlines())
    return grade(exercise_id, header + lines + "    return tensor\n", case_ids=CASES[exercise_id])


def _finding(report: GradeReport) -> Finding | Problem:
    """The one failing finding of the one case (or the report's error)."""
    assert report.status != "passed"
    if report.error is not None:
        return report.error
    (case,) = report.cases
    failed = [f for f in case.findings if not f.passed]
    assert failed, case
    return failed[0]


ROUTES = {
    "name": ("dist.all_reduce(tensor)", "dist.all_reduce"),
    "getattr": ('getattr(dist, "all_" + "reduce")(tensor)', "dist.all_reduce"),
    "c10d": ("torch.distributed.distributed_c10d.all_reduce(tensor)", "distributed_c10d.all_reduce"),
    "importlib": ('import importlib\nimportlib.import_module("torch.distributed").all_reduce(tensor)',
                  "dist.all_reduce"),
    "group allreduce": ("dist.group.WORLD.allreduce([tensor]).wait()", "ProcessGroup.allreduce"),
    "group reduce_scatter": ("out = torch.empty(1)\n"
                             "dist.group.WORLD.reduce_scatter([out], [[tensor[:1], tensor[1:2]]]).wait()",
                             "ProcessGroup.reduce_scatter"),
    "group all_gather": ("outs = [torch.empty_like(tensor) for _ in range(2)]\n"
                         "dist.group.WORLD.allgather([outs], [tensor]).wait()", "ProcessGroup.allgather"),
    "group broadcast": ("dist.group.WORLD.broadcast([tensor]).wait()", "ProcessGroup.broadcast"),
    "backend object": ("dist.group.WORLD._get_backend(tensor.device).allreduce([tensor]).wait()",
                       "ProcessGroup._get_backend"),
    "reduce_scatter": ("dist.reduce_scatter_tensor(tensor[:2], torch.cat([tensor, tensor])[:4])",
                       "dist.reduce_scatter_tensor"),
    "torch.ops": ("group = torch.distributed.distributed_c10d._get_default_group()\n"
                  "torch.ops.c10d.allreduce_([tensor], group, None, None, False, -1)",
                  "_get_default_group"),
    "torch.ops namespace": ("torch.ops.c10d.allreduce_([tensor], None, None, None, False, -1)",
                            "torch.ops.c10d.allreduce_"),
    "jit operation": ('torch._C._jit_get_operation("c10d::allreduce_")', "c10d::allreduce_"),
    "ctypes": ('import ctypes\nctypes.CDLL("libc.so.6").getpid()', "ctypes"),
}


@pytest.mark.needs_sandbox
@pytest.mark.parametrize("route", ROUTES)
def test_every_route_to_a_collective_is_a_forbidden_call(route):
    body, call = ROUTES[route]
    report = _grade(body)
    finding = _finding(report)
    assert finding.key == "forbidden_call", finding
    assert call in finding.values["call"]
    assert "which this exercise does not allow" in render(report, "en")


@pytest.mark.needs_sandbox
def test_importing_a_collective_by_name_or_the_functional_collectives_is_refused_too():
    for header, call in (("from torch.distributed import all_reduce\n", "dist.all_reduce"),
                         ("import torch.distributed._functional_collectives\n", "_functional_collectives")):
        body = "all_reduce(tensor)" if "all_reduce" in header else "pass"
        finding = _finding(_grade(body, header=header + HEADER))
        assert finding.key == "forbidden_call", finding
        assert call in finding.values["call"]


@pytest.mark.needs_sandbox
def test_broadcast_by_the_built_in_is_forbidden():
    header = "import torch.distributed as dist\n\n\ndef broadcast(tensor, src):\n"
    finding = _finding(_grade("dist.broadcast(tensor, src)", "broadcast", header=header))
    assert finding.key == "forbidden_call" and finding.values["call"] == "dist.broadcast"


@pytest.mark.needs_sandbox
@pytest.mark.parametrize("body, what", [
    ("import gc\ngc.get_objects()", "gc.get_objects"),
    ("try:\n    1 / 0\nexcept ZeroDivisionError as exc:\n    exc.__traceback__.tb_frame.f_back", "tb_frame"),
    ("import sys\nsys._getframe(1)", "sys._getframe"),
    ("import inspect\ninspect.stack()", "sys._getframe"),
    ("import os\nos.system('true')", "os.system"),
])
def test_reaching_into_the_harness_is_refused(body, what):
    finding = _finding(_grade(body))
    assert finding.key == "guard_refused", finding
    assert finding.values["call"] == what


@pytest.mark.needs_sandbox
def test_the_reference_and_the_hidden_cases_cannot_be_read():
    ring = exercises.folder("ring-allreduce")
    # In bwrap the whole file system is small enough to search; without a
    # sandbox (a developer's machine) search where the files really are.
    tops = ("/",) if sandbox.mode() == "bwrap" else (str(ring.parent), "/tmp")
    body = f"""
import os
seen = []
for path in ({str(ring / "reference.py")!r}, {str(ring / "exercise.py")!r},
             os.path.join(os.environ.get("SANDBOX_INPUT", "/opt/input"), "plan.json")):
    try:
        with open(path) as f:
            seen.append("READ " + f.read())
    except OSError as exc:
        seen.append("REFUSED " + type(exc).__name__)
skip = ("/proc", "/sys", "/dev", "/usr", "/opt/python", "/opt/site", "/work/shared")
for top in {tops!r}:
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if os.path.join(folder, d) not in skip and ".venv" not in d
                   and "site-packages" not in folder]
        for name in files:
            if name in ("reference.py", "exercise.py", "plan.json"):
                try:
                    with open(os.path.join(folder, name)) as f:
                        seen.append("READ " + f.read())
                except OSError as exc:
                    seen.append("REFUSED " + type(exc).__name__)
print("\\n".join(seen))
"""
    report = _grade(body)
    (case,) = report.cases
    printed = "\n".join(case.output.values())
    assert "REFUSED" in printed  # it tried, and was refused
    assert "READ" not in printed, printed[:2000]
    assert "exchange(chunks[send_c], into)" not in printed  # a line of the reference
    assert '"groups"' not in printed and "_CASES" not in printed  # the plan, the case list


@pytest.mark.needs_sandbox
def test_the_learner_cannot_send_its_own_expected_values():
    """The rank's pipe to the harness is reachable from the learner's code (the api's
    channel); an ``expected`` frame sent through it must not become the answer, and setting
    counters in the rank counts for nothing. Here the file changes nothing and claims its own
    input as the expected sum, with the byte count a ring would have."""
    body = """
api = dist.send.__self__
api.channel.send({"t": "expected", "case": "w2-n5-float32",
                  "expected": {"values": tensor.tolist(), "abs_sum": [0.0] * tensor.numel()}})
api.sent = api.received = tensor.numel() * tensor.element_size()
"""
    report = _grade(body)
    (case,) = report.cases
    values = next(f for f in case.findings if f.check == "values")
    assert not values.passed, values
    assert report.status == "failed"


@pytest.mark.needs_sandbox
def test_a_pidfd_signal_to_the_harness_is_refused_by_the_kernel():
    """``os.kill`` is refused by the guard, but a pidfd signal raises no audit event: it
    killed the harness. The rank's second seccomp filter refuses ``pidfd_open`` (and
    ``kill`` of any process but the rank itself) now, so the case just crashes."""
    body = """
import os
import signal
signal.pidfd_send_signal(os.pidfd_open(os.getppid()), signal.SIGKILL)
"""
    finding = _finding(_grade(body))
    assert finding.key == "crash", finding
    assert "not permitted" in finding.values["message"], finding


def test_a_harness_killed_by_a_signal_says_it_was_the_code(monkeypatch):
    """Should a route to kill the harness remain, the sandbox ends (contained) and the
    report must not tell the learner it was our failure ("not your fault"): inside the
    sandbox only their code runs beside the harness."""
    def killed(_module, _args, *, mode, **_options):
        return sandbox.Outcome(returncode=-9, stdout=b"", stderr=b"", duration_s=0.1, mode=mode)

    monkeypatch.setattr(sandbox, "check_available", lambda _mode=None: None)
    monkeypatch.setattr(sandbox, "run_python", killed)
    report = grade("ring-allreduce", HEADER + "    return tensor\n", case_ids=CASES["ring-allreduce"])
    assert report.status == "error"
    assert report.error.key == "harness_killed", report.error
    assert report.error.values == {"signal": 9}
    text = render(report, "en")
    assert "not your fault" not in text and "killed" in text


@pytest.mark.needs_sandbox
def test_a_reply_the_learner_forged_is_a_finding_not_a_crash_of_the_grader():
    """A "result" the learner's code wrote to the harness's pipe, without the fields a real one
    has, crashed the grader (KeyError, exit 1, no report). It is the case's finding now."""
    report = _grade('dist.send.__self__.channel.send({"t": "result", "case": "x"})')
    finding = _finding(report)
    assert finding.key == "reply_unreadable", finding
    assert "KeyError" in finding.values["detail"]
    assert report.status == "failed"
    assert "could not be read" in render(report, "en")


@pytest.mark.needs_sandbox
def test_a_whole_buffer_ring_that_sets_its_own_byte_counter_does_not_pass():
    """The sum is right (whole tensors passed around the ring, n-1 times), and it sets the
    counter a rank-side api once kept to a ring's amount. The router counts outside the rank:
    every case of 3 and 4 ranks fails on its bytes, the large ones included."""
    source = """
import torch
import torch.distributed as dist


def ring_allreduce(tensor):
    r, n = dist.get_rank(), dist.get_world_size()
    flat = tensor.view(-1)
    total, current = flat.clone(), flat.clone()
    for _ in range(n - 1):
        incoming = torch.empty_like(current)
        work = dist.isend(current, (r + 1) % n)
        dist.recv(incoming, (r - 1) % n)
        work.wait()
        total += incoming
        current = incoming
    flat.copy_(total)
    chunks = [len(c) for c in flat.tensor_split(n)]
    dist.send.__self__.sent = (2 * sum(chunks) - chunks[(r + 1) % n] - chunks[r]) * tensor.element_size()
    return tensor
"""
    report = grade("ring-allreduce", source, case_ids={"w3-n1001-float32", "w4-n1027-float32", "w3-n7-float32"})
    assert report.status == "failed", report
    for case in report.cases:
        failed = [f for f in case.findings if not f.passed]
        assert [f.key for f in failed] == ["bytes_whole_buffer"], case  # the values pass


# A ring on zeros: exactly a ring's messages (so the api's and the wire's counts are a
# ring's, with no counter set), and a barrier: when it ends, every rank has published.
# The sum itself goes another way: PUBLISH and COLLECT, one per side channel below.
SIDE_CHANNEL = """
import os
import socket

import torch
import torch.distributed as dist


def _ring_of_zeros(flat):
    world, rank = dist.get_world_size(), dist.get_rank()
    chunks = torch.tensor_split(torch.zeros_like(flat), world)
    for phase in range(2):
        for s in range(world - 1):
            send_c, recv_c = (rank - s + phase) % world, (rank - s - 1 + phase) % world
            work = dist.isend(chunks[send_c], (rank + 1) % world)
            dist.recv(chunks[recv_c].clone(), (rank - 1) % world)
            work.wait()


{channel}


def ring_allreduce(tensor):
    rank, world = dist.get_rank(), dist.get_world_size()
    flat = tensor.view(-1)
    state = publish(rank, world, flat)
    _ring_of_zeros(flat)
    total = flat.clone()
    for other in range(world):
        if other != rank:
            total += collect(other, state, flat)
    flat.copy_(total)
    return tensor
"""
CHANNELS = {
    # torch.from_file opens (and with shared=True creates) its file in C++, which no audit
    # hook sees: one rank writes its numbers through the mapping, the others map them.
    "a file in the tmp folder": """
def publish(rank, world, flat):
    torch.from_file(f"/tmp/side{rank}", shared=True, size=flat.numel(), dtype=flat.dtype).copy_(flat)


def collect(other, state, flat):
    return torch.from_file(f"/tmp/side{other}", shared=False, size=flat.numel(), dtype=flat.dtype)
""",
    # UDP on the loopback: not TCP, so not on the sockets whose bytes the harness counts.
    "a socket of its own": """
def publish(rank, world, flat):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 47000 + rank))
    return {"sock": sock}


def collect(other, state, flat):
    if "got" not in state:  # every rank has bound its socket by now (the ring was a barrier)
        for peer in range(dist.get_world_size()):
            if peer != dist.get_rank():
                state["sock"].sendto(flat.numpy().tobytes(), ("127.0.0.1", 47000 + peer))
        state["got"] = {}
        for _ in range(dist.get_world_size() - 1):
            data, (_, port) = state["sock"].recvfrom(1 << 16)
            state["got"][port - 47000] = torch.frombuffer(bytearray(data), dtype=flat.dtype)
    return state["got"][other]
""",
    # No file opened at all: the numbers in the names of folders.
    "names of folders": """
def publish(rank, world, flat):
    data = flat.numpy().tobytes().hex()
    for i in range(0, len(data), 200):
        os.mkdir(f"/tmp/side{rank}-{i // 200:05d}-{data[i:i + 200]}")


def collect(other, state, flat):
    names = sorted(n for n in os.listdir("/tmp") if n.startswith(f"side{other}-"))
    data = bytes.fromhex("".join(n.split("-")[2] for n in names))
    return torch.frombuffer(bytearray(data), dtype=flat.dtype)
""",
}


@pytest.mark.needs_sandbox
@pytest.mark.parametrize("channel", CHANNELS)
def test_a_side_channel_between_ranks_is_refused_by_the_kernel(channel):
    """The ranks share the tmp folder and the loopback, so a ring could send a ring's amount
    of anything through the router and pass the real data another way. Each of these does
    exactly that (without the rank's second seccomp filter each passes: the router's counts
    are a ring's). The filter refuses the file, the socket and the folder with EPERM, so the
    case crashes."""
    source = SIDE_CHANNEL.replace("{channel}", CHANNELS[channel])
    report = grade("ring-allreduce", source, case_ids={"w3-n1001-float32"})
    finding = _finding(report)
    assert finding.key == "crash", finding
    text = f'{finding.values["exception"]} {finding.values["message"]}'
    assert "not permitted" in text or "cannot be opened" in text, text


# --------------------------------------------------------------------------
# Past the audit hook: processes, links, the plan as a file, the harness's /proc


@pytest.mark.needs_sandbox
def test_a_process_started_past_the_audit_hook_is_refused_by_the_kernel():
    """``_posixsubprocess.fork_exec`` raises no audit event: a /bin/cat it started read the
    plan (this run's hidden cases) and the harness's environment. Each rank's own seccomp
    filter refuses it now, and links too (a symlink swapped by a thread under the guard's
    open check won the race), and the plan is no file at all (it comes on stdin)."""
    body = """
import _posixsubprocess
import os
found = {"input": sorted(os.listdir(os.environ["SANDBOX_INPUT"]))}
r, w = os.pipe()
er, ew = os.pipe()
try:
    _posixsubprocess.fork_exec([b"/bin/cat", b"/proc/self/status"], [b"/bin/cat"], True, (), None, None,
                               -1, -1, -1, w, -1, -1, er, ew, True, False, -1, None, None, None, -1,
                               None, False)
    found["spawn"] = os.read(r, 100).decode(errors="replace")
except OSError as exc:
    found["spawn"] = exc.errno
for name, call in (("symlink", os.symlink), ("link", os.link)):
    try:
        call("/tmp/mine", f"/tmp/{name}")
        found[name] = "made"
    except OSError as exc:
        found[name] = exc.errno
print("FOUND", found)
"""
    report = _grade(body)
    (case,) = report.cases
    printed = case.output["0"]
    assert "FOUND {'input': ['submission.py'], 'spawn': 1, 'symlink': 1, 'link': 1}" in printed, printed


@pytest.mark.needs_sandbox
def test_threads_still_work_under_the_ranks_filter():
    """The filter refuses clone without CLONE_THREAD only: a learner's thread (as gloo's own)
    still starts, and the reference passes beside it."""
    body = """
import threading
seen = []
worker = threading.Thread(target=seen.append, args=(dist.get_rank(),))
worker.start()
worker.join()
print("THREAD", seen)
"""
    report = _grade(body)
    (case,) = report.cases
    assert "THREAD [0]" in case.output["0"], case


@pytest.mark.needs_sandbox
def test_the_harness_memory_and_environment_are_not_readable_from_a_rank():
    """torch opens files in C++, past the guard's audit hook (``torch.from_file``); the
    harness process makes itself non-dumpable before forking the ranks, so its /proc files
    (environ, mem, fd) belong to root and refuse the ranks' uid whatever the route."""
    body = """
import os
parent = f"/proc/{os.getppid()}"
try:
    torch.from_file(parent + "/environ", size=1, dtype=torch.uint8)
    print("READ environ")
except RuntimeError as exc:
    print("ENVIRON", "Permission denied" in str(exc))
print("OWNER", os.stat(parent + "/mem").st_uid != os.getuid())
"""
    report = _grade(body)
    (case,) = report.cases
    printed = case.output["0"]
    assert "ENVIRON True" in printed and "OWNER True" in printed, printed


def test_the_rank_filter_decides_each_call_as_documented():
    """The rank's program on every machine we have numbers for (no kernel needed)."""
    import errno

    from labs.sandbox import seccomp
    from tests.test_sandbox import run_filter

    for machine, arch in seccomp.AUDIT_ARCH.items():
        program, nrs = seccomp.rank_program(machine), seccomp.numbers(machine)

        def decide(nr, arg0=0, on=arch, program=program):
            return run_filter(program, on, nr, arg0)
        for name in seccomp.RANK_REFUSED:
            if name in nrs:
                assert decide(nrs[name]) == ("errno", errno.EPERM), (machine, name)
        assert decide(nrs["clone"], 17) == ("errno", errno.EPERM)  # fork: SIGCHLD, no CLONE_THREAD
        assert decide(nrs["clone"], 0x3D0F00) == ("allow", 0)  # pthread_create's flags
        assert decide(nrs["clone3"]) == ("errno", errno.ENOSYS)
        assert decide(nrs["socket"], 2) == ("allow", 0)
        assert decide(nrs["execve"], on=0x40000003) == ("kill", 0)  # another architecture
    assert "fork" not in seccomp.numbers("aarch64")  # only clone there, which the filter covers


def _decide(program: bytes, arch: int, nr: int, *args: int) -> tuple[str, int]:
    """What the kernel would do with one call under a classic BPF program, with all six
    arguments (``tests.test_sandbox.run_filter`` gives the first only)."""
    import struct
    data = struct.pack("=iIQ6Q", nr, arch, 0, *(list(args) + [0] * 6)[:6])
    insns = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    pc = acc = 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:
            acc = struct.unpack_from("=I", data, k)[0]
        elif code in (0x15, 0x45):
            hit = acc == k if code == 0x15 else bool(acc & k)
            pc += jt if hit else jf
        elif code == 0x06:
            return {0x7FFF0000: "allow", 0x80000000: "kill"}.get(k & 0xFFFF0000, "errno"), k & 0xFFFF
        else:
            raise AssertionError(f"unknown instruction {code:#x}")
        pc += 1


def test_the_sealed_filter_decides_each_call_as_documented():
    """The rank's second filter (no kernel needed): no new socket, no file opened to write,
    no name made, no IPC, and signals and limits only for the rank itself."""
    import errno
    import os

    from labs.sandbox import seccomp

    eperm, pid = ("errno", errno.EPERM), 4242
    for machine, arch in seccomp.AUDIT_ARCH.items():
        program, nrs = seccomp.sealed_program(pid, machine), seccomp.numbers(machine)

        def decide(name, *args, on=arch, program=program, nrs=nrs):
            return _decide(program, on, nrs[name], *args)
        for name in seccomp.SEALED_REFUSED:
            if name in nrs:
                assert decide(name, 2) == eperm, (machine, name)
        for name in ("socket", "socketpair", "memfd_create", "mkdirat", "renameat2", "shmget", "mq_open",
                     "pidfd_open", "pidfd_send_signal", "rt_sigqueueinfo", "utimensat", "fsetxattr"):
            assert decide(name, 1) == eperm, (machine, name)  # present on every machine
        assert decide("openat2") == ("errno", errno.ENOSYS)
        for name, k in seccomp.SEALED_OPENS.items():
            if name not in nrs:
                continue
            read = [0] * 6
            read[k] = os.O_RDONLY | os.O_CLOEXEC | os.O_DIRECTORY
            assert decide(name, *read) == ("allow", 0), (machine, name)
            for flag in (os.O_WRONLY, os.O_RDWR, os.O_CREAT, os.O_TRUNC, os.O_APPEND):
                writing = list(read)
                writing[k] |= flag
                assert decide(name, *writing) == eperm, (machine, name, flag)
        for cmd in (6, 7, 37, 38):  # F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW
            assert decide("fcntl", 3, cmd) == eperm, cmd
        for cmd in (1, 2, 3, 4, 5, 36, 1030):  # F_GETFD ... F_GETLK, F_OFD_GETLK, F_DUPFD_CLOEXEC
            assert decide("fcntl", 3, cmd) == ("allow", 0), cmd
        assert decide("kill", pid, 9) == ("allow", 0)
        assert decide("tgkill", pid, pid + 3, 6) == ("allow", 0)  # raise(): a thread of this process
        for target in (pid + 1, 0, 1, 0xFFFFFFFF, (-pid) & 0xFFFFFFFF):  # another rank, its group, all
            assert decide("kill", target, 9) == eperm, target
            assert decide("tgkill", target, target, 9) == eperm, target
        assert decide("tkill", pid + 1, 9) == eperm
        assert decide("prlimit64", 0, 4) == ("allow", 0) and decide("prlimit64", pid, 4) == ("allow", 0)
        assert decide("prlimit64", pid + 1, 4) == eperm
        assert decide("sched_setaffinity", pid - 1) == eperm
        assert decide("clone", 0x3D0F00) == ("allow", 0)  # not this filter's (the rank filter's)
        assert decide("openat", on=0x40000003) == ("kill", 0)  # another architecture


# --------------------------------------------------------------------------
# The operator's limits, and a reader that stops early


def test_the_grader_uses_the_operators_limits_and_sends_the_plan_on_stdin(monkeypatch):
    """``EXERCISE_*`` were ignored: the grader built its own ``Limits``. The wall clock is
    still fitted to the plan unless the operator set one."""
    seen = {}

    def fake_run(_module, _args, *, files, stdin, limits, mode, **_options):
        seen.update(files=files, stdin=stdin, limits=limits)
        return sandbox.Outcome(returncode=0, stdout=b"", stderr=b"", duration_s=0.0, mode=mode)

    monkeypatch.setattr(sandbox, "check_available", lambda _mode=None: None)
    monkeypatch.setattr(sandbox, "run_python", fake_run)
    monkeypatch.setenv("EXERCISE_MEMORY_MB", "700")
    monkeypatch.setenv("EXERCISE_PROCESSES", "33")
    monkeypatch.delenv("EXERCISE_WALL_S", raising=False)
    monkeypatch.delenv("EXERCISE_OUTPUT_BYTES", raising=False)
    grade("ring-allreduce", exercises.reference("ring-allreduce"), case_ids=CASES["ring-allreduce"])
    assert (seen["limits"].memory_mb, seen["limits"].processes, seen["limits"].wall_s) == (700, 33, 30.0)
    assert seen["limits"].output_bytes == 8 << 20  # the values' JSON plus the learner's prints
    assert list(seen["files"]) == ["submission.py"]
    assert b'"w2-n5-float32"' in seen["stdin"]
    monkeypatch.setenv("EXERCISE_WALL_S", "12.5")
    grade("ring-allreduce", exercises.reference("ring-allreduce"), case_ids=CASES["ring-allreduce"])
    assert seen["limits"].wall_s == 12.5 and seen["limits"].memory_mb == 700


@pytest.mark.parametrize("args", [("list",), ("grade", "ring-allreduce", "{broken}", "--json")])
def test_a_reader_that_stops_early_gets_no_traceback(args, tmp_path):
    """``python -m labs.exercises grade ... | head`` ended in a BrokenPipeError traceback (and
    exit 1, "a case failed"). The exit code is the command's own now, and stderr is quiet."""
    broken = tmp_path / "broken.py"
    broken.write_text("def ring_allreduce(tensor)\n    return tensor\n")
    argv = [a.replace("{broken}", str(broken)) for a in args]
    proc = subprocess.Popen([sys.executable, "-m", "labs.exercises", *argv], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == (0 if args[0] == "list" else 2)
    assert b"BrokenPipeError" not in err and b"Traceback" not in err, err[-1000:]


# --------------------------------------------------------------------------
# The trust design (docs/contributors/grading.md): nothing in a rank to find, no group to use


@pytest.mark.needs_sandbox
def test_no_frame_of_any_thread_in_a_rank_holds_a_seed_the_plan_or_an_expected_value():
    """The second probe's thread trick: a worker thread runs ``sys._current_frames`` with no
    frame of the learner's file on its own stack, so the guard allows it, and every frame of
    the rank is then open. Before the redesign the rank's main frame held its group of the
    plan (seeds, from which every rank's input and the sum follow). Now the rank was forked
    before the harness read the plan: walking everything reachable from every frame finds
    no seed, no plan and no expected value, only this rank's own input."""
    body = """
import concurrent.futures
import sys

with concurrent.futures.ThreadPoolExecutor(1) as pool:
    frames = pool.submit(sys._current_frames).result()
found, seen, todo = set(), set(), []
for frame in frames.values():
    while frame is not None:
        todo.append(frame.f_locals)
        frame = frame.f_back
while todo and len(seen) < 200000:
    obj = todo.pop()
    if id(obj) in seen or isinstance(obj, (str, bytes, int, float, type(None), torch.Tensor)):
        continue
    seen.add(id(obj))
    if isinstance(obj, dict):
        found.update(k for k in obj if k in ("seed", "groups", "expected", "abs_sum", "other_seed"))
        todo.extend(obj.values())
    elif isinstance(obj, (list, tuple, set)):
        todo.extend(obj)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type(sys)):
        todo.append(vars(obj))
print("FOUND", sorted(found), len(seen))
"""
    report = _grade(body)
    (case,) = report.cases
    printed = case.output["0"]
    assert "FOUND [] " in printed, printed


@pytest.mark.needs_sandbox
@pytest.mark.parametrize("body", [
    # A gloo group of its own over TCP: the sealed filter refuses the socket.
    'dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29511", rank=dist.get_rank(),\n'
    '                        world_size=dist.get_world_size(), timeout=__import__("datetime").timedelta(seconds=2))',
    # A file store in the tmp folder: nothing may be opened to write.
    'store = dist.FileStore("/tmp/store", dist.get_world_size())\nstore.set("x", "1")',
    # The router's own all-reduce, by a raw frame: ring-allreduce does not allow it.
    'api = dist.send.__self__\napi.channel.send({"t": "all_reduce", "id": 99, "dtype": "float32", "op": "sum"},\n'
    '                 tensor.numpy().tobytes())\napi.channel.completion(99)',
    # Garbage on the pipe to the router.
    'import os\nos.write(dist.send.__self__.channel.up, b"\\xff" * 64)\ndist.send.__self__.channel.completion(1)',
])
def test_a_collective_by_any_route_is_a_failure_never_a_pass(body):
    report = _grade(body)
    assert report.status != "passed"
    finding = _finding(report)
    assert finding.key in ("crash", "forbidden_call", "deadlock", "rank_died", "protocol_call_refused",
                              "protocol_frame"), finding
    text = render(report, "en")
    assert "passed" not in text.splitlines()[0].lower() or "0 of" in text


@pytest.mark.needs_sandbox
def test_a_frame_forged_to_the_router_breaks_the_protocol_and_says_so():
    body = 'dist.send.__self__.channel.send({"t": "all_reduce", "id": 5, "dtype": "float32", "op": "sum"}, b"1234")'
    report = _grade(body + "\nimport time\ntime.sleep(1)")
    finding = _finding(report)
    assert (finding.check, finding.key, finding.values["op"]) == \
        ("protocol", "protocol_call_refused", "all_reduce"), finding
    assert finding.values["rank"] in (0, 1)  # both ranks wrote it: the router read one first
    assert "asked the grader for dist.all_reduce" in render(report, "en")


@pytest.mark.needs_sandbox
def test_a_rank_holds_no_process_group_at_all():
    """Review N-2: gloo's own all-reduce was reachable from a rank through dispatcher entry
    points the guard did not wrap, because the rank held a working process group. Now none
    exists there to reach, by any entry point: torch's registry of groups is empty."""
    body = """
from torch.distributed import distributed_c10d as c10d
world = c10d._world
print("GROUPS", isinstance(world.default_pg, c10d.ProcessGroup), len(world.pg_map), len(world.pg_names))
"""
    report = _grade(body)
    (case,) = report.cases
    assert "GROUPS False 0 0" in case.output["0"], case.output


# --------------------------------------------------------------------------
# The closed router: what a rank is told is its own calls' completions and the payloads
# counted into it (router.py). Each channel of the third probe's class, without processes.

from api import Api, Channel  # noqa: E402 - the runtime's flat imports (test_exercises_router puts them on the path)
from drivers import ring_allreduce as ring_driver  # noqa: E402

COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "barrier")


@pytest.fixture
def net():
    """Routers over hand-driven ranks (pipes, no processes), under a case's bounds."""
    made = []

    def make(n: int, bounds=ROOMY, allowed=routing.P2P + COLLECTIVES):
        ranks = [Rank() for _ in range(n)]
        r = routing.Router(n, [x.up_r for x in ranks], [x.down_w for x in ranks], allowed=allowed)
        r.reset(bounds)
        made.append((r, ranks))
        return r, ranks

    yield make
    for r, ranks in made:
        r.close()
        for x in ranks:
            for fd in (x.up_r, x.up_w, x.down_r, x.down_w):
                with contextlib.suppress(OSError):
                    os.close(fd)


@pytest.mark.parametrize("empty_messages, sent", [(False, b"abcd"), (True, b"")])
def test_a_size_mismatch_answers_neither_side(net, empty_messages, sent):
    """H-1: rank 0 posted a receive whose size was its data, rank 1 sent another size (zero
    bytes, counted as nothing), and the router answered both "rank 1 sent 0 bytes, the receive
    expected N": rank 1 read rank 0's data out of its own error. Now the case ends there and
    neither rank is told anything."""
    r, (a, b) = net(2, bounds=routing.Bounds(message_bytes=64, tags=2, empty_messages=empty_messages))
    a.write({"t": "irecv", "id": 1, "src": 1, "tag": 0, "n": 37})  # 37: rank 0's "data"
    b.write({"t": "send", "id": 1, "dst": 0, "tag": 0}, sent)
    pump(r)
    assert a.read() == [] and b.read() == []
    assert r.failure == {"key": "protocol_size_mismatch",
                         "values": {"rank": 0, "peer": 1, "sent": len(sent), "expected": 37}}
    assert r.traffic(0)["received"] == 0


def test_a_receive_larger_than_the_case_can_need_ends_it_on_its_own_frame(net):
    """The raw-frame variant: a receive of a 4,097-digit size (1,700 bytes of data per call).
    Refused on the receiver's own frame, before any send could meet it."""
    r, (a, b) = net(2, bounds=routing.Bounds(message_bytes=20, tags=2))
    a.write({"t": "irecv", "id": 1, "src": 1, "tag": 0, "n": int("7" * 4097)})
    pump(r)
    b.write({"t": "send", "id": 1, "dst": 0, "tag": 0}, b"x" * 20)
    pump(r)
    assert a.read() == [] and b.read() == []
    assert r.failure == {"key": "protocol_message_size",
                         "values": {"rank": 0, "op": "irecv", "bytes": "> 10^15", "limit": 20}}


@pytest.mark.parametrize("op, tensor, device", [
    ("irecv", torch.empty(123456789, dtype=torch.uint8, device="meta"), "meta"),
    ("recv", torch.empty(7, device="meta"), "meta"),
    ("isend", torch.sparse_coo_tensor([[0]], [1.0], (5,), check_invariants=True), "sparse_coo"),
])
def test_a_tensor_that_is_no_cpu_tensor_is_refused_and_ends_the_case(net, op, tensor, device):
    """H-1 through the public API alone: ``dist.irecv(torch.empty(N, device="meta"), src)``
    declared N bytes (its data) and allocated nothing. The api refuses any tensor that is not
    a plain CPU tensor, with the reason; the frame that says so ends the case at the router."""
    r, (a, _b) = net(2)
    api = Api(Channel(a.up_w, a.down_r), rank=0, world=2)
    with pytest.raises(RuntimeError, match="CPU tensors only"):
        getattr(api, op)(tensor, 1)
    pump(r)
    assert r.failure == {"key": "protocol_device", "values": {"op": op, "device": device, "rank": 0}}


def test_a_receive_from_any_source_is_refused(net):
    """I-6: an any-source receive's answer named the rank whose send came first. No exercise
    needs one; the case ends, and the sends that waited reach nobody."""
    r, (a, b, c) = net(3)
    b.write({"t": "isend", "id": 1, "dst": 0, "tag": 0}, b"abcd")
    c.write({"t": "isend", "id": 1, "dst": 0, "tag": 0}, b"wxyz")
    pump(r)
    a.write({"t": "irecv", "id": 1, "src": None, "tag": 0, "n": 4})
    pump(r)
    assert a.read() == [] and r.failure == {"key": "protocol_any_source", "values": {"op": "irecv", "rank": 0}}


def test_tags_are_few_and_a_receive_no_message_met_fails_the_case(net):
    """I-6: a rank posts receives on many tags and sees which one completes. A ring's case
    allows 2n tags (one per step); past them the case ends, and within them a receive on the
    tag the sender did not choose is left waiting, which fails the case when the ranks return."""
    bounds = routing.Bounds(**ring_driver.bounds({"shape": [10], "dtype": "float32"}, 4))
    assert (bounds.tags, bounds.message_bytes) == (8, 40)
    r, (a, *_) = net(4, bounds=bounds)
    a.write({"t": "irecv", "id": 1, "src": 1, "tag": 8, "n": 4})
    pump(r)
    assert r.failure == {"key": "protocol_tag", "values": {"rank": 0, "op": "irecv", "tag": 8, "last": 7}}
    r, (a, b, *_) = net(4, bounds=bounds)
    for tag in (0, 1):
        a.write({"t": "irecv", "id": tag + 1, "src": 1, "tag": tag, "n": 4})
    b.write({"t": "send", "id": 1, "dst": 0, "tag": 1}, b"abcd")
    pump(r)
    assert r.failure is None and [h["id"] for h, _ in a.read()] == [2]
    assert r.finish() == {"key": "protocol_unmatched_recv",
                          "values": {"rank": 0, "op": "irecv", "peer": 1, "bytes": 4, "tag": 0}}


@pytest.mark.parametrize("shape, world, empty", [([10], 4, False), ([1001], 3, False), ([16], 4, False),
                                                 ([1], 2, True), ([3], 4, True), ([9], 4, True), ([3, 3], 4, True)])
def test_a_message_of_zero_bytes_only_where_the_case_can_need_one(net, shape, world, empty):
    """A zero-byte send counted nothing and carried the H-1 trick. A ring's case needs one
    only where its tensor, cut into n chunks (ceil(m/n) elements, or fewer than n), has an
    empty chunk; elsewhere a message of zero bytes ends the case."""
    bounds = ring_driver.bounds({"shape": shape, "dtype": "float32"}, world)
    assert bounds["empty_messages"] is empty
    r, (a, b, *_) = net(world, bounds=routing.Bounds(**bounds))
    a.write({"t": "isend", "id": 1, "dst": 1, "tag": 0}, b"")
    b.write({"t": "recv", "id": 1, "src": 0, "tag": 0, "n": 0})
    pump(r)
    if empty:
        assert r.failure is None and [h for h, _ in b.read()] == [{"t": "done", "id": 1, "src": 0}]
    else:
        assert r.failure["key"] == "protocol_zero_bytes" and b.read() == []


def test_an_extra_message_fails_the_case_when_the_ranks_return(net):
    """A send no receive took (a message beyond what the pattern needs) is no longer left behind."""
    r, (a, _b) = net(2)
    a.write({"t": "isend", "id": 1, "dst": 1, "tag": 0}, b"abcd")
    pump(r)
    assert r.finish() == {"key": "protocol_unmatched_send",
                          "values": {"rank": 0, "op": "isend", "peer": 1, "bytes": 4, "tag": 0}}


def _collective(kind: str, me: int, *, size: int = 8, src: int = 0, dtype: str = "uint8", op: str = "sum"):
    header = {"t": kind, "id": 1, "dtype": dtype}
    if kind == "all_reduce":
        header["op"] = op
    if kind == "broadcast":
        header.update(src=src, n=size)
        return header, b"\0" * size if me == src else b""
    return header, b"\0" * size


@pytest.mark.parametrize("calls, key", [
    # sharded-optimizer: a receiver of a collective broadcast declares a size that is its data.
    ([("broadcast", {}), ("broadcast", {"size": 42}), ("broadcast", {})], "protocol_collective_mismatch"),
    # average-gradients (a required exercise): an all_reduce whose size is rank 1's data.
    ([("all_reduce", {}), ("all_reduce", {"size": 42}), ("all_reduce", {})], "protocol_collective_mismatch"),
    # ...or whose reduction or element type says one bit of it.
    ([("all_reduce", {}), ("all_reduce", {"op": "max"}), ("all_reduce", {})], "protocol_collective_mismatch"),
    ([("all_reduce", {}), ("all_reduce", {"dtype": "int8"}), ("all_reduce", {})], "protocol_collective_mismatch"),
    # The source each rank names for one broadcast, chosen by its data.
    ([("broadcast", {}), ("broadcast", {"src": 2}), ("broadcast", {})], "broadcast_sources_differ"),
    ([("all_gather", {}), ("all_gather", {"size": 42}), ("barrier", {})], "protocol_collective_mismatch"),
])
def test_a_collectives_declared_size_source_or_operation_is_never_echoed(net, calls, key):
    """I-6: ranks that made different collective calls were each answered with every rank's
    size, dtype, operation or source ("rank 1: 42 bytes"). Now the case ends and no rank hears;
    the report lists the calls."""
    r, ranks = net(3, allowed=COLLECTIVES)
    for me, (kind, options) in enumerate(calls):
        ranks[me].write(*_collective(kind, me, **options))
    pump(r)
    assert [x.read() for x in ranks] == [[], [], []]
    assert r.failure["key"] == key, r.failure


# --------------------------------------------------------------------------
# The property: two runs whose other ranks hold different data (and so write any frames at
# all, in any order), with the same frames from rank 0, tell rank 0 the same thing until a
# counted payload reaches it: every answer is made of rank 0's own frame and that payload.

PROPERTY_BOUNDS = routing.Bounds(message_bytes=12, tags=2, empty_messages=False)
SIZES = st.sampled_from([4, 8, 12, 4, 8, 12, 0, 16])  # now and then beyond what the case can need
TAGS = st.sampled_from([0, 1, 0, 1, 2])  # 2 too
WORLD = 3


def my_calls():
    """Rank 0's calls: sends, receives and collectives, mostly within the case's bounds."""
    peer = st.sampled_from([1, 2])
    return st.lists(st.one_of(
        st.tuples(st.sampled_from(("send", "isend")), peer, TAGS, SIZES),
        st.tuples(st.sampled_from(("recv", "irecv")), peer, TAGS, SIZES),
        st.tuples(st.just("all_reduce"), st.just("sum"), SIZES),
        st.tuples(st.just("broadcast"), st.integers(0, WORLD - 1), SIZES),
        st.tuples(st.just("barrier")),
    ), min_size=1, max_size=6)


# How another rank answers one of rank 0's calls: as it should, or in a way its data chose.
TWISTS = ("same",) * 6 + ("size", "tag", "any_source", "skip", "extra", "op", "src")


@st.composite
def their_calls(draw, mine: list[tuple]) -> list[list[tuple]]:
    """The other ranks' calls, answering rank 0's: each answer as it should be, or twisted
    (another size, tag, operation or source, a receive from any rank, none, one too many)."""
    scripts: list[list[tuple]] = [[] for _ in range(WORLD)]
    for action in mine:
        kind = action[0]
        twist = draw(st.sampled_from(TWISTS))
        if kind in ("send", "isend", "recv", "irecv"):
            _, peer, tag, size = action
            size = draw(SIZES) if twist == "size" else size
            tag = draw(TAGS) if twist == "tag" else tag
            answer = ("recv", None if twist == "any_source" else 0, tag, size) if kind in ("send", "isend") \
                else (draw(st.sampled_from(("send", "isend"))), 0, tag, size)
            if twist != "skip":
                scripts[peer].append(answer)
            if twist == "extra":
                scripts[peer].append(("isend", 0, draw(TAGS), draw(SIZES)))
            continue
        for other in range(1, WORLD):
            if kind == "all_reduce":
                answer = ("all_reduce", "max" if twist == "op" else "sum", draw(SIZES) if twist == "size" else action[2])
            elif kind == "broadcast":
                answer = ("broadcast", draw(st.integers(0, WORLD - 1)) if twist == "src" else action[1],
                          draw(SIZES) if twist == "size" else action[2])
            else:
                answer = ("all_reduce", "sum", 4) if twist == "op" else ("barrier",)
            if twist != "skip" or other == 1:
                scripts[other].append(answer)
    return scripts[1:]


def frame(action: tuple, op_id: int, me: int, data: int) -> tuple[dict, bytes]:
    """One call as a rank's api writes it; its payload made of the rank's ``data``."""
    kind = action[0]

    def fill(n: int) -> bytes:
        return bytes((data + i) % 256 for i in range(n))
    if kind in ("send", "isend"):
        return {"t": kind, "id": op_id, "dst": action[1], "tag": action[2]}, fill(action[3])
    if kind in ("recv", "irecv"):
        return {"t": kind, "id": op_id, "src": action[1], "tag": action[2], "n": action[3]}, b""
    if kind == "all_reduce":
        return {"t": kind, "id": op_id, "dtype": "uint8", "op": action[1]}, fill(action[2])
    if kind == "broadcast":
        src, n = action[1], action[2]
        return {"t": kind, "id": op_id, "src": src, "dtype": "uint8", "n": n}, fill(n) if src == me else b""
    return {"t": "barrier", "id": op_id}, b""


def play(scripts: list[list[tuple]], data: list[int], order: list[int]) -> tuple[list[tuple[dict, bytes]], dict]:
    """Every rank's frames through one router, interleaved as ``order`` picks the next rank
    (then in turn): everything rank 0 was sent, in order, and the case's failure (or None)."""
    world = len(scripts)
    ranks = [Rank() for _ in range(world)]
    r = routing.Router(world, [x.up_r for x in ranks], [x.down_w for x in ranks],
                       allowed=routing.P2P + ("all_reduce", "broadcast", "barrier"))
    r.reset(PROPERTY_BOUNDS)
    try:
        queues = [[frame(a, i + 1, me, data[me]) for i, a in enumerate(script)] for me, script in enumerate(scripts)]
        picks = iter(order)
        got = []
        while any(queues):
            who = next(picks, None)
            if who is None or not queues[who]:
                who = next(k for k in range(world) if queues[k])
            ranks[who].write(*queues[who].pop(0))
            r.pump(time.monotonic())
            got += ranks[0].read()
            for x in ranks[1:]:
                x.read()
        r.finish()
        return got + ranks[0].read(), r.failure
    finally:
        r.close()
        for x in ranks:
            for fd in (x.up_r, x.up_w, x.down_r, x.down_w):
                os.close(fd)


def own_answer(action: tuple, op_id: int) -> tuple[dict, int]:
    """What rank 0's call ``op_id`` can be answered with: its header and its payload's length,
    from its own frame alone."""
    kind = action[0]
    header = {"t": "done", "id": op_id}
    if kind in ("recv", "irecv"):
        return {**header, "src": action[1]}, action[3]
    if kind == "broadcast":
        return {**header, "src": action[1]}, 0 if action[1] == 0 else action[2]
    return header, action[2] if kind == "all_reduce" else 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mine=my_calls(), draw=st.data())
def test_what_a_rank_is_told_depends_only_on_its_own_frames_and_the_payloads_counted_into_it(mine, draw):
    runs = []
    for _ in range(2):  # the other ranks' data, and so their calls and their timing, differ
        others = draw.draw(their_calls(mine))
        data = draw.draw(st.tuples(st.integers(0, 255), st.integers(0, 255)))
        order = draw.draw(st.lists(st.integers(0, WORLD - 1), max_size=24))
        got, failure = play([mine, *others], [7, *data], order)
        event(f"{(failure or {}).get('key', 'no failure')}; rank 0 answered {min(len(got), 3)}"
              f"{' or more' if len(got) >= 3 else ''} times")
        runs.append(got)
    for got in runs:
        for header, payload in got:  # every answer is made of rank 0's own frame
            expected, length = own_answer(mine[header["id"] - 1], header["id"])
            assert header == expected and len(payload) == length, (header, len(payload))
    # Byte for byte the same, call by call, until a payload reaches rank 0 in either run.
    before = []
    for got in runs:
        first = next((i for i, (_h, p) in enumerate(got) if p), len(got))
        before.append({h["id"]: frames.encode(h, p) for h, p in got[:first]})
    for op_id in before[0].keys() & before[1].keys():
        assert before[0][op_id] == before[1][op_id]


# --------------------------------------------------------------------------
# The representative attacks, graded end to end (one case each): before the closed router
# each passed, with no data of the other rank crossing a counted message.

SIZE_ECHO_RAW = """
import re

import torch
import torch.distributed as dist


def ring_allreduce(tensor):
    other = 1 - dist.get_rank()
    channel = dist.send.__self__.channel
    mine = tensor.numpy().tobytes()
    # A receive whose size is my data; the other rank's zero-byte send meets it, and the
    # router's size-mismatch answer tells that rank the size this receive expected.
    channel.send({"t": "irecv", "id": 1000, "src": other, "tag": 0, "n": int.from_bytes(b"\\x01" + mine, "big")})
    channel.send({"t": "send", "id": 1001, "dst": other, "tag": 0})
    header, _ = channel.completion(1001)
    expected = int(re.search(r"expected (\\d+)", header.get("error", "")).group(1))
    channel.completion(1000)
    theirs = expected.to_bytes(len(mine) + 1, "big")[1:]
    # The bytes rule on two ranks: one tensor's worth each way, of anything.
    work = dist.isend(torch.zeros_like(tensor), other)
    dist.recv(torch.empty_like(tensor), other)
    work.wait()
    tensor += torch.frombuffer(bytearray(theirs), dtype=tensor.dtype).view_as(tensor)
    return tensor
"""

SIZE_ECHO_META = """
import re

import torch
import torch.distributed as dist


def ring_allreduce(tensor):
    other = 1 - dist.get_rank()
    mine = tensor.numpy().tobytes()
    theirs = b""
    for i in range(0, len(mine), 7):
        piece = mine[i:i + 7]
        # A meta tensor of N bytes allocates nothing; N is 7 bytes of my data.
        size = int.from_bytes(b"\\x01" + piece, "big")
        work = dist.irecv(torch.empty(size, dtype=torch.uint8, device="meta"), src=other)
        try:
            dist.send(torch.empty(0, dtype=torch.uint8), other)
        except RuntimeError as exc:  # "... the receive expected N"
            theirs += int(re.search(r"expected (\\d+)", str(exc)).group(1)).to_bytes(len(piece) + 1, "big")[1:]
        try:
            work.wait()
        except RuntimeError:
            pass
    work = dist.isend(torch.zeros_like(tensor), other)
    dist.recv(torch.empty_like(tensor), other)
    work.wait()
    tensor += torch.frombuffer(bytearray(theirs), dtype=tensor.dtype).view_as(tensor)
    return tensor
"""


@pytest.mark.needs_sandbox
@pytest.mark.parametrize("source, key", [(SIZE_ECHO_RAW, "protocol_message_size"),
                                         (SIZE_ECHO_META, "protocol_device")])
def test_the_size_mismatch_cheat_fails_by_raw_frames_and_by_the_public_api(source, key):
    """H-1 as the probe ran it, on two ranks: every rank reads the other's input out of the
    router's size-mismatch answer and sums locally; a dummy message meets the bytes rule.
    Both passed before (the raw frames at 1,700 bytes a call, the meta tensors at 7)."""
    report = grade("ring-allreduce", source, case_ids={"w2-n5-float32"})
    finding = _finding(report)
    assert finding.check == "protocol" and finding.key == key, finding
    assert report.status == "failed"


DIRECT = """
import torch
import torch.distributed as dist


def ring_allreduce(tensor):
    n, me = dist.get_world_size(), dist.get_rank()
    chunks = list(torch.tensor_split(tensor.view(-1), n))
    # Reduce-scatter straight to each chunk's owner: rank c ends with the sum of chunk c.
    incoming = [torch.empty_like(chunks[me]) for _ in range(n)]
    works = [dist.isend(chunks[c], c) for c in range(n) if c != me]
    works += [dist.irecv(incoming[p], p) for p in range(n) if p != me]
    for work in works:
        work.wait()
    for p in range(n):
        if p != me:
            chunks[me] += incoming[p]
    # All-gather straight from each owner.
    works = [dist.isend(chunks[me], p) for p in range(n) if p != me]
    works += [dist.irecv(chunks[p], p) for p in range(n) if p != me]
    for work in works:
        work.wait()
    return tensor
"""


@pytest.mark.needs_sandbox
def test_a_direct_reduce_scatter_and_all_gather_does_not_pass_as_a_ring():
    """Review I-1: it moves exactly a ring's bytes and passed 23/23. Its values and bytes still
    pass; its message pattern fails, naming the family, where it left the ring and its cost,
    and the report names the family beside the animation (none is drawn)."""
    report = grade("ring-allreduce", DIRECT, case_ids={"w3-n7-float32", "w4-n10-float32"})
    assert report.status == "failed" and report.error is None
    for case in report.cases:
        failed = [f for f in case.findings if not f.passed]
        assert [f.key for f in failed] == ["pattern_direct"], case
        assert failed[0].values["rank"] == 1 and failed[0].values["peer"] == 0
    assert report.pattern.model_dump() == {"case": "w4-n10-float32", "family": "direct", "world_size": 4,
                                           "messages": 6}
    text = render(report, "en")
    assert "they are a direct exchange" in text and "Message pattern in case w4-n10-float32" in text

