"""The rank-process toolkit (``labs/processes.py``) on its own: no torch, no sandbox.

What the launcher and the harness rely on: a rank's exit code and output, a rank that
holds no fd of the others' (the harness's ranks must have no way between them), an
output file with no name, and a kill that leaves no process and no fd behind.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from labs import processes
from tests.procs import gone


def _fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


def _open_files() -> list[str]:
    """What this process's fds point at (``pipe:[inode]``, a path): numbers get reused."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue  # the listing's own fd, closed by now
    return found


def test_a_forked_rank_reports_its_exit_code_and_output(tmp_path):
    group = processes.Group(folder=str(tmp_path))

    def body() -> int:
        print("hello from the rank")
        print("and its stderr", file=sys.stderr)
        return 7 if os.read(0, 10) == b"" else 8  # stdin is /dev/null

    index = group.fork(body)
    assert group.exit_code(index, wait_s=10) == 7
    text = group.output(index)
    assert "hello from the rank" in text and "and its stderr" in text
    assert group.tail(index, 15) == "and its stderr\n"
    assert group.output(index, 0, 5) == "hello\n..."
    assert list(tmp_path.iterdir()) == []  # the output file has no name
    group.kill()


def test_an_exception_is_exit_1_with_its_traceback():
    group = processes.Group()
    index = group.fork(lambda: 1 / 0)
    assert group.exit_code(index, wait_s=10) == 1
    assert "ZeroDivisionError" in group.output(index)
    group.kill()


def test_a_rank_holds_none_of_the_other_ranks_fds_and_kill_leaves_nothing():
    before = _fds()
    held: list[int] = []
    first, second = processes.Group(held=held), processes.Group(held=held)
    try:
        r0, w0 = os.pipe()
        first.fork(signal.pause, parent_fds=[r0], child_fds=[w0])
        r1, w1 = os.pipe()

        def report_files() -> int:
            os.write(w1, json.dumps(_open_files()).encode())
            return 0

        second.fork(report_files, parent_fds=[r1], child_fds=[w1])
        assert second.exit_code(0, wait_s=10) == 0
        seen = json.loads(os.read(r1, 1 << 16))
        # The first group's end of its pipe and its output file are not open in the second's rank.
        for fd in (r0, first.outputs[0]):
            assert os.readlink(f"/proc/self/fd/{fd}") not in seen, seen
        assert first.exit_code(0) is None  # still running (it waits for a signal)
        pid = first.pids[0]
    finally:
        first.kill()
        second.kill()
    assert first.exit_code(0) == -signal.SIGKILL and gone(pid)
    assert held == [] and _fds() == before  # every fd the groups held is closed
    first.kill()  # again: nothing to do
    assert first.output(0) == ""


def test_a_spawned_rank_inherits_only_what_it_is_given():
    group = processes.Group()
    read, write = os.pipe()
    other, unrelated = os.pipe()
    code = ("import os, sys; fd = int(sys.argv[1]); os.write(fd, b'ok'); "
            "print('extra open' if os.path.exists(f'/proc/self/fd/{sys.argv[2]}') else 'clean')")
    index = group.spawn([sys.executable, "-c", code, str(write), str(unrelated)], env=dict(os.environ),
                        child_fds=[write], parent_fds=[read])
    assert group.exit_code(index, wait_s=30) == 0
    assert os.read(read, 10) == b"ok"
    assert group.output(index).strip() == "clean"
    group.kill()
    os.close(other)
    os.close(unrelated)


def test_die_with_parent_exits_when_the_parent_is_already_gone():
    group = processes.Group()
    index = group.fork(lambda: processes.die_with_parent(os.getppid() + 1_000_000) or 0)
    assert group.exit_code(index, wait_s=10) == 1
    start = time.monotonic()
    group.kill()
    assert time.monotonic() - start < 5
