"""A lab run that spans two nodes: two real ``python -m academy.worker`` processes
on loopback, each starting its own torchrun, gathered by a c10d rendezvous.

This is as close to two machines as one machine gets: the workers share only
the database, the queue and the rendezvous endpoint, as separate hosts would.
What it cannot show (real network between hosts, GPUs) docs/operators/multi-node.md says.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from sqlmodel import select

from academy.db import session_scope
from academy.labruns import queue as labqueue
from academy.models import LabRunNode
from academy.settings import get_settings
from tests.factories import wait_for_run
from tests.labstack import descendants, free_port
from tests.procs import gone
from tests.test_lab_worker import DEAD_AFTER_S, pg_template, redis_url, stack  # noqa: F401  (fixtures)

HANG = {"world_size": 1, "size": 1024, "fail_mode": "hang", "fail_rank": 1, "fail_at_step": 0}


@pytest.fixture
def two_nodes(stack, monkeypatch):  # noqa: F811
    """The stack with multi-node runs on (two nodes, an endpoint on loopback), here and in its workers."""
    env = {"LAB_MAX_NODES": "2", "LAB_RENDEZVOUS_ENDPOINT": f"127.0.0.1:{free_port()}"}
    stack.env.update(env)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    yield stack
    get_settings.cache_clear()


def submit_two_nodes(params: dict) -> int:
    return labqueue.submit(lab="ring", params=params, learner_id=None, machine={}, nodes=2)


def node_rows(run_id: int) -> list[LabRunNode]:
    with session_scope() as s:
        return list(s.exec(select(LabRunNode).where(LabRunNode.run_id == run_id)
                           .order_by(LabRunNode.node)))



@pytest.fixture(autouse=True)
def no_warm_processes(monkeypatch):
    """These tests watch the torchrun and ranks under each worker; a multi-node run never
    uses a warm lab process or grader (academy.labruns.pool), so the workers start none."""
    monkeypatch.setenv("LAB_WARM_POOL", "0")
    monkeypatch.setenv("LAB_WARM_EXERCISES", "0")

def test_two_workers_run_one_lab_as_two_nodes(two_nodes):
    a = two_nodes.worker("--concurrency", "1", name="a")
    b = two_nodes.worker("--concurrency", "1", name="b")
    run_id = submit_two_nodes({"world_size": 1, "size": 1024})
    done = wait_for_run(run_id, timeout=60)
    assert done.status == "done", done.error
    # One rank per node, two nodes: the lab saw a world of two, under torchrun.
    assert done.result["world_size"] == 2 and done.result["launcher"] == "torchrun"
    assert done.result["summary"]["correct"]
    assert done.params["nodes"] == 2
    rows = node_rows(run_id)
    assert [(r.node, r.status) for r in rows] == [(0, "done"), (1, "done")]
    names = {row.worker.rsplit(":", 1)[1] for row in rows}
    assert names == {str(a.pid), str(b.pid)}, "each worker ran one node"
    assert done.worker == rows[0].worker, "the worker of node 0 claimed the run"
    logs = a.log.read_text() + b.log.read_text()
    assert logs.count(f"run {run_id}: claimed") == 1 and logs.count(f"run {run_id}: node 1 joined") == 1
    assert [p for w in (a, b) for p in descendants(w.pid)] == [], "no torchrun or rank left"
    assert labqueue.pending("cpu") == 0


def test_a_killed_node_fails_the_run_with_a_reason_and_leaves_no_process(two_nodes):
    a = two_nodes.worker("--concurrency", "1", name="a")
    b = two_nodes.worker("--concurrency", "1", name="b")
    run_id = submit_two_nodes(HANG)  # rank 1 hangs: the run goes on until something stops it
    wait_for_run(run_id, until=("running",), timeout=60)
    deadline = time.monotonic() + 60
    while len(node_rows(run_id)) < 2 or not all(descendants(w.pid) for w in (a, b)):
        assert time.monotonic() < deadline, "both nodes never started"
        time.sleep(0.1)
    rows = node_rows(run_id)
    doomed = a if rows[1].worker.endswith(f":{a.pid}") else b  # the worker of node 1
    survivor = b if doomed is a else a
    pids = descendants(doomed.pid)
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.proc.wait()
    killed_at = time.monotonic()
    ended = wait_for_run(run_id, timeout=DEAD_AFTER_S + 30)
    assert time.monotonic() - killed_at < DEAD_AFTER_S + 30
    assert ended.status == "failed"
    # The reason: the reaper's (node 1 stopped beating) or the survivor's (its peer vanished).
    assert ended.error["kind"] in ("worker_lost", "crash") and ended.error["node"] in (0, 1), ended.error
    assert ended.error.get("message"), ended.error
    assert all(gone(pid, wait=10) for pid in pids), "the killed node's torchrun and rank died with it"
    deadline = time.monotonic() + 20
    while descendants(survivor.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert descendants(survivor.pid) == [], "the surviving node stopped its torchrun"


@pytest.mark.parametrize("stack", ["sqlite"], indirect=True)
def test_cancel_reaches_every_node(two_nodes):
    a = two_nodes.worker("--concurrency", "1", name="a")
    b = two_nodes.worker("--concurrency", "1", name="b")
    run_id = submit_two_nodes(HANG)
    deadline = time.monotonic() + 60
    while len(node_rows(run_id)) < 2 or not all(descendants(w.pid) for w in (a, b)):
        assert time.monotonic() < deadline, "both nodes never started"
        time.sleep(0.1)
    assert labqueue.request_cancel(run_id)
    ended = wait_for_run(run_id, timeout=30)
    assert ended.status == "cancelled" and ended.error == {"kind": "cancelled"}
    deadline = time.monotonic() + 20
    while any(descendants(w.pid) for w in (a, b)) or \
            any(r.status == "running" for r in node_rows(run_id)):
        assert time.monotonic() < deadline, "a node went on after the cancel"
        time.sleep(0.1)
    assert {r.status for r in node_rows(run_id)} == {"cancelled"}


@pytest.mark.parametrize("stack", ["sqlite"], indirect=True)
def test_a_node_no_worker_takes_fails_the_run_as_nodes_missing(two_nodes):
    two_nodes.env["LAB_NODE_WAIT_S"] = "2"
    w = two_nodes.worker("--concurrency", "1")  # one worker, busy with node 0: node 1 waits
    run_id = submit_two_nodes({"world_size": 1, "size": 1024})
    ended = wait_for_run(run_id, timeout=30)
    assert ended.status == "failed", ended.error
    assert (ended.error["kind"], ended.error["node"]) == ("nodes_missing", 0)
    assert "1 of 2 nodes" in ended.error["message"]
    # The worker then takes node 1's message and skips it: the run is over.
    deadline = time.monotonic() + 20
    while f"run {run_id}: node 1 not to be run" not in w.log.read_text():
        assert time.monotonic() < deadline, w.log.read_text()[-2000:]
        time.sleep(0.1)
    assert [r.node for r in node_rows(run_id)] == [0]
    assert descendants(w.pid) == []
