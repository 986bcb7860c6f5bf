"""Lab runs as jobs on the queue, run by ``python -m academy.worker`` processes.

Each path that the stack decides (claim, cancel, exactly once, fair use, the
reaper) runs twice: on the embedded stack (SQLite database, huey's SQLite
queue beside it) and on the multi-machine one (PostgreSQL, Redis), both
started here from Debian's packages and skipped with the reason where they
cannot start; what a worker does with its own processes runs on the first. The worker is a real process; the checks read /proc and the
database, as a second machine would see them.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from sqlmodel import select

from academy.db import session_scope
from academy.labruns import queue as labqueue
from academy.models import LabRun, LabWorker, utcnow
from tests.conftest import copy_of, use_database
from tests.factories import wait_for_run
from tests.labstack import (
    Worker,
    cmdline,
    descendants,
    is_lab,
    processes_with_env,
    start_redis,
)
from tests.procs import gone

HANG = {"world_size": 2, "size": 1024, "fail_mode": "hang", "fail_rank": 1, "fail_at_step": 0}
TINY = {"world_size": 2, "size": 1024}
# The reaper fails a run whose worker sent no heartbeat for this long (the product's default is
# 10 s). 3 s was short enough that a live worker under a load of 8 missed it in a cancel test.
DEAD_AFTER_S = 5


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory):
    started = start_redis(tmp_path_factory.mktemp("redis"))
    if isinstance(started, str):
        pytest.skip(started)
    url, proc = started
    yield url
    proc.kill()
    proc.wait()


def fresh_pg_database(url: str, *, template: str | None = None) -> str:
    """A new database on the test cluster (empty, or a copy of ``template``), so that each test starts clean."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    copy = f' TEMPLATE "{template}"' if template else ""
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"{copy}')
    return url.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture(scope="session")
def pg_template(postgres_url) -> str:
    """A database on the test cluster migrated to the newest revision once per session: each
    test's database is a copy of it (CREATE DATABASE ... TEMPLATE), as SQLite's migrated_template."""
    from academy.db import make_engine, migrate

    url = fresh_pg_database(postgres_url)
    eng = make_engine(url)
    migrate(eng)
    eng.dispose()  # a template must have no connection while it is copied
    return url.rsplit("/", 1)[1]


class Stack:
    """The settings every process of one test shares, and where its workers keep files.

    A test that is not about the warm lab process gives its workers none
    (``LAB_WARM_POOL="0"``): its ring runs start fresh, each importing PyTorch
    (about 2.7 s of CPU), where a warm process imports every lab (about 5 s)."""

    def __init__(self, env: dict[str, str], base: Path):
        self.env, self.base = env, base
        self.workers: list[Worker] = []

    def worker(self, *args: str, name: str = "w", **settings: str) -> Worker:
        """A worker with the stack's settings and ``settings`` (e.g. ``LAB_WARM_POOL="0"``),
        once it serves and, when it has one, its warm lab process is ready: a run submitted
        next forks from it, as on a worker that has been up a while (one taken sooner would
        start fresh and import PyTorch beside the warm process's import)."""
        env = {**self.env, **settings}
        w = Worker(self.base, env, *args, name=name)
        self.workers.append(w)
        w.wait_ready()
        w.wait_warm()  # returns at once when the worker started none
        return w

    @property
    def workroots(self) -> Path:
        return self.base / "tmp" / "dpa-labs"


@pytest.fixture(params=["sqlite", pytest.param("postgres+redis", marks=pytest.mark.postgres)])
def stack(request, tmp_path, monkeypatch):
    (tmp_path / "tmp").mkdir()
    # No warm grader (tests.labstack.NO_WARM_GRADER): only the tests about them grade an
    # exercise, and they ask for one.
    env = {"LAB_QUEUE_URL": "", "SECRETS_DIR": str(tmp_path / "secrets"),
           "LAB_DEAD_AFTER_S": str(DEAD_AFTER_S),
           "TMPDIR": str(tmp_path / "tmp"), "DPA_TEST_RUN": uuid.uuid4().hex}
    if request.param == "sqlite":
        env["DATABASE_URL"] = copy_of(request.getfixturevalue("migrated_template"), tmp_path / "app.db")
    else:
        import redis

        env["DATABASE_URL"] = fresh_pg_database(request.getfixturevalue("postgres_url"),
                                                template=request.getfixturevalue("pg_template"))
        env["LAB_QUEUE_URL"] = request.getfixturevalue("redis_url")
        redis.Redis.from_url(env["LAB_QUEUE_URL"]).flushdb()
    database = use_database(monkeypatch, **{k: v for k, v in env.items() if k != "TMPDIR"})
    next(database)
    s = Stack(env, tmp_path)
    try:
        yield s
    finally:
        for w in s.workers:
            w.stop()
        next(database, None)
    assert processes_with_env("DPA_TEST_RUN", env["DPA_TEST_RUN"]) == [], "a process outlived its test"


# What a worker does with its processes (kill, stop, warm lab processes, warm graders) does not
# depend on where the runs and the queue live: those tests run on the embedded stack only. The
# paths that do (claim, cancel, exactly once, fair use, the reaper) run on both.
SQLITE_ONLY = pytest.mark.parametrize("stack", ["sqlite"], indirect=True)


def submit(params: dict, *, learner_id: int | None = None) -> int:
    return labqueue.submit(lab="ring", params=params, learner_id=learner_id, machine={})


def run(run_id: int) -> LabRun:
    with session_scope() as s:
        return s.get(LabRun, run_id)


def wait_logged(worker: Worker, text: str, timeout: float = 30) -> str:
    """The worker's log once it holds ``text`` (or as it is after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while text not in (log := worker.log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return log


def lab_processes(worker: Worker, at_least: int, timeout: float = 60) -> list[int]:
    """The lab processes under ``worker`` once there are ``at_least`` (CLI + ranks)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [p for p in descendants(worker.pid) if is_lab(p)]
        if len(found) >= at_least:
            return found
        time.sleep(0.1)
    raise AssertionError(f"fewer than {at_least} lab processes under the worker")


def test_a_run_goes_through_the_worker_and_leaves_nothing(stack):
    w = stack.worker("--concurrency", "1")
    run_id = submit(TINY)
    done = wait_for_run(run_id)
    assert done.status == "done", done.error
    assert done.result["summary"]["correct"]
    assert done.worker and done.worker.endswith(f":{w.pid}")
    assert done.progress and done.progress.get("phase"), "the worker wrote the last progress event"
    assert done.started_at and done.finished_at and done.heartbeat_at
    # The row says "done" before the worker tidies up; its log says "ended" after.
    log = wait_logged(w, f"run {run_id}: ended")
    assert log.count(f"run {run_id}: claimed") == 1
    assert list(stack.workroots.glob("*/run-*")) == [], "the run's folder is removed"
    assert labqueue.pending("cpu") == 0


def test_cancel_kills_the_labs_process_group_and_a_queued_run_is_dropped(stack):
    w = stack.worker("--concurrency", "1", LAB_WARM_POOL="0")  # fresh (a forked run's cancel: test_labs_page)
    hang = submit(HANG)
    waiting = submit(HANG)
    wait_for_run(hang, until=("running",))
    pids = lab_processes(w, 3)  # the CLI and its two ranks, all under the worker
    assert labqueue.queue_position(waiting) == 1 and labqueue.queue_position(hang) is None
    running = run(hang)
    assert running.heartbeat_at is not None

    assert labqueue.request_cancel(waiting)
    assert run(waiting).status == "cancelled", "a queued run is dropped at once"
    assert labqueue.request_cancel(hang)
    ended = wait_for_run(hang, timeout=30)
    assert ended.status == "cancelled" and ended.error == {"kind": "cancelled"}, ended.error
    assert all(gone(pid) for pid in pids), "cancel stopped every process of the lab"
    assert labqueue.request_cancel(hang) is False, "an ended run cannot be cancelled again"
    # The worker took the dropped run's message and skipped it: never started.
    log = wait_logged(w, f"run {waiting}: not queued")
    assert f"run {waiting}: not queued" in log
    assert f"run {waiting}: claimed" not in log
    assert run(waiting).started_at is None


@SQLITE_ONLY
def test_a_killed_worker_leaves_a_failed_run_with_a_reason_and_no_process(stack):
    w = stack.worker("--concurrency", "1", name="doomed", LAB_WARM_POOL="0")  # forked runs: test_lab_scale
    hang = submit(HANG)
    wait_for_run(hang, until=("running",))
    pids = lab_processes(w, 3)
    os.kill(w.pid, signal.SIGKILL)  # as `kill -9`: no chance to clean up
    w.proc.wait()
    assert all(gone(pid, wait=10) for pid in pids), "the lab died with its worker"

    # Nobody else is up: the reaper that fails the run is the one the page calls.
    deadline = time.monotonic() + 30
    while run(hang).status == "running" and time.monotonic() < deadline:
        labqueue.reap()
        time.sleep(0.5)
    lost = run(hang)
    assert lost.status == "failed", "within 30 s of the kill"
    assert lost.error["kind"] == "worker_lost" and lost.error["worker"].endswith(f":{w.pid}")
    assert str(DEAD_AFTER_S) in lost.error["message"]
    # The next worker on this host removes the dead one's working folder.
    left = list(stack.workroots.glob(f"*-{w.pid}"))
    assert left, "a SIGKILLed worker cannot tidy its own folder"
    stack.worker("--concurrency", "1", name="next", LAB_WARM_POOL="0")  # it tidies before it serves
    assert not any(p.exists() for p in left)


@SQLITE_ONLY
def test_a_stopped_worker_records_its_running_lab_as_stopped(stack):
    w = stack.worker("--concurrency", "1")
    hang = submit(HANG)
    wait_for_run(hang, until=("running",))
    pids = lab_processes(w, 3)
    w.proc.send_signal(signal.SIGTERM)
    assert w.proc.wait(timeout=30) == 0
    ended = run(hang)
    assert ended.status == "failed" and ended.error["kind"] == "worker_stopped"
    assert all(gone(pid) for pid in pids)
    with session_scope() as s:
        assert s.exec(select(LabWorker)).all() == [], "a worker that stops says so"


def test_two_workers_never_run_one_job_twice(stack):
    a = stack.worker("--concurrency", "2", name="a", LAB_WARM_POOL="0")
    b = stack.worker("--concurrency", "2", name="b", LAB_WARM_POOL="0")
    ids = [submit(TINY, learner_id=None) for _ in range(2)]
    # Guests: each submission counts against the session's own ids, none here.
    for run_id in ids:
        assert wait_for_run(run_id).status == "done"
    logs = a.log.read_text() + b.log.read_text()
    assert all(logs.count(f"run {i}: claimed") == 1 for i in ids)


def warm_process(worker: Worker, timeout: float = 60, *, other_than: int | None = None) -> int:
    """The worker's warm lab process (``python -m labs.warm`` given no run: not a lab itself),
    once the worker has logged it ready (its imports done: the next run forks from it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        idle = [p for p in descendants(worker.pid)
                if "labs.warm" in cmdline(p) and not is_lab(p) and p != other_than
                and f"warm lab process {p} ready" in worker.log.read_text()]
        if idle:
            return idle[0]
        time.sleep(0.1)
    raise AssertionError("no warm lab process under the worker")


@SQLITE_ONLY
def test_runs_fork_from_the_warm_process_and_one_killed_while_waiting_is_replaced(stack):
    w = stack.worker("--concurrency", "1")
    warm = warm_process(w)
    first = submit(TINY)
    assert wait_for_run(first).status == "done" and run(first).result["summary"]["correct"]
    second = submit(TINY)
    assert wait_for_run(second).status == "done"
    assert warm_process(w) == warm, "one warm process forks every run and stays"
    os.kill(warm, signal.SIGKILL)  # as `kill -9` of the waiting one: the next run starts as a fresh process
    assert gone(warm)
    third = submit(TINY)
    done = wait_for_run(third)
    assert done.status == "done" and done.result["summary"]["correct"], done.error
    assert set(done.result) == set(run(first).result), "the same report, warm or fresh"
    assert warm_process(w, other_than=warm) != warm, "the worker started another after the run"


@SQLITE_ONLY
@pytest.mark.parametrize("victim", ["run", "warm"])
def test_a_kill_mid_run_fails_the_run_with_a_reason_and_leaves_no_rank(stack, victim):
    """``kill -9`` of the run's process (forked from the warm one) or of the warm process
    itself: the run fails as a crash with the signal, and its ranks are gone."""
    w = stack.worker("--concurrency", "1")
    warm = warm_process(w)
    hang = submit(HANG)
    wait_for_run(hang, until=("running",))
    pids = lab_processes(w, 3)  # the run's CLI, forked from the warm process, and its two forked ranks
    assert warm not in pids
    cli = next(p for p in pids if os.getpgid(p) == p)
    os.kill(cli if victim == "run" else warm, signal.SIGKILL)
    ended = wait_for_run(hang, timeout=30)
    assert ended.status == "failed" and ended.error["kind"] == "crash" and ended.error["exit_code"] == -9, \
        ended.error
    assert all(gone(pid, wait=10) for pid in pids), "its ranks died with it"


def warm_grader(worker: Worker, timeout: float = 60, *, other_than: int | None = None) -> int:
    """The worker's waiting warm grader (``python -m labs.exercises warm``, academy.labruns.pool.GraderPool)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        waiting = [p for p in descendants(worker.pid) if cmdline(p)[1:4] == ["-m", "labs.exercises", "warm"]
                   and p != other_than]
        if waiting:
            return waiting[0]
        time.sleep(0.1)
    raise AssertionError("no warm grader under the worker")


def submit_exercise(source: str) -> int:
    from academy import accounts, exercises

    with session_scope() as s:
        me = accounts.sign_up(session=s, email=f"{uuid.uuid4().hex[:8]}@example.org", password="long enough pw").id
    return exercises.submit(learner_id=me, exercise="ring-allreduce", source=source, lang="en")


@SQLITE_ONLY
def test_an_exercise_is_graded_by_a_warm_grader_and_one_killed_while_waiting_is_replaced(stack):
    """One warm grader per submission: it grades the run and exits, the worker starts the next;
    ``kill -9`` of a waiting one takes its sandbox with it and the next run is graded fresh."""
    from labs.exercises import reference

    w = stack.worker("--concurrency", "1", LAB_WARM_EXERCISES="1", LAB_WARM_POOL="0")
    first_grader = warm_grader(w)
    first = wait_for_run(submit_exercise(reference("ring-allreduce")))
    assert first.status == "done" and first.result["status"] == "passed", first.error
    assert f"warm grader {first_grader} grades" in w.log.read_text()
    assert gone(first_grader), "used for one submission, then gone"
    waiting = warm_grader(w, other_than=first_grader)
    sandbox = descendants(waiting)
    os.kill(waiting, signal.SIGKILL)
    assert gone(waiting) and all(gone(pid, wait=10) for pid in sandbox), "its sandbox died with it"
    fresh = wait_for_run(submit_exercise(reference("ring-allreduce")))
    assert fresh.status == "done" and fresh.result["status"] == "passed", fresh.error
    assert f"warm grader {waiting} grades" not in w.log.read_text()
    assert set(fresh.result) == set(first.result) and fresh.result["sandbox"] == first.result["sandbox"]


@SQLITE_ONLY
def test_a_kill_of_the_warm_grader_mid_grading_fails_the_run_and_leaves_no_process(stack):
    """A deadlocking ring holds the grading (5 s a group) while its grader gets ``kill -9``."""
    from tests.test_exercises import FIXTURES

    w = stack.worker("--concurrency", "1", LAB_WARM_EXERCISES="1", LAB_WARM_POOL="0")
    grader = warm_grader(w)
    run_id = submit_exercise((FIXTURES / "ring_blocking_send.py").read_text())
    deadline = time.monotonic() + 60
    while f"warm grader {grader} grades" not in w.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    while not any("harness" in cmdline(p) for p in descendants(grader)) and time.monotonic() < deadline:
        time.sleep(0.05)  # a grader given the job while still starting brings its sandbox up now
    sandbox = descendants(grader)
    assert any("harness" in cmdline(p) for p in sandbox), "its sandbox is up"
    os.kill(grader, signal.SIGKILL)
    ended = wait_for_run(run_id, timeout=30)
    assert ended.status == "failed" and ended.error["kind"] == "crash" and ended.error["exit_code"] == -9, \
        ended.error
    assert all(gone(pid, wait=10) for pid in sandbox), "the sandbox and its ranks died with it"


# --------------------------------------------------------------------------
# Without a worker: fair use, position, expected wait, the reaper


@pytest.mark.usefixtures("stack")
def test_fair_use_per_learner_and_in_all(monkeypatch):
    from academy.accounts import sign_up
    from academy.settings import get_settings

    monkeypatch.setenv("LAB_MAX_PER_LEARNER", "2")
    monkeypatch.setenv("LAB_MAX_QUEUED", "3")
    get_settings.cache_clear()
    with session_scope() as s:
        ann = sign_up(session=s, email="ann@example.org", password="long enough pw").id
        bob = sign_up(session=s, email="bob@example.org", password="long enough pw").id
    submit(TINY, learner_id=ann)
    submit(TINY, learner_id=ann)
    with pytest.raises(labqueue.QueueFull) as err:
        submit(TINY, learner_id=ann)
    assert (err.value.key, err.value.values) == ("labs_refused.too_many", {"limit": 2})
    bobs = submit(TINY, learner_id=bob)
    with pytest.raises(labqueue.QueueFull) as err:
        submit(TINY, learner_id=bob)
    assert (err.value.key, err.value.values) == ("labs_refused.queue_full", {"limit": 3})
    with pytest.raises(labqueue.QueueFull):
        labqueue.submit(lab="ring", params=TINY, learner_id=None, machine={}, session_runs=[])
    assert labqueue.request_cancel(bobs)
    submit(TINY, learner_id=bob)  # a cancelled run frees its place at once
    get_settings.cache_clear()


@pytest.mark.usefixtures("stack")
def test_queue_position_and_expected_wait_come_from_the_database():
    now = utcnow()
    with session_scope() as s:
        for seconds in (10, 20):  # two finished runs: 15 s on average
            s.add(LabRun(lab="ring", status="done", queue="cpu", started_at=now,
                         finished_at=now + timedelta(seconds=seconds)))
        s.add(LabRun(lab="ring", status="done", queue="gpu", started_at=now,
                     finished_at=now + timedelta(seconds=500)))
        s.add(LabRun(lab="ring", status="queued", queue="gpu"))  # another queue: not ahead
    ids = [submit(TINY) for _ in range(3)]
    assert [labqueue.queue_position(i) for i in ids] == [1, 2, 3]
    assert labqueue.expected_wait_s(ids[0]) is None, "no worker up: no estimate"
    with session_scope() as s:
        s.add(LabWorker(name="x:1", host="x", pid=1, queues="cpu", slots=2))
        s.add(LabWorker(name="y:2", host="y", pid=2, queues="gpu", slots=5))
        s.add(LabWorker(name="z:3", host="z", pid=3, queues="cpu", slots=9,
                        heartbeat_at=now - timedelta(minutes=5)))  # gone
    # Two slots, both free: the first two start at once, the third after one run time.
    assert [labqueue.queue_info(i) for i in ids] == [(1, 2, 0.0), (2, 2, 0.0), (3, 2, 15.0)]
    with session_scope() as s:  # one slot taken by a running lab: everyone moves a round on
        s.add(LabRun(lab="ring", status="running", queue="cpu", started_at=now, heartbeat_at=now))
    assert [labqueue.expected_wait_s(i) for i in ids] == [0.0, 15.0, 15.0]
    assert labqueue.request_cancel(ids[0])
    assert [labqueue.queue_position(i) for i in ids] == [None, 1, 2]
    assert labqueue.queue_info(ids[0]) == (None, 0, None)


@pytest.mark.usefixtures("stack")
def test_the_reaper_fails_only_runs_whose_heartbeat_is_stale():
    now = utcnow()
    with session_scope() as s:
        stale = LabRun(lab="ring", status="running", worker="h:1", started_at=now,
                       heartbeat_at=now - timedelta(seconds=DEAD_AFTER_S + 5))
        fresh = LabRun(lab="ring", status="running", worker="h:2", started_at=now, heartbeat_at=now)
        s.add(stale)
        s.add(fresh)
        s.flush()
        stale_id, fresh_id = stale.id, fresh.id
    assert labqueue.reap() == 1
    assert labqueue.reap() == 0, "reaping twice changes nothing"
    assert run(stale_id).status == "failed" and run(stale_id).error["kind"] == "worker_lost"
    assert run(stale_id).error["worker"] == "h:1"
    assert run(fresh_id).status == "running"


def failure_processes(worker: Worker, ranks: int, timeout: float = 90) -> list[int]:
    """The failure lab's processes under ``worker`` once its ``ranks`` ranks have started: its
    CLI (forked from the warm process), torchrun, and the ranks torchrun started in sessions of
    their own (``labs.processes.RANK_PRELUDE``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        below = descendants(worker.pid)
        mine = [p for p in below if "failure" in cmdline(p) and "-c" in cmdline(p)]
        if len(mine) >= ranks:
            return [p for p in below if is_lab(p) or "torch.distributed.run" in cmdline(p)] + mine
        time.sleep(0.1)
    raise AssertionError(f"fewer than {ranks} failure-lab ranks under the worker")


@pytest.mark.parametrize("stack", ["sqlite"], indirect=True)
def test_the_failure_labs_torchrun_and_ranks_end_with_a_cancel_or_a_killed_worker(stack):
    """The failure lab runs torchrun, whose ranks live in sessions of their own: a cancel (SIGTERM
    to the CLI's group, then SIGKILL) and a ``kill -9`` of the worker each leave none of them."""
    w = stack.worker("--concurrency", "1", name="doomed")
    params = {"world_size": 2, "steps": 120, "kill_step": 100}
    first = labqueue.submit(lab="failure", params=params, learner_id=None, machine={})
    wait_for_run(first, until=("running",))
    pids = failure_processes(w, 2)
    assert len(pids) >= 4, "the CLI, torchrun and two ranks"
    assert labqueue.request_cancel(first)
    assert wait_for_run(first, timeout=60).status == "cancelled"
    assert all(gone(pid, wait=10) for pid in pids), "cancel stopped torchrun and every rank"

    second = labqueue.submit(lab="failure", params=params, learner_id=None, machine={})
    wait_for_run(second, until=("running",))
    pids = failure_processes(w, 2)
    os.kill(w.pid, signal.SIGKILL)  # as `kill -9`: the CLI dies with it, torchrun with the CLI, the ranks with torchrun
    w.proc.wait()
    assert all(gone(pid, wait=15) for pid in pids), "nothing of the lab outlived its worker"
