"""The queue under a class: 2 web processes, 3 workers, 20 learners, 40 labs, one worker killed.

Each web process (``python -m tests.labstack``) signs up 10 learners who each
submit 2 tiny labs (2 ranks, 1 KiB) through ``labruns.submit``, the page's
own code, and poll the database until their labs end. Three workers take the
labs from the embedded queue; once one of them is mid-run it is SIGKILLed.
Then every run has ended done, or failed with a reason; none was lost or run
twice; no process is left over; and the web processes never had a child.
Sized for a 2-core machine: one lab at a time per worker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter

import pytest
from sqlmodel import select

from academy.db import session_scope
from academy.labruns import queue as labqueue
from academy.models import LabRun
from tests.conftest import ROOT, use_database
from tests.labstack import TERMINAL, Worker, descendants, is_lab, processes_with_env

pytestmark = pytest.mark.slow

LEARNERS_PER_APP, LABS_EACH = 10, 2


def test_forty_labs_two_web_processes_three_workers_one_killed(tmp_path, monkeypatch):
    (tmp_path / "tmp").mkdir()
    marker = uuid.uuid4().hex
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'app.db'}", "LAB_QUEUE_URL": "",
           "SECRETS_DIR": str(tmp_path / "secrets"), "LAB_MAX_PER_LEARNER": str(LABS_EACH),
           "LAB_MAX_QUEUED": "40", "TMPDIR": str(tmp_path / "tmp"), "DPA_TEST_RUN": marker}
    database = use_database(monkeypatch, **{k: v for k, v in env.items() if k != "TMPDIR"})
    next(database)  # migrated here, before anyone else opens the database
    workers = [Worker(tmp_path, env, "--concurrency", "1", name=f"w{i}") for i in range(3)]
    apps: list[subprocess.Popen] = []
    try:
        for w in workers:  # the first labs fork from the warm processes, not beside their imports
            w.wait_ready()
            w.wait_warm()
        apps = [subprocess.Popen([sys.executable, "-m", "tests.labstack", str(LEARNERS_PER_APP),
                                  str(LABS_EACH), f"app{i}"], cwd=ROOT, env={**os.environ, **env},
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for i in range(2)]

        victim = workers[0]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # mid-run: its lab has started its ranks
            if sum(is_lab(p) for p in descendants(victim.pid)) >= 3:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the first worker never ran a lab")
        os.kill(victim.pid, signal.SIGKILL)
        victim.proc.wait()

        outs = []
        for app in apps:
            out, err = app.communicate(timeout=240)
            assert app.returncode == 0, err[-3000:]
            outs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for app in apps:
            if app.poll() is None:
                app.kill()
        for w in workers:
            w.stop()

    submitted = [run_id for out in outs for run_id in out["runs"]]
    assert len(submitted) == len(set(submitted)) == 2 * LEARNERS_PER_APP * LABS_EACH
    assert all(out["refused"] == [] for out in outs)
    assert all(out["children"] == [] for out in outs), "a web process started a process"

    with session_scope() as s:
        rows = s.exec(select(LabRun)).all()
    assert sorted(r.id for r in rows) == sorted(submitted), "no run lost, none added"
    assert all(r.status in TERMINAL for r in rows)
    for r in rows:
        if r.status == "done":
            assert r.result["summary"]["correct"], r.id
        else:
            assert r.status == "failed" and r.error.get("kind"), (r.id, r.status, r.error)
    lost = [r for r in rows if r.status == "failed" and r.error["kind"] == "worker_lost"]
    assert lost, "the killed worker's run is failed with the reason"
    assert all(r.worker.endswith(f":{victim.pid}") for r in lost)
    assert all(r.error.get("kind") == "worker_lost" for r in rows
               if r.worker and r.worker.endswith(f":{victim.pid}") and r.status != "done")

    claims = Counter()
    for w in workers:
        for line in w.log.read_text().splitlines():
            if ": claimed by " in line:
                claims[int(line.split("run ", 1)[1].split(":", 1)[0])] += 1
    assert claims == Counter({run_id: 1 for run_id in submitted}), "every run ran once"
    assert labqueue.pending("cpu") == 0
    assert processes_with_env("DPA_TEST_RUN", marker) == [], "no process outlived the test"
    survivors = [tmp_path / "tmp" / "dpa-labs" / f"{os.uname().nodename}-{w.pid}" for w in workers[1:]]
    assert not any(list(folder.glob("run-*")) for folder in survivors if folder.exists())
    next(database, None)
