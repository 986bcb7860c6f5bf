"""The worker side of a lab run: claim it, run its lab, write its heartbeat, record how it ended.

``python -m academy.worker`` consumes the huey queues of :mod:`academy.labruns.queue`;
:func:`set_worker` names :func:`execute` as the queue's task, which runs once
per job, in a worker thread (the queue imports nothing of this module, so the
web side never loads it). The job starts its kind's command (``python -m labs
LAB ... --events F --out G``, torchrun's line for one node of a multi-node
run, or a grading's ``python -m labs.exercises grade``) in its own process
group, and writes back to the
:class:`~academy.models.LabRun` row: the claim, a heartbeat and the newest
progress event about once a second, and the result or the error at the end.
The promises this keeps (exactly once, cancel, a dead worker, several nodes)
are listed in :mod:`academy.labruns.queue`.

One node model: every run has :class:`~academy.models.LabRunNode` rows, one
for an ordinary run (taken with the claim), N for a run over N nodes. Each
node writes its own heartbeat (:func:`_beat_node`; node 0 beats the run's row
too) and records its end (:func:`_end_node`), which also ends the run when it
settles it: at once for a failure, with the last node for a success. What the
run's command is, what of its report is kept and what the report means is its
kind's affair (``academy.labruns.kinds``: a lab, or a grading): the job asks
``kind_of(run.lab)`` and never looks inside a report.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import logging
import os
import queue as queue_mod
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import update
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import func, select

from academy import exercises
from academy.db import session_scope
from academy.labruns.kinds import Ended, crashed, kind_of, prune_results
from academy.labruns.pool import GraderPool, WarmPool, lab_env
from academy.labruns.queue import enqueue, nodes_of, serve
from academy.models import ACTIVE, LabRun, LabRunNode, LabWorker, RunStatus, utcnow
from academy.settings import ROOT, get_settings

TICK_S = 0.5  # how often a worker writes each run's heartbeat (and reads its cancel flag)
WATCH_S = 0.05  # how often it looks at the run's process and its events file
PROGRESS_S = 0.2  # a new progress event is written this soon after the last write (not TICK_S)
CLAIM_POLL_S = 0.1  # how often an idle worker looks at the SQLite queue (academy.worker)
REAP_EVERY_S = 2.0
log = logging.getLogger("academy.worker")

@dataclass
class DevicePool:
    """GPU device sets a worker owns; a GPU lab holds one set for its whole run.

    Inside the worker a blocking queue hands out the sets; between worker
    processes on one host, an exclusive lock file per device (flock, released
    by the kernel if the process dies) keeps two labs off the same GPU.
    """

    sets: list[tuple[int, ...]]
    lock_dir: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "dpa-gpu-locks")
    _free: queue_mod.Queue = field(default_factory=queue_mod.Queue)

    def __post_init__(self) -> None:
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        for devices in self.sets:
            self._free.put(devices)

    @contextlib.contextmanager
    def hold(self) -> Iterator[tuple[int, ...]]:
        devices = self._free.get()
        files = []
        try:
            for dev in sorted(devices):  # one order everywhere: no deadlock between workers
                fh = open(self.lock_dir / f"gpu{dev}.lock", "w")  # noqa: SIM115
                fcntl.flock(fh, fcntl.LOCK_EX)
                files.append(fh)
            yield devices
        finally:
            for fh in files:
                fcntl.flock(fh, fcntl.LOCK_UN)
                fh.close()
            self._free.put(devices)


@dataclass
class WorkerState:
    """What the running ``python -m academy.worker`` process tells execute()."""

    name: str
    workroot: Path
    devices: DevicePool | None = None
    stopping: threading.Event = field(default_factory=threading.Event)
    # run id -> process-group id of the lab going, for tests and the shutdown path
    running: dict[int, int] = field(default_factory=dict)
    pool: WarmPool | None = None  # warm processes for single-node CPU labs (academy.labruns.pool)
    graders: GraderPool | None = None  # warm graders for exercise runs (academy.labruns.pool)


_worker: WorkerState | None = None


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def set_worker(state: WorkerState | None) -> None:
    """Make this process a worker (None: no longer): the queue's task runs :func:`execute`."""
    global _worker
    _worker = state
    serve(execute if state is not None else None)


def _libc_prctl():
    with contextlib.suppress(OSError, AttributeError):
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    return None


# Looked up here, once: `_die_with_worker` runs between fork and exec in a worker
# with threads, where loading a library (dlopen's locks) could deadlock.
_PRCTL = _libc_prctl()


def _die_with_worker() -> None:
    """In the lab's CLI, before exec: SIGKILL me if the worker dies (its ranks follow me)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _claim(run_id: int, me: str) -> LabRun | None:
    """Take a run (queued -> running), and its node 0 with it (an ordinary run's only node)."""
    now = utcnow()
    with session_scope() as session:
        claimed = session.exec(
            update(LabRun).where(LabRun.id == run_id, LabRun.status == "queued")
            .values(status="running", worker=me, started_at=now, heartbeat_at=now)
        ).rowcount
        run = session.get(LabRun, run_id) if claimed else None
        if run is not None:
            session.add(LabRunNode(run_id=run_id, node=0, worker=me, heartbeat_at=now))
        return run


def _join(run_id: int, node: int, me: str) -> LabRun | None:
    """Take node ``node`` > 0 of a multi-node run; None when it is taken, or the run is over.

    One conditional INSERT (the row's primary key is (run, node)), so of two
    workers holding copies of one node's message exactly one runs it. The
    run may still be queued: its node 0 is claimed by whichever worker takes
    that message, and torchrun's rendezvous waits for it.
    """
    with session_scope() as session:
        run = session.get(LabRun, run_id)
        if run is None or run.status not in ACTIVE or run.cancel_requested \
                or not 0 < node < nodes_of(run.params):
            return None
        dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
        taken = session.exec(dialect.insert(LabRunNode.__table__).values(
            run_id=run_id, node=node, worker=me, heartbeat_at=utcnow(), status="running",
        ).on_conflict_do_nothing(index_elements=["run_id", "node"])).rowcount
        return run if taken else None



def _beat_node(run_id: int, node: int, me: str, progress: dict[str, Any] | None) -> tuple[bool, bool]:
    """A node's heartbeat (node 0 beats the run's row too) and the newest progress
    event, if any; (still going, cancel requested).

    Not going any more when another node or the reaper has ended the run:
    the node then stops its lab, as for a cancel.
    """
    now = utcnow()
    with session_scope() as session:
        ours = session.exec(
            update(LabRunNode).where(LabRunNode.run_id == run_id, LabRunNode.node == node,
                                     LabRunNode.worker == me, LabRunNode.status == "running")
            .values(heartbeat_at=now)
        ).rowcount
        if node == 0:
            session.exec(update(LabRun).where(LabRun.id == run_id, LabRun.status == "running",
                                              LabRun.worker == me).values(heartbeat_at=now))
        if progress is not None:  # from the node whose ranks include global rank 0
            session.exec(update(LabRun).where(LabRun.id == run_id, LabRun.status == "running")
                         .values(progress=progress))
        status, cancel = session.exec(
            select(LabRun.status, LabRun.cancel_requested).where(LabRun.id == run_id)).one()
    return bool(ours) and status in ACTIVE, bool(cancel)


def _end_node(run_id: int, node: int, me: str, status: RunStatus, *, error: dict[str, Any] | None = None,
              result: dict[str, Any] | None = None, progress: dict[str, Any] | None = None,
              passed: tuple[int, str] | None = None) -> None:
    """Record how one node ended, and the run's end when this settles it.

    A node that failed (or was cancelled) ends the run at once, unless it has
    ended already; the first failure is the reason kept, with ``result`` when
    one is given (an ordinary run keeps the report of a failed lab). A node
    that ended well records the result if it has it (rank 0 was there), and
    the last node to end well makes the run done. The no-op UPDATE of the run
    comes first: it takes the run's row lock (PostgreSQL) or the database's
    write lock (SQLite), so two nodes ending at once are counted one after the
    other. ``passed``: (learner id, exercise) of a passing exercise report,
    whose pass is recorded in the transaction that makes the run done, so
    that neither exists without the other.
    """
    now = utcnow()
    active = LabRun.status.in_(ACTIVE)
    ran_on = (result or {}).get("machine")
    with session_scope() as session:
        session.exec(update(LabRun).where(LabRun.id == run_id)
                     .values(cancel_requested=LabRun.cancel_requested))
        if isinstance(ran_on, dict) and ran_on.get("torch"):  # where it ran: the lab's own account
            session.exec(update(LabRun).where(LabRun.id == run_id, active).values(machine=ran_on))
        session.exec(update(LabRunNode).where(LabRunNode.run_id == run_id, LabRunNode.node == node,
                                              LabRunNode.worker == me)
                     .values(status=status, heartbeat_at=now))
        if status != "done":
            kept = {} if result is None else {"result": result}
            if session.exec(update(LabRun).where(LabRun.id == run_id, active)
                            .values(status=status, finished_at=now, error=error, **kept)).rowcount:
                prune_results(session=session, run_id=run_id)
            return
        if result is not None:
            session.exec(update(LabRun).where(LabRun.id == run_id, active)
                         .values(result=result, progress=progress))
        params, stored = session.exec(select(LabRun.params, LabRun.result).where(LabRun.id == run_id)).one()
        ended_well = session.exec(select(func.count()).select_from(LabRunNode).where(
            LabRunNode.run_id == run_id, LabRunNode.status == "done")).one()
        if ended_well < nodes_of(params):
            return
        if stored is None:  # every node exited 0, yet rank 0 wrote no result
            session.exec(update(LabRun).where(LabRun.id == run_id, active).values(
                status="failed", finished_at=now,
                error={"kind": "crash", "message": "no node has the result of global rank 0"}))
        elif session.exec(update(LabRun).where(LabRun.id == run_id, LabRun.status == "running")
                          .values(status="done", finished_at=now)).rowcount and passed is not None:
            exercises.record_pass(session=session, learner_id=passed[0], exercise=passed[1], run_id=run_id)
        prune_results(session=session, run_id=run_id)


def _joined(run_id: int) -> int:
    """Nodes of a run that some worker has taken."""
    with session_scope() as session:
        return session.exec(select(func.count()).select_from(LabRunNode)
                            .where(LabRunNode.run_id == run_id)).one()


def execute(run_id: int, node: int = 0) -> None:
    """The job: claim the run (or join it as node ``node``), run its lab to the end,
    record the outcome, tidy up."""
    state = _worker
    if state is None:
        raise RuntimeError("lab jobs run only inside `python -m academy.worker`")
    if state.stopping.is_set():
        # Taken from the queue just as the worker was told to stop: put it back
        # (the row is still "queued", the node not taken), so that another worker runs it.
        enqueue(run_id, _queue_of(run_id), node=node)
        return
    run = _claim(run_id, state.name) if node == 0 else _join(run_id, node, state.name)
    if run is None:  # cancelled while queued, or taken already: nothing to do
        if node == 0:
            log.info("run %s: not queued any more, skipped", run_id)
        else:
            log.info("run %s: node %s not to be run (taken, or the run is over), skipped", run_id, node)
        return
    if node == 0:
        log.info("run %s: claimed by %s", run_id, state.name)
    else:
        log.info("run %s: node %s joined by %s", run_id, node, state.name)
    workdir = Path(tempfile.mkdtemp(prefix=f"run-{run_id}-", dir=state.workroot))
    try:
        if run.queue == "gpu" and state.devices is not None:
            with state.devices.hold() as devices:
                _run_lab(run, state, workdir, {"CUDA_VISIBLE_DEVICES": ",".join(map(str, devices))},
                         node=node)
        else:
            _run_lab(run, state, workdir, {}, node=node)
    except Exception as exc:  # noqa: BLE001  (never leave a run "running" behind)
        error = {"kind": "crash", "message": repr(exc)}
        _end_node(run_id, node, state.name, "failed",
                  error={**error, "node": node} if nodes_of(run.params) > 1 else error)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        log.info("run %s: ended", run_id)


def _queue_of(run_id: int) -> str:
    with session_scope() as session:
        return session.exec(select(LabRun.queue).where(LabRun.id == run_id)).one()


class _Tail:
    """The newest whole JSON line of a growing events file, reading only what is new."""

    def __init__(self, path: Path):
        self.path, self.offset, self.rest, self.last = path, 0, b"", None

    def latest(self) -> dict[str, Any] | None:
        """The newest event since the previous call, or None when there is none."""
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
        except OSError:
            return None
        self.offset += len(chunk)
        lines = (self.rest + chunk).split(b"\n")
        self.rest = lines.pop()  # a line still being written
        for line in reversed(lines):
            try:
                self.last = json.loads(line)
                return self.last
            except ValueError:
                continue
        return None


def _kill(proc: subprocess.Popen) -> None:
    """Stop the lab's whole process group: the CLI and every rank it spawned."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


def _run_lab(run: LabRun, state: WorkerState, workdir: Path, env_extra: dict[str, str],
             *, node: int = 0) -> None:
    """Run the run's command (``node``: this worker's node of the run) and record how it ended."""
    settings = get_settings()
    kind = kind_of(run.lab)
    try:
        argv, env_kind = kind.command(run, workdir)
    except (ValueError, TypeError) as exc:  # stored as this worker cannot run it (its limits refuse it)
        _end_node(run.id, node, state.name, "failed", error={"kind": "invalid", "message": str(exc)})
        return
    env = {**lab_env(env_extra), **env_kind}
    started = time.monotonic()
    stopped_by: str | None = None
    tail = _Tail(workdir / "events.jsonl")
    nodes, joined = nodes_of(run.params), False
    pools = [pool for pool in (state.pool, state.graders) if pool is not None]
    with open(workdir / "output.log", "w") as out:
        # A warm process (or grader) is the same command with PyTorch already imported (the
        # sandbox already started); none ready: a fresh one.
        proc = next((p for pool in pools if nodes == 1 and (p := pool.take(argv, env, workdir / "output.log"))),
                    None)
        proc = proc or subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_worker,
        )
        state.running[run.id] = proc.pid
        try:
            # The CLI bounds itself; the limit here is the backstop if even that hangs
            # (a node may first wait that long for its peers at the rendezvous).
            limit = settings.labs.timeout_s + 30 + (settings.lab_node_wait_s if nodes > 1 else 0)
            wrote, ours, cancel, pending = -TICK_S, True, False, None
            while proc.poll() is None:
                # A new progress event goes to the database once seen, at most every
                # PROGRESS_S (the page shows it within its own cadence); a heartbeat every TICK_S.
                pending = tail.latest() or pending
                since = time.monotonic() - wrote
                if since >= TICK_S or (pending is not None and since >= PROGRESS_S):
                    ours, cancel = _beat_node(run.id, node, state.name, pending)
                    wrote, pending = time.monotonic(), None
                if nodes > 1 and not joined \
                        and time.monotonic() - started > settings.lab_node_wait_s:
                    joined = _joined(run.id) >= nodes  # once all are taken, no need to ask again
                    stopped_by = None if joined else "nodes_missing"
                if cancel:
                    stopped_by = "cancelled"
                elif not ours:
                    stopped_by = "lost"
                elif state.stopping.is_set():
                    stopped_by = "worker_stopped"
                elif time.monotonic() - started > limit:
                    stopped_by = "timeout"
                if stopped_by:
                    _kill(proc)
                    break
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=WATCH_S)
        finally:
            if proc.poll() is None:
                _kill(proc)
            state.running.pop(run.id, None)
    tail.latest()  # the last events, written just before the CLI exited
    report = kind.fit(run, _read_json(workdir / "result.json"), settings.lab_result_max_bytes)
    output = (workdir / "output.log").read_text(errors="replace")[-4000:]
    try:
        _ended(run, node, state.name, stopped_by=stopped_by, code=proc.returncode, report=report,
               progress=tail.last, output=output)
    finally:
        for pool in pools:  # once the run is recorded, so no import shares the CPU with either
            pool.refill()


def _ended(run: LabRun, node: int, me: str, *, stopped_by: str | None, code: int | None,
           report: Any, progress: dict[str, Any] | None, output: str) -> None:
    """How this worker's node of the run ended (an ordinary run's one node), in the terms of
    :func:`_end_node`.

    Stopped by the worker (cancelled, lost, nodes missing, out of time, the
    worker stopping), the run failed for that reason, naming where; ended by
    itself, its kind says what its report (``report``: what the kind's ``fit``
    kept) means, or, with nothing to go by, it crashed.
    """
    single = nodes_of(run.params) == 1
    where = {"worker": me} if single else {"node": node, "worker": me}
    if stopped_by == "cancelled":
        _end_node(run.id, node, me, "cancelled", error={"kind": "cancelled"})
    elif stopped_by == "lost":  # the run has ended already (the reaper, or another node failed)
        _end_node(run.id, node, me, "failed", error={"kind": "lost", **where})
    elif stopped_by == "nodes_missing":
        wait = get_settings().lab_node_wait_s
        _end_node(run.id, node, me, "failed", error={
            "kind": "nodes_missing", **where,
            "message": f"{_joined(run.id)} of {nodes_of(run.params)} nodes taken by a worker within {wait} s"})
    elif stopped_by:
        _end_node(run.id, node, me, "failed",
                  error={"kind": stopped_by, **where, "message": output.strip()[-500:]})
    else:
        ended = Ended(code=code, report=report, output=output, where=where)
        ending = kind_of(run.lab).outcome(run, ended) or {"status": "failed", "error": crashed(ended)}
        _end_node(run.id, node, me, progress=progress, **ending)




def _read_json(path: Path) -> dict[str, Any] | None:
    """The lab's JSON; Infinity/NaN (e.g. an unfittable bandwidth) become None,
    since PostgreSQL's JSON type does not accept them."""
    try:
        return json.loads(path.read_text(), parse_constant=lambda _name: None)
    except (OSError, ValueError, RecursionError):  # RecursionError: nesting deeper than json can read
        return None


def register_worker(state: WorkerState, *, queues: list[str], slots: int) -> None:
    """Write (or refresh) this worker's row; called every couple of seconds."""
    now = utcnow()
    devices = ";".join(",".join(map(str, s)) for s in state.devices.sets) if state.devices else ""
    with session_scope() as session:
        row = session.get(LabWorker, state.name)
        if row is None:
            row = LabWorker(name=state.name, host=socket.gethostname(), pid=os.getpid(),
                            queues=",".join(queues), slots=slots, devices=devices, started_at=now)
        row.heartbeat_at = now
        session.add(row)


def unregister_worker(state: WorkerState) -> None:
    with session_scope() as session:
        session.exec(LabWorker.__table__.delete().where(LabWorker.name == state.name))


def tidy_workroots(base: Path) -> int:
    """Remove working folders left by dead workers of this host; returns how many."""
    host = socket.gethostname()
    count = 0
    for folder in base.glob(f"{host}-*"):
        pid = folder.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(folder, ignore_errors=True)
            count += 1
    return count
