"""Rank processes: start N of them, learn how each ended, read what it printed, kill them all.

    from labs import processes            # the lab launcher (labs.launch)
    import processes                      # the exercise harness, inside the sandbox

    group = processes.Group()
    up, down = os.pipe()
    group.fork(lambda: rank_main(down), child_fds=[down], parent_fds=[up])  # or group.spawn(argv, ...)
    group.exit_code(0, wait_s=1.0)        # None while rank 0 runs; -9: SIGKILL
    group.output(0, 0, 2000)              # what it printed on stdout and stderr
    group.kill()                          # SIGKILL, reap, close: nothing outlives the group

The one supervisor of N local processes, for its two users: the lab launcher
(``labs.launch``: its ranks' reports and the verdicts) and the exercise
harness (``labs/exercises/runtime/harness.py``: the learner's ranks and the
grading). What a rank runs, what its reports mean and when a run is over are
theirs; here is what every group of ranks needs:

- Start: `Group.fork` runs a function in a child, which inherits the parent's
  imports (torch among them) and so starts in a fraction of a second, with
  nothing of the parent's in reach: stdin is /dev/null, stdout and stderr go
  to its output file, every fd the group holds for the other ranks is closed,
  SIGTERM and SIGINT are the default again, and it never returns into the
  caller's code. `Group.spawn` starts a fresh program instead (a caller with
  threads must not fork), which inherits only the fds it is given.
- Output: each rank writes to a file with no name, made and unlinked at once
  in the group's folder, which the group reads back by offset: nothing is left
  to delete, and no other process can open it (in a folder the ranks share, a
  file one rank writes and another reads would be a way between them).
- Exit codes: `Group.exit_code` reaps without blocking, or waits a bounded
  while, and remembers; negative is the signal that killed it, as in
  ``subprocess``.
- No orphans: a rank calls `die_with_parent` to have the kernel SIGKILL it
  when its parent dies; `Group.kill` SIGKILLs every rank still running, reaps
  them all and closes every fd the group holds.

Standard library only, and nothing else of the project: the sandbox puts this
file on the program's path beside the harness (``labs.sandbox``), where
nothing of ``labs`` can be imported.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence

REAP_S = 10.0  # how long `Group.kill` waits for each SIGKILLed rank (one stuck in the kernel)

# A rank that torchrun starts is ``python -c RANK_PRELUDE LAB ...`` (torchrun's ``--no-python``):
# ``python -m labs LAB ...`` that first asks the kernel to SIGKILL it when its torchrun dies.
# torchrun starts ranks in sessions of their own, so without this a torchrun killed with
# ``kill -9`` (or dying with the worker that started it) would leave its ranks running
# (``academy.labruns.kinds.torchrun_command``, ``labs.failure.supervise``).
RANK_PRELUDE = ("import ctypes, runpy, signal; "
                "ctypes.CDLL('libc.so.6').prctl(1, signal.SIGKILL); "  # PR_SET_PDEATHSIG
                "runpy.run_module('labs', run_name='__main__', alter_sys=True)")


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process when its parent dies (``PR_SET_PDEATHSIG``);
    exit at once if the parent (``parent_pid``) is gone already."""
    if sys.platform.startswith("linux"):
        import ctypes  # here, not above: the harness's ranks never need it

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:
        os._exit(1)


class Group:
    """N rank processes (index = the order they were started in) and what this
    process holds for them: their output files and its ends of their pipes.

    ``folder``: where the output files are made (default: the temporary folder).
    ``held``: a list shared by groups started side by side, so that a rank of one
    closes the fds of the others too; every fd a group holds is in it until `kill`.
    """

    def __init__(self, folder: str | None = None, held: list[int] | None = None):
        self.folder = folder
        self.held = [] if held is None else held
        self.pids: list[int] = []
        self.outputs: list[int] = []  # per rank: the fd of its output file (-1 once closed)
        self.codes: list[int | None] = []  # per rank: its exit code, once known
        self._fds: list[int] = []  # what `kill` closes: this group's part of ``held``
        self._popens: dict[int, subprocess.Popen] = {}  # the spawned ranks, by index

    # -- starting

    def fork(self, body: Callable[[], int | None], *, child_fds: Sequence[int] = (),
             parent_fds: Sequence[int] = ()) -> int:
        """Start a rank that runs ``body()`` and exits with what it returns (None: 0;
        an exception escaping it: its traceback in the output, exit 1). ``child_fds``:
        the rank's ends of its pipes, closed here once it runs; ``parent_fds``: ours,
        closed in the rank, held by the group until `kill`. Returns the rank's index."""
        output = self._hold(parent_fds)
        try:
            sys.stdout.flush()  # or the rank prints what is buffered here a second time
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _run_child(body, output, close=self.held)
        finally:
            _close(child_fds)
        return self._started(pid)

    def spawn(self, argv: list[str], *, env: dict[str, str], cwd: str | None = None,
              child_fds: Sequence[int] = (), parent_fds: Sequence[int] = ()) -> int:
        """Start a rank as a fresh program ``argv``: it inherits ``child_fds`` (the same
        numbers there) and no other fd of ours; otherwise as `fork`."""
        output = self._hold(parent_fds)
        try:
            popen = subprocess.Popen(argv, env=env, cwd=cwd, pass_fds=tuple(child_fds),
                                     stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT)
        finally:
            _close(child_fds)
        index = self._started(popen.pid)
        self._popens[index] = popen
        return index

    def _hold(self, parent_fds: Sequence[int]) -> int:
        """Take ``parent_fds`` into the group, with a new output file; returns the file's fd."""
        fd, name = tempfile.mkstemp(prefix="rank-", suffix=".out", dir=self.folder)
        os.unlink(name)
        self.outputs.append(fd)
        for mine in (*parent_fds, fd):
            self._fds.append(mine)
            self.held.append(mine)
        return fd

    def _started(self, pid: int) -> int:
        self.pids.append(pid)
        self.codes.append(None)
        return len(self.pids) - 1

    # -- watching

    def exit_code(self, index: int, wait_s: float = 0.0) -> int | None:
        """How rank ``index`` ended (negative: the signal that killed it), None while it
        runs; waits up to ``wait_s`` seconds for it. -1 when it is no child of ours any
        more (a caller that ignores SIGCHLD has the kernel reap it)."""
        if self.codes[index] is None:
            popen = self._popens.get(index)
            if popen is None:
                self.codes[index] = _wait(self.pids[index], wait_s)
            else:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.codes[index] = popen.wait(timeout=wait_s) if wait_s else popen.poll()
        return self.codes[index]

    def output(self, index: int, start: int = 0, limit: int = 2048) -> str:
        """Up to ``limit`` bytes of what rank ``index`` printed, from byte ``start``, as
        text; ``"\\n..."`` at the end says there is more."""
        try:
            data = os.pread(self.outputs[index], limit + 1, start)
        except (OSError, IndexError):
            return ""
        text = data[:limit].decode("utf-8", errors="replace")
        return text + ("\n..." if len(data) > limit else "")

    def output_size(self, index: int) -> int:
        try:
            return os.fstat(self.outputs[index]).st_size
        except (OSError, IndexError):
            return 0

    def tail(self, index: int, limit: int) -> str:
        """The last ``limit`` bytes that rank ``index`` printed, as text."""
        try:
            fd = self.outputs[index]
            return os.pread(fd, limit, max(0, os.fstat(fd).st_size - limit)).decode(errors="replace")
        except (OSError, IndexError):
            return ""

    # -- ending

    def kill(self) -> None:
        """SIGKILL every rank still running, reap them all (`REAP_S` each at most) and
        close every fd the group holds. A second call does nothing."""
        for index, pid in enumerate(self.pids):
            if self.codes[index] is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for index in range(len(self.pids)):
            self.exit_code(index, wait_s=REAP_S)
        _close(self._fds)
        for fd in self._fds:
            with contextlib.suppress(ValueError):
                self.held.remove(fd)
        # Closed fd numbers are reused by later opens: never read or close them again.
        self._fds = []
        self.outputs = [-1] * len(self.outputs)


def _run_child(body: Callable[[], int | None], output: int, *, close: Sequence[int]) -> None:
    """The forked rank, from the fork to its exit: it never returns into the caller's code."""
    code = 1
    try:
        _close(fd for fd in close if fd != output)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked rank inherits its parent's handlers
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(output)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives as long as the rank
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        code = body() or 0
    except BaseException:  # noqa: BLE001 - whatever ends the rank: say it in its output
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _wait(pid: int, wait_s: float) -> int | None:
    """``pid``'s exit code once it has exited, polled for at most ``wait_s``; None if it has not.

    The polls start 0.5 ms apart and double to 10 ms: a rank just SIGKILLed is gone within
    a millisecond or two, and an exercise's harness reaps each group's ranks before the
    next group starts (a first sleep of 10 ms cost a grading 30 to 50 ms)."""
    deadline = time.monotonic() + wait_s
    pause = 0.0005
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return -1
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            return None
        time.sleep(pause)
        pause = min(0.01, 2 * pause)


def _close(fds) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
