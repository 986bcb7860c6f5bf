"""The lab queue's parts that need no worker: the page's queue texts, GPU device
sets, the lab command lines, the progress tail."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from academy import i18n
from academy.db import session_scope
from academy.labruns import job as labjob
from academy.labruns import kinds
from academy.labruns import queue as labqueue
from academy.models import LabRun, LabWorker, utcnow
from labs.params import ParamError
from tests.apptest import open_page, press


@pytest.mark.usefixtures("app_db")
def test_the_page_says_where_a_waiting_lab_stands_in_the_learners_language():
    at = open_page("labs", "nl")
    press(at, i18n.t("labs.run", "nl"))
    run_id = at.session_state["lab_run_id"]
    assert labqueue.queue_position(run_id) == 1
    # No worker is up: the page says so instead of promising a slot.
    assert [w.value for w in at.warning] == [i18n.t("labs.no_worker", "nl", position=1)]
    now = utcnow()
    with session_scope() as s:
        s.add(LabWorker(name="h:1", host="h", pid=1, queues="cpu", slots=1))
        s.add(LabRun(lab="ring", status="done", queue="cpu", started_at=now,
                     finished_at=now + timedelta(seconds=4)))
        s.add(LabRun(lab="ring", status="running", queue="cpu", started_at=now, heartbeat_at=now))
    at.run()
    assert i18n.t("labs.queued", "nl", position=1, count=1) in [i.value for i in at.info]
    assert i18n.t("labs.expected_wait", "nl", seconds=4) in [c.value for c in at.caption]
    press(at, i18n.t("labs.cancel", "nl"))
    assert labqueue.queue_position(run_id) is None
    with session_scope() as s:
        assert s.get(LabRun, run_id).status == "cancelled"


@pytest.mark.parametrize("kind", ["worker_lost", "worker_stopped"])
@pytest.mark.usefixtures("app_db")
def test_a_run_its_machine_lost_is_explained_not_blamed_on_a_rank(kind):
    with session_scope() as s:
        run = LabRun(lab="ring", status="failed", error={"kind": kind, "worker": "h:1", "message": "x"})
        s.add(run)
        s.flush()
        run_id = run.id
    at = open_page("labs", "zh", state={"lab_run_id": run_id})
    assert not at.exception, at.exception
    assert [w.value for w in at.warning] == [i18n.t(f"labs.{kind}", "zh")]
    assert not at.error


def test_a_device_set_is_held_by_one_lab_at_a_time_even_across_workers(tmp_path):
    # Two pools sharing GPU 1, as two workers on one host that were told overlapping sets.
    a = labjob.DevicePool([(0, 1)], lock_dir=tmp_path)
    b = labjob.DevicePool([(1, 2)], lock_dir=tmp_path)
    inside, overlaps = [], []
    lock = threading.Lock()

    def use(pool: labjob.DevicePool) -> None:
        for _ in range(5):
            with pool.hold() as devices:
                with lock:
                    if any(set(devices) & set(other) for other in inside):
                        overlaps.append(devices)
                    inside.append(devices)
                time.sleep(0.01)
                with lock:
                    inside.remove(devices)

    threads = [threading.Thread(target=use, args=(p,)) for p in (a, a, b, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert overlaps == [], "two labs held GPU 1 at once"


def test_the_stored_request_is_the_command_and_the_command_the_request(tmp_path):
    """The worker makes the stored request again and runs its argv; ``python -m labs`` reads
    the same request back from it: a model on each side of the argv boundary."""
    import dataclasses

    from labs.request import Request
    from labs.settings import Limits

    stored = Request.checked("ring", {"world_size": 2, "fail_at_step": 3, "size": 1024}).stored()
    assert stored.items() >= {"world_size": 2, "fail_at_step": 3, "size": 1024}.items()
    request = Request.checked("ring", stored, Limits())
    args = kinds.command(request, tmp_path)
    assert args[1:4] == ["-m", "labs", "ring"]
    assert args[args.index("--world-size") + 1] == "2"
    assert args[args.index("--fail-at-step") + 1] == "3"
    assert args[args.index("--events") + 1] == str(tmp_path / "events.jsonl")
    back = Request.from_argv(args[3:], Limits())  # the timeouts left to the command are its limits
    assert (back.run.timeout, back.run.hang_timeout) == (Limits().timeout_s, Limits().hang_timeout_s)
    assert dataclasses.replace(back, run=dataclasses.replace(back.run, timeout=None, hang_timeout=None)) == request
    # a list the form offers (a multiselect) is one flag followed by its values, as argparse reads them
    compression = Request.checked("compression", {"world_size": 2, "strategies": ["topk", "topk_ef"]}, Limits())
    args = kinds.command(compression, tmp_path)
    assert args[args.index("--strategies"):][:3] == ["--strategies", "topk", "topk_ef"]
    assert Request.from_argv(args[3:], Limits()).params.strategies == ["topk", "topk_ef"]


def test_a_multi_node_run_is_one_torchrun_line_per_node(tmp_path, monkeypatch):
    from academy.settings import get_settings
    from labs.request import Request

    with pytest.raises(ValueError, match="LAB_RENDEZVOUS_ENDPOINT"):
        kinds.torchrun_command(Request.checked("ring", {"world_size": 4, "nodes": 2}), tmp_path, run_id=7)
    monkeypatch.setenv("LAB_RENDEZVOUS_ENDPOINT", "head:29500")
    get_settings.cache_clear()
    try:
        args = kinds.torchrun_command(Request.checked("ring", {"world_size": 4, "nodes": 2, "size": 64}),
                                      tmp_path, run_id=7)
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    line = " ".join(args)
    assert "-m torch.distributed.run --nnodes 2 --nproc-per-node 4" in line
    assert "--rdzv-backend c10d --rdzv-endpoint head:29500 --rdzv-id dpa-run-7" in line
    assert f"--rdzv-conf join_timeout={get_settings().lab_node_wait_s + kinds.JOIN_GRACE_S}" in line
    # Each rank: python -c PRELUDE ring ... (the prelude runs `python -m labs` once it
    # has asked to die with its torchrun).
    prelude = args.index(kinds.RANK_PRELUDE)
    assert args[prelude - 3:prelude] == ["--no-python", args[0], "-c"] and args[prelude + 1] == "ring"
    assert "runpy.run_module('labs'" in kinds.RANK_PRELUDE
    assert "--world-size" not in args and "--nodes" not in args and "--start" not in args and "--size" in args
    # A rank of that line makes the same request again, its ranks per node and nodes torchrun's:
    # a failing rank on the second node is one the run has.
    from labs.settings import Limits

    rank_argv = [*args[prelude + 1:], "--fail-rank", "5"]
    for name, value in {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}.items():
        monkeypatch.setenv(name, value)
    back = Request.from_argv(rank_argv, Limits())
    assert (back.run.world_size, back.nodes, back.run.fail_rank, back.params.size) == (4, 2, 5, 64)
    # Nodes as full as the limit allows: a failing rank on the last node is taken, one past it is not,
    # and on one node the limit still bounds it.
    full = Limits(max_world_size=4)
    assert Request.checked("ring", {"world_size": 4, "nodes": 2, "fail_rank": 7}, full).run.fail_rank == 7
    for nodes, rank, words in ((2, 8, "fail rank must be 0 to 7, not 8"), (2, -1, "fail rank must be >= 0"),
                               (1, 4, "fail rank must be 0 to 3, not 4")):
        with pytest.raises(ParamError, match=words):
            Request.checked("ring", {"world_size": 4, "nodes": nodes, "fail_rank": rank}, full)


# --------------------------------------------------------------------------
# Multi-node runs: asking for nodes, taking a node, ending a run node by node


@pytest.fixture
def nodes_on(request, monkeypatch):
    """Multi-node runs allowed (two nodes, an endpoint) for the test's process."""
    from academy.settings import get_settings

    request.getfixturevalue("app_db")

    monkeypatch.setenv("LAB_MAX_NODES", "2")
    monkeypatch.setenv("LAB_RENDEZVOUS_ENDPOINT", "127.0.0.1:29400")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def two_node_run(status: str = "queued", **values) -> int:
    with session_scope() as s:
        run = LabRun(lab="ring", params={"world_size": 1, "nodes": 2}, status=status, **values)
        s.add(run)
        s.flush()
        return run.id


def node_rows(run_id: int) -> list[tuple[int, str, str]]:
    from sqlmodel import select

    from academy.models import LabRunNode

    with session_scope() as s:
        return [(r.node, r.worker, r.status) for r in s.exec(
            select(LabRunNode).where(LabRunNode.run_id == run_id).order_by(LabRunNode.node))]


def stored(run_id: int) -> LabRun:
    with session_scope() as s:
        return s.get(LabRun, run_id)


@pytest.mark.usefixtures("app_db")
def test_more_than_one_node_is_refused_in_the_learners_language_unless_allowed(monkeypatch):
    from academy.labruns import pages as labruns
    from academy.settings import get_settings

    def ask(nodes: int, lab: str = "ring") -> tuple[str, dict]:
        params = {"world_size": 2} if lab == "ring" else {"exercise": "x"}
        with pytest.raises(labruns.LabRequestError) as err:
            if lab == "ring":
                labruns.submit(lab=lab, params=params, learner_id=None, machine={}, nodes=nodes)
            else:
                labqueue.submit(lab=lab, params=params, learner_id=None, machine={}, nodes=nodes)
        return err.value.key, err.value.values

    assert ask(2) == ("labs_refused.nodes", {"max": 1}), "off by default"
    monkeypatch.setenv("LAB_MAX_NODES", "2")
    get_settings.cache_clear()
    assert ask(2) == ("labs_refused.nodes", {"max": 1}), "no rendezvous endpoint: still off"
    monkeypatch.setenv("LAB_RENDEZVOUS_ENDPOINT", "127.0.0.1:29400")
    get_settings.cache_clear()
    assert ask(3) == ("labs_refused.nodes", {"max": 2})
    assert ask(0) == ("labs_refused.nodes", {"max": 2})
    assert ask(2, lab="exercise") == ("labs_refused.nodes", {"max": 2})
    for lang in ("en", "zh", "nl"):
        assert "2" in i18n.t("labs_refused.nodes", lang, max=2)
    run_id = labruns.submit(lab="ring", params={"world_size": 2}, learner_id=None, machine={}, nodes=2)
    assert stored(run_id).params["nodes"] == 2 and stored(run_id).params["world_size"] == 2
    assert labqueue.pending_messages("cpu") == {(run_id, 0), (run_id, 1)}, "one message per node"
    single = labruns.submit(lab="ring", params={"world_size": 2}, learner_id=None, machine={})
    assert "nodes" not in stored(single).params
    assert (single, 0) in labqueue.pending_messages("cpu")
    get_settings.cache_clear()


@pytest.mark.usefixtures("nodes_on")
def test_a_node_is_taken_by_one_worker_only():
    run_id = two_node_run()
    got = []

    def join(name: str) -> None:
        got.append((name, labjob._join(run_id, 1, name)))

    threads = [threading.Thread(target=join, args=(f"w:{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    winners = [name for name, run in got if run is not None]
    assert len(got) == 4 and len(winners) == 1, got
    assert node_rows(run_id) == [(1, winners[0], "running")]
    assert stored(run_id).status == "queued", "node 1 joins; only node 0 claims the run"
    assert labjob._join(run_id, 0, "w:9") is None, "node 0 is taken by claiming the run"
    assert labjob._join(run_id, 2, "w:9") is None, "a run of two nodes has no node 2"
    assert labjob._claim(run_id, "w:0") is not None
    assert labjob._claim(run_id, "w:8") is None
    assert node_rows(run_id) == [(0, "w:0", "running"), (1, winners[0], "running")]
    assert stored(run_id).status == "running" and stored(run_id).worker == "w:0"

    cancelled = two_node_run()
    assert labqueue.request_cancel(cancelled)
    assert labjob._join(cancelled, 1, "w:1") is None, "a cancelled run takes no node"


@pytest.mark.usefixtures("nodes_on")
def test_the_run_is_done_when_every_node_ended_well_and_keeps_rank_0s_result():
    run_id = two_node_run()
    labjob._claim(run_id, "w:0")
    labjob._join(run_id, 1, "w:1")
    # Node 1 ends first, without the result (rank 0 was on node 0): still running.
    labjob._end_node(run_id, 1, "w:1", "done")
    assert stored(run_id).status == "running"
    assert labjob._beat_node(run_id, 0, "w:0", {"phase": "x"}) == (True, False)
    labjob._end_node(run_id, 0, "w:0", "done", result={"world_size": 2}, progress={"phase": "end"})
    done = stored(run_id)
    assert (done.status, done.result, done.progress) == ("done", {"world_size": 2}, {"phase": "end"})
    assert [status for _n, _w, status in node_rows(run_id)] == ["done", "done"]

    lost = two_node_run()  # every node exited 0, yet no result: not "done"
    labjob._claim(lost, "w:0")
    labjob._join(lost, 1, "w:1")
    labjob._end_node(lost, 0, "w:0", "done")
    labjob._end_node(lost, 1, "w:1", "done")
    assert stored(lost).status == "failed" and stored(lost).error["kind"] == "crash"


@pytest.mark.usefixtures("nodes_on")
def test_the_first_node_to_fail_fails_the_run_and_the_others_hear_of_it():
    run_id = two_node_run()
    labjob._claim(run_id, "w:0")
    labjob._join(run_id, 1, "w:1")
    why = {"kind": "crash", "node": 1, "worker": "w:1", "message": "boom"}
    labjob._end_node(run_id, 1, "w:1", "failed", error=why)
    assert stored(run_id).status == "failed" and stored(run_id).error == why
    assert labjob._beat_node(run_id, 0, "w:0", None) == (False, False), "node 0 stops"
    labjob._end_node(run_id, 0, "w:0", "failed", error={"kind": "lost", "node": 0})
    assert stored(run_id).error == why, "the first reason is kept"

    cancelled = two_node_run()
    labjob._claim(cancelled, "w:0")
    labjob._join(cancelled, 1, "w:1")
    assert labqueue.request_cancel(cancelled)
    assert labjob._beat_node(cancelled, 1, "w:1", None) == (True, True), "every node reads the flag"


@pytest.mark.usefixtures("nodes_on")
def test_the_reaper_fails_a_run_one_of_whose_nodes_stopped_beating():
    from sqlalchemy import update

    from academy.models import LabRunNode
    from academy.settings import get_settings

    run_id = two_node_run()
    labjob._claim(run_id, "w:0")
    labjob._join(run_id, 1, "w:1")
    assert labqueue.reap() == 0
    old = utcnow() - timedelta(seconds=get_settings().lab_dead_after_s + 5)
    with session_scope() as s:
        s.exec(update(LabRunNode).where(LabRunNode.run_id == run_id, LabRunNode.node == 1)
               .values(heartbeat_at=old))
    assert labqueue.reap() == 1
    assert labqueue.reap() == 0, "reaping twice changes nothing"
    error = stored(run_id).error
    assert stored(run_id).status == "failed"
    assert (error["kind"], error["node"], error["worker"]) == ("worker_lost", 1, "w:1")


@pytest.mark.usefixtures("nodes_on")
def test_requeue_lost_sends_again_only_the_nodes_nobody_took():
    old = utcnow() - timedelta(minutes=5)
    waiting = two_node_run(created_at=old)
    labjob._join(waiting, 1, "w:1")  # node 1 taken, node 0's message lost
    running = two_node_run(created_at=old)
    labjob._claim(running, "w:0")  # node 0 claimed, node 1's message lost
    assert labqueue.requeue_lost(["cpu"]) == 2
    assert labqueue.pending_messages("cpu") == {(waiting, 0), (running, 1)}
    assert labqueue.requeue_lost(["cpu"]) == 0, "a message waits for each: nothing sent twice"


def test_the_progress_tail_reads_only_whole_new_lines(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    tail = labjob._Tail(path)
    assert tail.latest() is None  # no file yet
    with path.open("w") as fh:
        fh.write(json.dumps({"step": 1}) + "\n" + json.dumps({"step": 2}) + "\n" + '{"step": ')
        fh.flush()
        assert tail.latest() == {"step": 2}
        assert tail.latest() is None, "nothing new"
        fh.write('3}\n')
        fh.flush()
        assert tail.latest() == {"step": 3}, "the half line, once whole"
    assert tail.last == {"step": 3}


def test_migration_0006_goes_down_and_up_again(engine):
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import inspect

    from academy.settings import ROOT

    def state():
        found = inspect(engine)
        return {c["name"] for c in found.get_columns("labrun")}, "labworker" in found.get_table_names()

    added = {"queue", "worker", "heartbeat_at", "progress", "cancel_requested"}
    assert state() == (state()[0] | added, True)
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "academy" / "migrations"))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0006-1")
    assert not added & state()[0] and state()[1] is False
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    assert added <= state()[0] and state()[1] is True


def test_migration_0008_goes_down_and_up_again(engine):
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import inspect

    from academy.settings import ROOT

    def columns():
        found = inspect(engine)
        if "labrunnode" not in found.get_table_names():
            return None
        return {c["name"] for c in found.get_columns("labrunnode")}, found.get_pk_constraint("labrunnode")

    assert columns() == ({"run_id", "node", "worker", "heartbeat_at", "status"},
                         {"constrained_columns": ["run_id", "node"], "name": None})
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "academy" / "migrations"))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0007")
    assert columns() is None
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    assert columns() is not None


@pytest.mark.usefixtures("app_db")
def test_the_largest_live_gpu_set_says_how_many_ranks_an_nccl_lab_may_have():
    assert labqueue.largest_gpu_set() == 0
    with session_scope() as s:
        s.add(LabWorker(name="g:1", host="g", pid=1, queues="gpu", slots=2, devices="0,1;2,3"))
        s.add(LabWorker(name="g:2", host="g", pid=2, queues="cpu,gpu", slots=1, devices="0,1,2,3",
                        heartbeat_at=utcnow() - timedelta(minutes=5)))  # gone
        s.add(LabWorker(name="c:3", host="c", pid=3, queues="cpu", slots=8))
    assert labqueue.largest_gpu_set() == 2


def test_the_worker_starts_by_its_one_name():
    """`python -m academy.worker` is the worker's command (Makefile, docs); the alias
    `python -m labs.worker` is gone (issue #37)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "academy.worker", "--help"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and "--queues" in out.stdout and "academy.worker" in out.stdout


# --------------------------------------------------------------------------
# Fair use for guests (review N-3): per client, and a share of the queue kept for learners


@pytest.mark.usefixtures("app_db")
def test_one_guest_client_cannot_fill_the_queue_with_browser_sessions():
    """N-3: 11 browser sessions of one anonymous client (each a fresh ``session_runs``) got 20
    runs queued and every learner's lab and exercise refused. Now the client has
    ``lab_max_per_learner``, all guests ``lab_max_guests`` (5 of 20), and learners the rest."""
    from academy import exercises
    from academy.accounts import client_key, sign_up
    from academy.settings import get_settings

    settings = get_settings()
    assert (settings.lab_max_queued, settings.lab_max_guests, settings.lab_max_per_learner) == (20, 5, 2)
    tiny = {"world_size": 2}

    def guest(client: str | None, session_runs=()) -> int | str:
        try:
            return labqueue.submit(lab="ring", params=tiny, learner_id=None, machine={},
                                   session_runs=list(session_runs), client=client)
        except labqueue.QueueFull as err:
            return err.key

    flood = [guest("203.0.113.9") for _session in range(11)]
    assert [type(x) for x in flood[:2]] == [int, int]
    assert flood[2:] == ["labs_refused.too_many_guest"] * 9
    assert guest(client_key("::ffff:203.0.113.9")) == "labs_refused.too_many_guest"  # the same client
    with session_scope() as s:
        assert s.get(LabRun, flood[0]).client == "203.0.113.9"
    # Loopback (a same-host proxy): counted per browser session, within the guests' share.
    local = [guest("local") for _session in range(2)] + [guest(None)]
    assert all(isinstance(x, int) for x in local)
    refused = guest("198.51.100.7")
    assert refused == "labs_refused.guests_full"
    assert i18n.t(refused, "zh", limit=5) != i18n.t(refused, "en", limit=5) != i18n.t(refused, "nl", limit=5)
    # The places kept for learners are still there: a lab, and an exercise submission.
    with session_scope() as s:
        ann = sign_up(session=s, email="ann@example.org", password="long enough pw").id
        bob = sign_up(session=s, email="bob@example.org", password="long enough pw").id
    assert isinstance(labqueue.submit(lab="ring", params=tiny, learner_id=ann, machine={}), int)
    exercise = exercises.catalog()[0]
    assert isinstance(exercises.submit(learner_id=bob, exercise=exercise,
                                       source=exercises.starter(exercise), lang="en"), int)
    # A guest's place comes back when one of its runs ends.
    labqueue.request_cancel(flood[0])
    assert isinstance(guest("203.0.113.9"), int)


@pytest.mark.usefixtures("app_db")
def test_the_guests_share_is_a_setting(monkeypatch):
    from academy.settings import get_settings

    monkeypatch.setenv("LAB_GUEST_SHARE", "0")
    get_settings.cache_clear()
    try:
        with pytest.raises(labqueue.QueueFull) as err:
            labqueue.submit(lab="ring", params={"world_size": 2}, learner_id=None, machine={},
                            client="203.0.113.9")
        assert err.value.key == "labs_refused.guests_full" and err.value.values == {"limit": 0}
        monkeypatch.setenv("LAB_MAX_QUEUED", "3")
        monkeypatch.setenv("LAB_GUEST_SHARE", "0.25")
        get_settings.cache_clear()
        assert get_settings().lab_max_guests == 1  # rounded up: a small queue still has a guest place
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()


def test_migration_0010_goes_down_and_up_again(engine):
    from tests.migrations import alembic, columns

    assert "client" in columns(engine, "labrun")
    alembic(engine, "downgrade", "0009")
    assert "client" not in columns(engine, "labrun")
    alembic(engine, "upgrade", "head")
    assert "client" in columns(engine, "labrun")


# --------------------------------------------------------------------------
# Stored reports (review N-6): capped, and full only for the newest runs


@pytest.fixture
def fake_worker(request, tmp_path, monkeypatch):
    """``labjob.execute`` in this process, the command of either kind of job (a lab, a grading)
    a one-liner that writes ``reports[run_id]`` as result.json and exits 0: the worker's own
    path from the report to the stored row."""
    import dataclasses
    import sys

    request.getfixturevalue("app_db")
    reports: dict[int, dict] = {}

    def command(run, workdir):
        (Path(workdir) / "want.json").write_text(json.dumps(reports[run.id]))
        return [sys.executable, "-c", "import shutil, sys; shutil.copy(sys.argv[1], sys.argv[2])",
                str(Path(workdir) / "want.json"), str(Path(workdir) / "result.json")], {}

    for name, kind in kinds.KINDS.items():
        monkeypatch.setitem(kinds.KINDS, name, dataclasses.replace(kind, command=command))
    labjob.set_worker(labjob.WorkerState(name="test-worker", workroot=tmp_path))

    def run(report: dict, *, learner_id: int | None, lab: str = "exercise", exercise: str = "broadcast",
            client: str | None = None) -> LabRun:
        params = {"exercise": exercise, "lang": "en"} if lab == "exercise" else {"world_size": 2}
        with session_scope() as s:
            row = LabRun(learner_id=learner_id, lab=lab, params=params, status="queued", source="pass",
                         client=client)
            s.add(row)
            s.flush()
            run_id = row.id
        reports[run_id] = report
        labjob.execute(run_id)
        with session_scope() as s:
            return s.get(LabRun, run_id)

    yield run
    labjob.set_worker(None)


def _learner(email: str) -> int:
    from academy.accounts import sign_up

    with session_scope() as s:
        return sign_up(session=s, email=email, password="long enough pw").id


def _exercise_report(status: str = "passed", message_bytes: int = 10) -> dict:
    case = {"id": "w2-n1-float32", "world_size": 2, "size": 1, "dtype": "float32", "status": status,
            "findings": [{"check": "crash", "passed": status == "passed", "key": "crash",
                          "values": {"rank": 0, "exception": "E", "message": "x" * message_bytes}}],
            "waiting": [], "output": {"0": "printed"}}
    return {"exercise": "broadcast", "status": status, "ok": status == "passed", "error": None,
            "cases": [case], "trace": {"world_size": 2, "traces": [[], []]}, "pattern": None, "duration_s": 1.0,
            "sandbox": "none"}


def test_a_report_over_the_limit_is_stored_as_too_large_and_never_as_a_pass(fake_worker):
    """N-6: a passing report of 2.7 MB was stored whole. Over ``lab_result_max_bytes``
    (64 KiB) the worker stores a small report that says so, status "error": no pass."""
    from academy import exercises
    from academy.settings import get_settings
    from labs.exercises import messages

    limit = get_settings().lab_result_max_bytes
    assert limit == 64 * 1024
    me = _learner("big@example.org")
    run = fake_worker(_exercise_report("passed", message_bytes=limit), learner_id=me)
    assert run.status == "done"
    assert run.result["status"] == "error" and run.result["ok"] is False
    assert run.result["error"]["key"] == "report_too_large"
    assert run.result["error"]["values"]["limit"] == limit and run.result["error"]["values"]["size"] > limit
    assert len(json.dumps(run.result)) < 1024
    with session_scope() as s:
        assert not exercises.has_passed(session=s, learner_id=me, exercise="broadcast")
    for lang in ("en", "zh", "nl"):  # the page's words for it, in every language
        assert "{" not in messages.text("report_too_large", lang, "broadcast", **run.result["error"]["values"])
    assert messages.template("report_too_large", "zh") != messages.template("report_too_large", "en")
    # Under the limit the same report is kept as it came, and its pass counts.
    ok = fake_worker(_exercise_report("passed"), learner_id=me)
    assert ok.result == _exercise_report("passed")
    with session_scope() as s:
        assert exercises.has_passed(session=s, learner_id=me, exercise="broadcast")


def test_a_lab_report_over_the_limit_drops_the_ranks_own_values_first(fake_worker):
    me = _learner("lab@example.org")
    summary = {"world_size": 2, "rows": [1, 2, 3]}
    fits = fake_worker({"ok": True, "summary": summary, "ranks": ["r" * 70_000]}, learner_id=me, lab="ring")
    assert fits.status == "done" and fits.result == {"ok": True, "summary": summary}
    huge = fake_worker({"ok": True, "summary": {"rows": ["r" * 70_000]}}, learner_id=me, lab="ring")
    assert huge.status == "failed" and huge.error["kind"] == "report_too_large"
    assert len(json.dumps(huge.result)) < 1024
    at = open_page("labs", "nl", state={"lab_run_id": huge.id})  # the page says so in the learner's words
    assert not at.exception, at.exception
    assert [e.value for e in at.error] == [i18n.t("labs.report_too_large", "nl", size=huge.error["size"],
                                                  limit=64 * 1024)]


def test_only_the_newest_five_runs_keep_their_full_report(fake_worker):
    """N-6: per learner and exercise (and per lab), the newest ``lab_keep_full_results`` runs
    keep the whole report; older ones their status and summary."""
    me, other = _learner("many@example.org"), _learner("other@example.org")
    theirs = fake_worker(_exercise_report("failed"), learner_id=other)
    elsewhere = fake_worker(_exercise_report("failed"), learner_id=me, exercise="ring-allreduce")
    lab = fake_worker({"ok": True, "summary": {"world_size": 2}, "ranks": [{"r": 0}], "pids": [1]},
                      learner_id=me, lab="ring")
    runs = [fake_worker(_exercise_report("failed"), learner_id=me) for _ in range(7)]
    with session_scope() as s:
        stored = [s.get(LabRun, r.id).result for r in runs]
        assert all(not r.get("pruned") for r in stored[2:])
        assert stored[2] == _exercise_report("failed")
        for old in stored[:2]:
            assert old == {"exercise": "broadcast", "status": "failed", "ok": False, "duration_s": 1.0,
                           "sandbox": "none", "error": None, "trace": None, "pattern": None, "pruned": True,
                           "cases": [{"id": "w2-n1-float32", "status": "failed", "world_size": 2, "size": 1,
                                      "dtype": "float32", "findings": [], "output": {}}]}
        # Other learners, other exercises and labs count on their own.
        for kept in (theirs, elsewhere, lab):
            assert not s.get(LabRun, kept.id).result.get("pruned")
    labs = [fake_worker({"ok": True, "summary": {"world_size": 2}, "ranks": [{"r": 0}], "wall_s": 1.0},
                        learner_id=me, lab="ring") for _ in range(5)]
    with session_scope() as s:
        assert s.get(LabRun, lab.id).result == {"ok": True, "summary": {"world_size": 2}, "pruned": True}
        assert all("ranks" in s.get(LabRun, r.id).result for r in labs)
