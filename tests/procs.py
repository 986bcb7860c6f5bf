"""Process checks shared by the lab tests."""

from __future__ import annotations

import os
import time
from pathlib import Path


def gone(pid: int, wait: float = 5.0) -> bool:
    """True once ``pid`` has exited (a zombie awaiting its reaper counts as gone)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def group_members(pgid: int) -> list[int]:
    """Process ids still alive in process group ``pgid`` (a lab run's ranks)."""
    alive = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == pgid:
                    alive.append(int(entry.name))
            except (ProcessLookupError, PermissionError):
                continue
    return alive


def command_lines():
    """(pid, argv as bytes) of every process this host lets us read, skipping those that end meanwhile."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                yield int(entry.name), (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue


def lab_pids(run_id: int, worker_pid: int | None = None) -> list[int]:
    """Live processes of a lab run, wherever its worker is on this host: the CLI
    (``python -m labs ... --out <workroot>/run-<id>-.../result.json``, or a warm
    ``python -m labs.warm`` writing to that folder's ``output.log``) and its
    process group, which holds the ranks. Run ids repeat across databases (other
    tests, another xdist worker): ``worker_pid`` keeps to that worker's workroot
    (``<host>-<pid>``)."""
    mark = (f"-{worker_pid}" if worker_pid else "") + f"/run-{run_id}-"
    for pid, args in command_lines():
        if (b"labs" in args and any(mark.encode() in a for a in args)) \
                or (b"labs.warm" in args and mark in output_of(pid)):
            try:
                leader = os.getpgid(pid) == pid
            except ProcessLookupError:
                continue
            if leader:
                return group_members(pid)
    return []


def output_of(pid: int) -> str:
    """Where ``pid``'s stdout goes: a lab run's ``output.log`` in its folder, also for a
    warm lab process (``python -m labs.warm``), whose command line names no run."""
    try:
        return os.readlink(f"/proc/{pid}/fd/1")
    except OSError:
        return ""
