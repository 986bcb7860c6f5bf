"""Slow one process down by a factor: a cgroup CPU quota where we may set one, else a stop/continue duty cycle.

    with Throttle.start("auto") as throttle:   # "cgroup", "stop" or "auto" (cgroup, else stop)
        throttle.set(3)                        # from now on this process computes 3 times slower
        ...
        throttle.set(1)                        # full speed again

Two ways, one meaning ("this process gets 1/f of a CPU core"):

- ``cgroup``: the process moves into a cgroup of its own whose CPU quota is
  1/f of a core (cgroup v1 ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``,
  v2 ``cpu.max``), with a short period (`PERIOD_US`) so that the quota is
  spent in slices far shorter than a training step. The kernel enforces it
  on every thread of the process, gloo's among them. It needs a writable
  cgroup hierarchy with the cpu controller (root on most machines). A quota
  only binds a process that would otherwise use more than 1/f of a core: on
  a machine whose cores are already shared by more runnable threads than
  cores, it slows the rank by less than f.
- ``stop``: a small helper process (``python -c``, started by the rank, dying
  with it) sends SIGSTOP and SIGCONT in turn: running for 1/f of every
  `DUTY_PERIOD_S`, stopped for the rest. It needs nothing but the right to
  signal our own process, and slows the rank by about f in wall-clock time
  whatever else the machine runs.

The cgroup is named after the rank's pid (``dpa-straggler-<pid>``); one left
behind by a rank killed with SIGKILL is removed by the next `Throttle.start`
on the machine (an empty cgroup whose pid is gone). No torch here.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

PERIOD_US = 5000  # the quota's period: 5 ms, so a 20 ms step sees four slices, not one long stall
DUTY_PERIOD_S = 0.01  # the stop/continue cycle: 10 ms
PREFIX = "dpa-straggler-"
METHODS = ("auto", "cgroup", "stop")

# The helper of the "stop" way: run for 1/f of each period, stopped for the rest;
# a new factor arrives as a line on stdin, and EOF (the rank has gone or is done)
# ends it with the rank running. It asks to die with the rank (PR_SET_PDEATHSIG).
_DUTY = r"""
import ctypes, os, select, signal, sys, time
ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)
pid, period, factor = int(sys.argv[1]), float(sys.argv[2]), 1.0
def cont():
    try: os.kill(pid, signal.SIGCONT)
    except ProcessLookupError: sys.exit(0)
while True:
    wait = None if factor <= 1 else period / factor
    if factor > 1:
        cont()
    ready, _, _ = select.select([0], [], [], wait)
    if ready:
        line = sys.stdin.readline()
        if not line:
            cont(); sys.exit(0)
        factor = float(line)
        continue
    if factor > 1:
        try: os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError: sys.exit(0)
        ready, _, _ = select.select([0], [], [], period * (1 - 1 / factor))
        cont()
        if ready:
            line = sys.stdin.readline()
            if not line:
                sys.exit(0)
            factor = float(line)
"""


class Unavailable(RuntimeError):
    """The asked way cannot be used here; the message says why."""


def _cpu_dir() -> tuple[Path, str] | None:
    """(this process's cgroup directory with the cpu controller, "v1" | "v2"), if writable."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            base = Path("/sys/fs/cgroup/cpu") if Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists() \
                else Path("/sys/fs/cgroup/cpu,cpuacct")
            here = base / path.lstrip("/")
            return (here, "v1") if os.access(here, os.W_OK) else None
    for line in lines:
        if line.startswith("0::"):
            here = Path("/sys/fs/cgroup") / line[3:].strip().lstrip("/")
            try:
                ok = "cpu" in (here / "cgroup.controllers").read_text().split()
            except OSError:
                return None
            return (here, "v2") if ok and os.access(here, os.W_OK) else None
    return None


def sweep(parent: Path) -> None:
    """Remove the cgroups of ranks that are gone (a SIGKILLed rank cannot remove its own)."""
    for path in parent.glob(f"{PREFIX}*"):
        try:
            pid = int(path.name[len(PREFIX):])
            os.kill(pid, 0)
        except ProcessLookupError:
            with contextlib.suppress(OSError):
                path.rmdir()
        except (ValueError, PermissionError):
            continue


class Throttle:
    """This process slowed to 1/factor of a core by ``method`` ("cgroup" or "stop")."""

    def __init__(self, method: str, *, group: Path | None = None, parent: Path | None = None,
                 kind: str = "", helper: subprocess.Popen | None = None):
        self.method, self.factor = method, 1.0
        self._group, self._parent, self._kind, self._helper = group, parent, kind, helper

    @classmethod
    def start(cls, method: str = "auto") -> Throttle:
        """A throttle at factor 1 (full speed). ``auto``: a cgroup if one can be made, else stop/continue.
        Raises `Unavailable` when ``cgroup`` is asked and cannot be had."""
        if method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
        if method in ("auto", "cgroup"):
            try:
                return cls._cgroup()
            except (OSError, Unavailable) as exc:
                if method == "cgroup":
                    raise Unavailable(f"no cgroup with a CPU quota can be made here: {exc}") from None
        helper = subprocess.Popen([sys.executable, "-c", _DUTY, str(os.getpid()), str(DUTY_PERIOD_S)],
                                  stdin=subprocess.PIPE, text=True, close_fds=True)
        return cls("stop", helper=helper)

    @classmethod
    def _cgroup(cls) -> Throttle:
        found = _cpu_dir()
        if found is None:
            raise Unavailable("no writable cgroup hierarchy with the cpu controller")
        parent, kind = found
        sweep(parent)
        group = parent / f"{PREFIX}{os.getpid()}"
        if kind == "v2":
            enabled = (parent / "cgroup.subtree_control").read_text().split()
            if "cpu" not in enabled:  # fails (EBUSY) where the parent holds processes itself
                (parent / "cgroup.subtree_control").write_text("+cpu")
        group.mkdir(exist_ok=True)
        throttle = cls("cgroup", group=group, parent=parent, kind=kind)
        try:
            throttle._quota(1.0)
            (group / "cgroup.procs").write_text(str(os.getpid()))  # every thread of the process
        except OSError:
            throttle.close()
            raise
        return throttle

    def _quota(self, factor: float) -> None:
        if self._kind == "v1":
            (self._group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (self._group / "cpu.cfs_quota_us").write_text(
                "-1" if factor <= 1 else str(max(1000, round(PERIOD_US / factor))))
        else:
            quota = "max" if factor <= 1 else str(max(1000, round(PERIOD_US / factor)))
            (self._group / "cpu.max").write_text(f"{quota} {PERIOD_US}")

    def set(self, factor: float) -> None:
        """From now on, 1/factor of a core (1: no limit)."""
        if factor == self.factor:
            return
        self.factor = factor
        if self.method == "cgroup":
            self._quota(factor)
        else:
            self._helper.stdin.write(f"{factor}\n")
            self._helper.stdin.flush()

    def close(self) -> None:
        """Full speed, and nothing left behind: the cgroup left and removed, the helper ended."""
        if self.method == "cgroup" and self._group is not None:
            with contextlib.suppress(OSError):
                (self._parent / "cgroup.procs").write_text(str(os.getpid()))
            for _ in range(50):  # rmdir fails while the kernel still counts us in it
                try:
                    self._group.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
            self._group = None
        elif self._helper is not None:
            with contextlib.suppress(OSError):
                self._helper.stdin.close()  # EOF: it continues us and exits
            try:
                self._helper.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._helper.kill()
                self._helper.wait()
            self._helper = None
        self.factor = 1.0

    def __enter__(self) -> Throttle:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()
