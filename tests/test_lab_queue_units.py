"""The lab queue's parts that need no worker: the page's queue texts, GPU device
sets, the lab command lines, the progress tail."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from academy import i18n, labqueue
from academy.db import session_scope
from academy.models import LabRun, LabWorker, utcnow
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
    a = labqueue.DevicePool([(0, 1)], lock_dir=tmp_path)
    b = labqueue.DevicePool([(1, 2)], lock_dir=tmp_path)
    inside, overlaps = [], []
    lock = threading.Lock()

    def use(pool: labqueue.DevicePool) -> None:
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


def test_each_stored_parameter_becomes_the_flag_of_its_name(tmp_path):
    args = labqueue.command("ring", {"world_size": 2, "fail_at_step": 3, "size": 1024}, tmp_path)
    assert args[1:4] == ["-m", "labs", "ring"]
    assert args[args.index("--world-size") + 1] == "2"
    assert args[args.index("--fail-at-step") + 1] == "3"
    assert args[args.index("--events") + 1] == str(tmp_path / "events.jsonl")


def test_a_multi_node_run_is_one_torchrun_line_per_node(tmp_path, monkeypatch):
    from academy.settings import get_settings

    with pytest.raises(ValueError, match="LAB_RENDEZVOUS_ENDPOINT"):
        labqueue.torchrun_command("ring", {"world_size": 4, "nodes": 2}, tmp_path, run_id=7)
    monkeypatch.setenv("LAB_RENDEZVOUS_ENDPOINT", "head:29500")
    get_settings.cache_clear()
    try:
        args = labqueue.torchrun_command("ring", {"world_size": 4, "nodes": 2, "size": 64}, tmp_path,
                                         run_id=7)
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    line = " ".join(args)
    assert "-m torch.distributed.run --nnodes 2 --nproc-per-node 4" in line
    assert "--rdzv-backend c10d --rdzv-endpoint head:29500 --rdzv-id dpa-run-7" in line
    assert line.split(" -m ")[-1].startswith("labs ring")
    assert "--world-size" not in args and "--nodes" not in args and "--size" in args


def test_the_progress_tail_reads_only_whole_new_lines(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    tail = labqueue._Tail(path)
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


@pytest.mark.usefixtures("app_db")
def test_the_largest_live_gpu_set_says_how_many_ranks_an_nccl_lab_may_have():
    assert labqueue.largest_gpu_set() == 0
    with session_scope() as s:
        s.add(LabWorker(name="g:1", host="g", pid=1, queues="gpu", slots=2, devices="0,1;2,3"))
        s.add(LabWorker(name="g:2", host="g", pid=2, queues="cpu,gpu", slots=1, devices="0,1,2,3",
                        heartbeat_at=utcnow() - timedelta(minutes=5)))  # gone
        s.add(LabWorker(name="c:3", host="c", pid=3, queues="cpu", slots=8))
    assert labqueue.largest_gpu_set() == 2


def test_labs_worker_is_the_academy_worker():
    """`python -m labs.worker` (the name issue #15 gives) runs academy.worker itself."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "labs.worker", "--help"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and "--queues" in out.stdout and "academy.worker" in out.stdout
