"""The warm lab pool's bounds, without PyTorch: a warm process that never gets ready
costs a run at most the pool's one wait, and the next refill replaces it."""

from __future__ import annotations

import sys

from academy.labruns import pool as labpool
from tests.conftest import ROOT

ARGV = [sys.executable, "-m", "labs", "ring"]


def test_a_warm_process_that_never_gets_ready_costs_one_bounded_wait_and_is_replaced(monkeypatch, tmp_path):
    # Never says it is ready; exits when its stdin closes.
    monkeypatch.setattr(labpool._Warm, "ARGS", ("-c", "import sys; sys.stdin.read()"))
    deadlines = []
    fork = labpool._Warm.fork
    monkeypatch.setattr(labpool._Warm, "fork", lambda self, argv, out, deadline: (
        deadlines.append(deadline), fork(self, argv, out, deadline))[1])
    env = {"PATH": "/usr/bin:/bin"}
    pool = labpool.WarmPool(2, env, ROOT, ready_wait_s=0.2)
    pool.refill()
    first = [w.proc.pid for w in pool.ready]
    try:
        assert len(first) == 2
        assert pool.take(ARGV, env, tmp_path / "out.log") is None
        assert len(deadlines) == 2 and deadlines[0] == deadlines[1], \
            "one wait for the whole pool (the run's heartbeat waits with it), not one per process"
        assert [w.proc.pid for w in pool.ready] == first, "one still importing stays for the next run"
        monkeypatch.setattr(labpool, "IMPORT_S", 0.0)
        pool.refill()
        assert not set(first) & {w.proc.pid for w in pool.ready}, "stuck ones are replaced"
    finally:
        pool.close()


def test_a_run_in_another_environment_or_not_a_lab_is_not_taken(tmp_path):
    pool = labpool.WarmPool(1, {"A": "1"}, ROOT)
    assert pool.take(ARGV, {"A": "2"}, tmp_path / "o") is None
    assert pool.take([sys.executable, "-m", "labs.exercises", "grade"], {"A": "1"}, tmp_path / "o") is None


def test_a_grader_near_its_own_max_wait_gets_no_job(tmp_path):
    """A warm grader ends by itself after ``--max-wait`` with no job (exit 3): one that
    close to it is stopped, not handed a run that it could drop; a younger one is taken."""
    import subprocess
    import time

    env = {"PATH": "/usr/bin:/bin"}
    pool = labpool.GraderPool(1, env, ROOT, max_wait_s=100.0)

    def waiting(age_s: float):  # reads its job, as a grader does, then exits
        proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
        return (proc, time.monotonic() - age_s)

    argv = [sys.executable, "-m", "labs.exercises", "grade", "ring-allreduce", "x.py"]
    old, young = waiting(100.0 - labpool.TAKE_MARGIN_S + 1), waiting(1.0)
    try:
        pool.ready = [old]
        assert pool.take(argv, env, tmp_path / "out.log") is None
        assert old[0].poll() is not None, "the old one is stopped"
        pool.ready = [young]
        assert pool.take(argv, env, tmp_path / "out.log") is young[0]
        assert young[0].wait(timeout=10) == 0, "it got its job and the end of its stdin"
    finally:
        for proc, _started in (old, young):
            if proc.poll() is None:
                proc.kill()
