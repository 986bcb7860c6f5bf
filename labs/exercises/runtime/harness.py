"""The harness: runs one submission's cases on real gloo ranks, inside the sandbox.

    python -m harness < plan.json    # cwd: a private tmp folder; $SANDBOX_INPUT holds
                                     # submission.py (both from labs.exercises.grader)

Trusted code, but it runs beside untrusted code, so it holds nothing secret
(see ``drivers/__init__.py``). What it does, per group of the plan (one world
size): fork ``world_size`` ranks from this process once torch is imported
(fast), join them in a gloo group over 127.0.0.1, let each rank ``prepare``
every case with the real collectives and send the expected results here,
then arm the guard, import the learner's file and run the cases one by one,
each started by a "go" from here so that a case begins on every rank
together and its timeout is measured from one point.

The plan (this run's hidden cases) comes on stdin, never as a file: a
file can be opened by a route the guard's open check misses (a race on a
path), a pipe read to its end cannot. Before forking, this process makes
itself non-dumpable, so that no rank (same uid) can read its memory,
environment or fds through ``/proc`` or overwrite what it will report;
each rank keeps only its own group of the plan and, before the learner's
file is imported, installs a seccomp filter (``bpf.rank_program``) that
refuses new processes and links, the routes past the guard's audit hook;
once its cases are prepared, it tells this process which sockets it holds
and stacks a second filter (``bpf.sealed_program``) that leaves those
sockets as its only way to the other ranks. Right before each case and
right after every rank replied, this process reads the kernel's TCP
counters of those sockets (``wire.py``): the bytes each rank really sent
and received, which the learner's code cannot set, go in the case event.

This process prints one JSON object per line on stdout, the protocol the
grader reads: ``{"event": "start"|"case"|"error"|"done", ...}``. The ranks'
own stdout and stderr (the learner's prints) go to a file per rank, unlinked
as soon as it is made (a name in the shared tmp folder would let one rank
read what another printed), of which each case event carries the first
bytes; the ranks talk to this process over their own pipes, never over stdout.

A case ends when every rank has returned, when one has raised (the others
get a moment to finish or raise too), or at ``case_timeout_s``: then the
ranks are killed, the event says what each was waiting for, and the
group's remaining cases are reported as not run.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import selectors
import signal
import socket
import sys
import time
import traceback
from datetime import timedelta

INPUT = os.environ.get("SANDBOX_INPUT", "/opt/input")
CRASH_GRACE_S = 0.5  # after one rank raised, how long the others may take to finish or raise
SETUP_S = 30.0  # joining the group and preparing every case


def emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


# --------------------------------------------------------------------------
# The rank side


class _Pipe:
    def __init__(self, fd: int):
        self.fd = fd

    def send(self, msg: dict) -> None:
        view = memoryview((json.dumps(msg) + "\n").encode())
        while view:
            view = view[os.write(self.fd, view):]


def _learner_frames(exc: BaseException, path: str) -> list[dict]:
    """The traceback's frames that are in the learner's file: file, line, function, source."""
    frames = []
    for fs in traceback.extract_tb(exc.__traceback__):
        if os.path.realpath(fs.filename) == os.path.realpath(path):
            frames.append({"line": fs.lineno, "function": fs.name, "code": (fs.line or "").strip()})
    return frames


def _error_record(exc: BaseException, path: str) -> dict:
    from guard import ForbiddenCall

    forbidden = exc if isinstance(exc, ForbiddenCall) else None
    # A ForbiddenCall raised inside a library and re-wrapped still counts.
    cause = exc.__cause__ or exc.__context__
    while forbidden is None and cause is not None:
        if isinstance(cause, ForbiddenCall):
            forbidden = cause
        cause = cause.__cause__ or cause.__context__
    if forbidden is not None:
        return {"type": "forbidden", "call": forbidden.call, "kind": forbidden.kind,
                "frames": _learner_frames(exc, path)}
    return {"type": "crash", "exc": type(exc).__name__, "message": str(exc)[:500],
            "frames": _learner_frames(exc, path)}


def _confine() -> None:
    """A rank's own seccomp filter (see ``bpf``); before any thread of gloo's exists,
    so each inherits it (TSYNC covers them anyway). Where the machine has no table
    of ours (not x86_64/aarch64), the sandbox's namespaces and limits remain."""
    import bpf

    if bpf.supported():
        bpf.install(bpf.rank_program())


def _seal() -> None:
    """The rank's second seccomp filter (``bpf.sealed_program``), once its group is up
    and its cases prepared: from here on its only way to another rank is a socket it
    already holds, whose bytes the parent counts (``wire``)."""
    import bpf

    if bpf.supported():
        bpf.install(bpf.sealed_program(os.getpid()))


def _rank_main(plan: dict, group: dict, rank: int, to_parent: int, from_parent: int,
               listen_fd: int | None, port: int) -> None:
    import guard
    import torch
    import torch.distributed as dist
    import wire
    from api import Api

    _confine()
    torch.set_num_threads(1)
    out = _Pipe(to_parent)
    world = group["world_size"]
    driver = importlib.import_module(f"drivers.{plan['driver']}")
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timedelta(seconds=SETUP_S),
                          master_listen_fd=listen_fd)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=plan["case_timeout_s"] + SETUP_S))
    # Trusted phase: every case's inputs and expected result, before any learner code exists here.
    states = []
    for case in group["cases"]:
        state, expected = driver.prepare(case, rank, world)
        out.send({"type": "expected", "case": case["id"], "expected": expected})
        states.append(state)
    expected = None  # keep nothing of it here
    # The sockets the parent will count (gloo's, the store's), then no new way out.
    out.send({"type": "sockets", "inodes": wire.socket_inodes()})
    _seal()
    api = Api(out.send)
    path = os.path.join(INPUT, "submission.py")
    guard.arm(api, allowed=plan["allowed"], submission_path=path, input_dir=INPUT)
    out.send({"type": "loading"})  # from here on, time spent is the learner's file loading
    try:
        spec = importlib.util.spec_from_file_location("submission", path)
        submission = importlib.util.module_from_spec(spec)
        sys.modules["submission"] = submission
        spec.loader.exec_module(submission)
    except BaseException as exc:  # noqa: BLE001 - whatever the learner's file raises on import
        out.send(dict(_error_record(exc, path), stage="import"))
        return
    if not callable(getattr(submission, plan["function"], None)):
        out.send({"type": "missing_function", "function": plan["function"]})
        return
    out.send({"type": "ready"})
    commands = os.fdopen(from_parent, "r", encoding="utf-8")
    for line in commands:
        k = int(line)
        case, state = group["cases"][k], states[k]
        api.reset(getattr(driver, "locate", None) and (lambda t, s=state: driver.locate(t, s)))
        sys.stdout.flush()
        try:
            result = driver.run(case, rank, world, submission, api, state)
        except BaseException as exc:  # noqa: BLE001 - the learner's exception is the finding
            sys.stdout.flush()
            out.send(dict(_error_record(exc, path), case=case["id"]))
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        out.send({"type": "result", "case": case["id"], "result": result,
                  "sent": api.sent, "received": api.received, "calls": api.calls})


# What a rank needs of the plan; the other groups' cases stay with the parent.
RANK_KEYS = ("driver", "function", "allowed", "case_timeout_s")


def _keep_only(plan: dict, group: dict) -> None:
    """In a freshly forked rank: drop every reference to the other groups (the
    parent's frames above this one still hold ``plan``, so in place)."""
    kept = {key: plan[key] for key in RANK_KEYS if key in plan}
    for other in plan.get("groups", []):
        if other is not group:
            other.clear()
    plan.get("groups", []).clear()
    plan.clear()
    plan.update(kept)


def _fork_rank(plan, group, rank, listener, port, log: int, others: list[int]) -> tuple[int, int, int]:
    """Start rank ``rank`` with ``log`` as its stdout and stderr; return (pid, fd to read
    its messages, fd to send it commands). ``others``: the fds of the ranks started before."""
    r_up, w_up = os.pipe()
    r_down, w_down = os.pipe()
    sys.stdout.flush()
    pid = os.fork()
    if pid:
        os.close(w_up)
        os.close(r_down)
        return pid, r_up, w_down
    code = 0
    try:
        os.close(r_up)
        os.close(w_down)
        for fd in others:
            with contextlib.suppress(OSError):
                os.close(fd)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _keep_only(plan, group)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)  # the plan's pipe is read to its end; nothing of it here
        os.close(null)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives as long as the rank
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        listen_fd = listener.fileno() if rank == 0 else None
        if listen_fd is None:
            listener.close()
        _rank_main(plan, group, rank, w_up, r_down, listen_fd, port)
    except BaseException:  # noqa: BLE001 - a harness failure: say it in the rank's log
        code = 3
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


# --------------------------------------------------------------------------
# The parent side


class _Group:
    """The parent's view of one world size's ranks while its cases run."""

    def __init__(self, plan: dict, group: dict):
        self.plan, self.group = plan, group
        self.world = group["world_size"]
        self.sel = selectors.DefaultSelector()
        self.pids: list[int] = []
        self.down: list[int] = []
        self.buf = [b""] * self.world
        self.eof = [False] * self.world
        self.waiting: list[dict | None] = [None] * self.world
        self.expected: dict[str, list] = {c["id"]: [None] * self.world for c in group["cases"]}
        # Whether a rank has said it starts loading the learner's file: from then on its
        # pipe carries what the learner may have written too, so expected values stop.
        self.loading = [False] * self.world
        self.inbox: list[list[dict]] = [[] for _ in range(self.world)]
        self.inodes: list[list[int]] = [[] for _ in range(self.world)]  # each rank's sockets
        self.logs: list[int] = []  # each rank's stdout and stderr: a file with no name

    def start(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        port = listener.getsockname()[1]
        try:
            open_fds: list[int] = []
            for rank in range(self.world):
                # Unlinked at once: a file in the shared tmp folder that one rank writes
                # (its prints) and another reads would pass the data past the wire count.
                name = f"rank{rank}.out"
                log = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_TRUNC, 0o600)
                os.unlink(name)
                self.logs.append(log)
                pid, up, down = _fork_rank(self.plan, self.group, rank, listener, port, log, open_fds)
                self.pids.append(pid)
                self.down.append(down)
                open_fds += [up, down, log]
                os.set_blocking(up, False)
                self.sel.register(up, selectors.EVENT_READ, rank)
        finally:
            listener.close()

    def pump(self, deadline: float) -> None:
        """Read what the ranks sent, for at most until ``deadline``; sort it into the inboxes."""
        timeout = max(0.0, deadline - time.monotonic())
        for key, _ in self.sel.select(timeout=min(timeout, 0.2)):
            rank = key.data
            try:
                data = os.read(key.fd, 1 << 16)
            except BlockingIOError:
                continue
            if not data:
                self.eof[rank] = True
                self.sel.unregister(key.fd)
                continue
            self.buf[rank] += data
            *lines, self.buf[rank] = self.buf[rank].split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue  # the learner wrote to our pipe: ignore it
                kind = msg.get("type")
                if kind == "wait":
                    self.waiting[rank] = msg
                elif kind == "unwait":
                    self.waiting[rank] = None
                elif kind == "sockets":
                    if not self.loading[rank] and isinstance(msg.get("inodes"), list):
                        self.inodes[rank] = [int(i) for i in msg["inodes"]]
                elif kind == "expected":
                    # Only from the trusted phase: the learner's code can reach this pipe
                    # (``dist.send.__self__._notify``) and would otherwise set the answer.
                    if not self.loading[rank] and msg.get("case") in self.expected:
                        self.expected[msg["case"]][rank] = msg["expected"]
                else:
                    if kind == "loading":
                        self.loading[rank] = True
                    self.inbox[rank].append(msg)

    def take(self, rank: int, kinds: tuple[str, ...]) -> dict | None:
        for i, msg in enumerate(self.inbox[rank]):
            if msg.get("type") in kinds:
                return self.inbox[rank].pop(i)
        return None

    def output(self, rank: int, start: int, limit: int) -> str:
        try:
            data = os.pread(self.logs[rank], limit + 1, start)
        except (OSError, IndexError):
            return ""
        text = data[:limit].decode("utf-8", errors="replace")
        return text + ("\n..." if len(data) > limit else "")

    def out_size(self, rank: int) -> int:
        try:
            return os.fstat(self.logs[rank]).st_size
        except (OSError, IndexError):
            return 0

    def exit_code(self, rank: int, wait_s: float = 1.0) -> int | None:
        """The exit code of a rank whose pipe closed (negative: the signal), None if still running."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                pid, status = os.waitpid(self.pids[rank], os.WNOHANG)
            except ChildProcessError:
                return None
            if pid:
                return os.waitstatus_to_exitcode(status)
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.02)

    def kill(self) -> None:
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in self.pids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        for fd in self.down + self.logs:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.sel.close()


def _waiting_list(g: _Group, replies: dict[int, dict]) -> list[dict]:
    rows = []
    for rank in range(g.world):
        w = g.waiting[rank]
        if rank in replies:
            op = "finished" if replies[rank]["type"] == "result" else "raised"
            rows.append({"rank": rank, "op": op, "peer": None, "bytes": None})
        elif w is None:
            rows.append({"rank": rank, "op": "running", "peer": None, "bytes": None})
        else:
            rows.append({"rank": rank, "op": w["op"], "peer": w["peer"], "bytes": w["bytes"]})
    return rows


def _run_group(plan: dict, group: dict, index: int, total: int) -> tuple[int, bool]:
    """Run one group's cases; return (how many case events were printed, whether to go on)."""
    import wire

    g = _Group(plan, group)
    cases = group["cases"]
    per_rank_output = int(plan.get("output_bytes_per_rank", 2048))

    def not_run(from_k: int, n: int) -> int:
        for case in cases[from_k:]:
            n += 1
            emit({"event": "case", "index": n, "total": total, "case": case, "status": "not_run",
                  "ranks": []})
        return n

    try:
        g.start()
        ready: set[int] = set()
        loading = False
        deadline = time.monotonic() + SETUP_S
        while len(ready) < g.world and time.monotonic() < deadline:
            g.pump(deadline)
            for rank in range(g.world):
                if rank in ready:
                    continue
                if not loading and g.take(rank, ("loading",)) is not None:
                    # Loading the learner's file gets the time of a case, not of our setup.
                    loading = True
                    deadline = min(deadline, time.monotonic() + float(plan["case_timeout_s"]))
                msg = g.take(rank, ("ready", "missing_function", "crash", "forbidden"))
                if msg is None:
                    if g.eof[rank]:
                        # Ended before it was ready: while loading the learner's file, their
                        # doing (os._exit at the top level); before that, ours.
                        if g.loading[rank]:
                            emit({"event": "error", "key": "import_died", "rank": rank,
                                  "returncode": g.exit_code(rank), "output": g.output(rank, 0, per_rank_output)})
                        else:
                            emit({"event": "error", "key": "harness_failed", "rank": rank,
                                  "returncode": g.exit_code(rank), "detail": g.output(rank, 0, 2000)})
                        return index, False
                    continue
                if msg["type"] == "ready":
                    ready.add(rank)
                elif msg["type"] == "missing_function":
                    emit({"event": "error", "key": "missing_function", "function": msg["function"]})
                    return index, False
                else:  # the learner's file raised while being imported
                    emit({"event": "error", "key": "import_error" if msg["type"] == "crash" else "forbidden_call",
                          "rank": rank, "exc": msg.get("exc"), "message": msg.get("message"),
                          "call": msg.get("call"), "kind": msg.get("kind"), "frames": msg.get("frames", []),
                          "output": g.output(rank, 0, per_rank_output)})
                    return index, False
        if len(ready) < g.world:
            key = "import_timeout" if loading else "setup_timeout"
            emit({"event": "error", "key": key, "world_size": g.world, "seconds": plan["case_timeout_s"],
                  "output": g.output(0, 0, per_rank_output)})
            return index, False

        for k, case in enumerate(cases):
            starts = [g.out_size(r) for r in range(g.world)]
            before = wire.snapshot()
            for fd in g.down:
                with contextlib.suppress(OSError):  # a rank that died shows as such below
                    os.write(fd, f"{k}\n".encode())
            deadline = time.monotonic() + float(plan["case_timeout_s"])
            replies: dict[int, dict] = {}
            first_error = None
            while len(replies) < g.world:
                now = time.monotonic()
                if now >= deadline:
                    break
                g.pump(deadline)
                for rank in range(g.world):
                    if rank not in replies:
                        msg = g.take(rank, ("result", "crash", "forbidden"))
                        if msg is not None:
                            replies[rank] = msg
                            if msg["type"] != "result" and first_error is None:
                                first_error = time.monotonic()
                                deadline = min(deadline, first_error + CRASH_GRACE_S)
                        elif g.eof[rank]:
                            replies[rank] = {"type": "died", "frames": []}
                            if first_error is None:
                                first_error = time.monotonic()
                                deadline = min(deadline, first_error + CRASH_GRACE_S)
            after = wire.snapshot()
            on_wire = wire.per_rank(before, after, g.inodes)
            index += 1
            timed_out = len(replies) < g.world and first_error is None
            finished = {r for r, m in replies.items() if m["type"] == "result"}
            ranks = []
            for rank in range(g.world):
                msg = replies.get(rank)
                ranks.append({"rank": rank, "expected": g.expected[case["id"]][rank],
                              "reply": msg, "output": g.output(rank, starts[rank], per_rank_output),
                              "wire": on_wire[rank]})
            status = "timeout" if timed_out else ("done" if len(finished) == g.world else "error")
            event = {"event": "case", "index": index, "total": total, "case": case, "status": status,
                     "ranks": ranks}
            if len(replies) < g.world:
                event["waiting"] = _waiting_list(g, replies)
            emit(event)
            if len(replies) < g.world or any(m["type"] == "died" for m in replies.values()):
                # The group's state is unknown now (messages in flight, ranks blocked): stop it.
                index = not_run(k + 1, index)
                break
        return index, True
    finally:
        g.kill()


def main() -> int:
    plan = json.loads(sys.stdin.buffer.read())
    sys.stdin.close()
    import bpf

    bpf.undumpable()  # before any rank is forked: they inherit it
    t0 = time.perf_counter()
    total = sum(len(g["cases"]) for g in plan["groups"])
    emit({"event": "start", "total": total})
    import torch  # noqa: F401 - once, here: every rank is forked with it loaded
    import torch.distributed  # noqa: F401

    index = 0
    for group in plan["groups"]:
        index, go_on = _run_group(plan, group, index, total)
        if not go_on:
            break
    emit({"event": "done", "duration_s": time.perf_counter() - t0})
    return 0


if __name__ == "__main__":
    sys.exit(main())
