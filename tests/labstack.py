"""The lab queue's moving parts for tests and benchmarks: a throw-away Redis,
``python -m academy.worker`` processes, and the /proc checks on who started a rank.

Used by tests/test_lab_worker.py, tests/test_lab_scale.py and the queue rows
of ``make bench``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.procs import output_of

ROOT = Path(__file__).resolve().parent.parent
TERMINAL = ("done", "failed", "cancelled")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_redis(base: Path) -> tuple[str, subprocess.Popen] | str:
    """A Redis on a free 127.0.0.1 port with no persistence; (url, process), or why not."""
    binary = shutil.which("redis-server")
    if binary is None:
        return "no redis-server (Debian package 'redis-server'; `make test` installs it as root)"
    port = free_port()
    base.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(base), "--protected-mode", "yes"],
        stdout=open(base / "redis.log", "w"), stderr=subprocess.STDOUT, start_new_session=True,  # noqa: SIM115
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return f"redis://127.0.0.1:{port}/0", proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    return "redis-server did not answer: " + (base / "redis.log").read_text()[-500:]


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with_group(proc, signal.SIGKILL)
            proc.wait()


def with_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


# A worker's warm grader (academy.labruns.pool.GraderPool) is a sandbox with PyTorch imported:
# about 2.5 s of CPU, and the CPU a test's own labs wait for, at every worker's start. A
# test worker starts none unless its test grades exercises through it and says so
# (``LAB_WARM_EXERCISES`` in ``env`` or the test's environment).
NO_WARM_GRADER = {"LAB_WARM_EXERCISES": "0"}


class Worker:
    """One ``python -m academy.worker`` process with the given settings (`NO_WARM_GRADER`
    unless they say otherwise); its log in ``base``."""

    def __init__(self, base: Path, env: dict[str, str], *args: str, name: str = "w"):
        self.log = base / f"worker-{name}.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "academy.worker", *args], cwd=ROOT,
            env={**NO_WARM_GRADER, **os.environ, **env},
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT, start_new_session=True,  # noqa: SIM115
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while "serving" not in self.log.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the worker did not start: " + self.log.read_text()[-2000:])
            time.sleep(0.1)

    def wait_warm(self, timeout: float = 60) -> None:
        """Until its warm lab process (academy.labruns.pool) has imported PyTorch: a run taken
        after this forks from it. One taken before waits a moment, then starts fresh and
        imports PyTorch a second time, beside the warm process's import. With none started
        (memory short: the worker's runs all start fresh) there is nothing to wait for."""
        deadline = time.monotonic() + timeout
        while not re.search(r"warm lab process \d+ ready", self.log.read_text()):
            if not any("labs.warm" in cmdline(p) for p in descendants(self.pid)):
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("no warm lab process got ready: " + self.log.read_text()[-2000:])
            time.sleep(0.05)

    def stop(self) -> None:
        stop(self.proc)


# --------------------------------------------------------------------------
# Processes, read from /proc


def parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def descendants(root: int) -> list[int]:
    """Every live process below ``root``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            ppid = parent_of(int(entry))
            if ppid is not None:
                children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def is_lab(pid: int) -> bool:
    """A lab's CLI (``python -m labs LAB``, or a warm ``labs.warm`` running one) or a rank forked or spawned from it."""
    args = cmdline(pid)
    return any(a == "labs" and i > 0 and args[i - 1] == "-m" for i, a in enumerate(args)) \
        or any("labs.launch" in a for a in args) \
        or ("labs.warm" in args and given_a_run(pid))


def given_a_run(pid: int) -> bool:
    """A warm lab process, or a rank forked from it, once the worker gave it a run: the
    group's leader (the warm process) writes to the run's ``output.log``."""
    try:
        return output_of(os.getpgid(pid)).endswith("/output.log")
    except ProcessLookupError:
        return False


def processes_with_env(key: str, value: str) -> list[int]:
    """Live processes whose environment has ``key=value`` (an orphan check for one test run)."""
    needle = f"{key}={value}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    with open(f"/proc/{entry}/stat") as st:
                        if st.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                            found.append(int(entry))
        except OSError:
            continue
    return found


# --------------------------------------------------------------------------
# A web process under load: ``python -m tests.labstack LEARNERS LABS_EACH NAME``


def learners_main(argv: list[str] | None = None) -> None:
    """Sign up LEARNERS learners, each submits LABS_EACH tiny labs through the web side's
    code and polls the database until they end, as the page does; print one JSON line.

    A thread watches this process's children the whole time: a web process must
    never have one (the ranks belong under a worker).
    """
    import argparse
    import json
    import threading

    from academy.db import session_scope
    from academy.labruns import pages as labruns
    from academy.models import LabRun, Learner

    parser = argparse.ArgumentParser()
    parser.add_argument("learners", type=int)
    parser.add_argument("labs_each", type=int)
    parser.add_argument("name")
    args = parser.parse_args(argv)
    me, children, stop_watch = os.getpid(), set(), threading.Event()

    def watch() -> None:
        while not stop_watch.is_set():
            for entry in os.listdir("/proc"):
                if entry.isdigit() and parent_of(int(entry)) == me:
                    children.add((int(entry), " ".join(cmdline(int(entry)))))
            stop_watch.wait(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    with session_scope() as s:
        ids = []
        for i in range(args.learners):
            learner = Learner(email=f"{args.name}-{i}@example.org", password_hash="-")
            s.add(learner)
            s.flush()
            ids.append(learner.id)
    runs: list[int] = []
    refused: list[str] = []
    lock = threading.Lock()

    def learner(learner_id: int) -> None:
        for _ in range(args.labs_each):
            try:
                run_id = labruns.submit(lab="ring", params={"world_size": 2, "size": 1024},
                                        learner_id=learner_id, machine={})
            except labruns.LabRequestError as err:
                with lock:
                    refused.append(err.key)
                continue
            with lock:
                runs.append(run_id)
        while True:  # the page's poll, once a second here twice
            with session_scope() as s:
                mine = s.exec(select_runs(learner_id)).all()
            if all(r.status in TERMINAL for r in mine):
                return
            time.sleep(0.5)

    def select_runs(learner_id: int):
        from sqlmodel import select

        return select(LabRun).where(LabRun.learner_id == learner_id)

    threads = [threading.Thread(target=learner, args=(i,)) for i in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop_watch.set()
    watcher.join()
    print(json.dumps({"pid": me, "runs": sorted(runs), "refused": refused,
                      "children": sorted(children)}))


if __name__ == "__main__":
    learners_main()
