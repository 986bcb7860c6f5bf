"""Lab runs as jobs on a durable queue, run by worker processes anywhere: the web side.

The web process only writes a :class:`~academy.models.LabRun` row and puts its id
on a huey queue; a ``python -m academy.worker`` process (on this machine or
another) takes it, starts ``python -m labs LAB ... --events F --out G`` in its
own process group, and writes everything back to the row: the claim, a
heartbeat and the newest progress event about once a second, and the result
or the error at the end (that side, the job, is :mod:`academy.labruns.job`, which
the worker names as the queue's task with :func:`serve`). The
page reads only the database, so any app replica can show any run, and the
web process never forks a rank. This module holds the queues, what the web
side asks of the database (submit, cancel, position, the reaper). What a
run is beyond that (a lab or a grading: its command, what its report means
and keeps) the queue does not know: that is ``academy.labruns.kinds``.

Why huey: its SQLite storage needs no server, so a single machine keeps the
one-command start (the queue lives in a file beside the database), and its
Redis storage serves web servers and workers on many machines. The queue
holds run ids only; the row is the record.

The promises and where they are kept:

- Exactly once: a worker claims a run with one conditional UPDATE (queued ->
  running); a run cancelled while queued, or already claimed, is skipped.
- Cancel: the page sets ``cancel_requested``; the worker reads it with each
  heartbeat (twice a second) and kills the lab's process group.
- A dead worker: its heartbeat stops; :func:`reap` (run by every worker every
  couple of seconds, and by the page when it polls) fails the run with kind
  ``worker_lost`` once the heartbeat is ``lab_dead_after_s`` old. The lab
  itself dies with the worker (``PR_SET_PDEATHSIG`` on the lab's CLI, which
  sets the same on its ranks), so nothing is left running.
- Fair use: :func:`submit` counts, under one lock, a learner's (a guest
  client's) active runs, all guests' and the queue's (review N-3).
- Reports: what a run stores is capped, and older runs keep only status and
  summary (review N-6): each kind of job says how (``academy.labruns.kinds``).
- Hardware: one huey queue per kind, ``cpu`` and ``gpu`` (NCCL labs). A GPU
  worker owns device sets and runs one lab per set at a time, holding a lock
  file per device, so two labs never share a GPU.
- Several nodes: a run with ``params["nodes"] = N > 1`` is N messages (run,
  node) on its queue. The worker taking node 0 claims the run as above (an
  ordinary run's one node is node 0 too); one taking node k > 0 joins it by
  inserting the row (run, k) of :class:`~academy.models.LabRunNode` (the
  primary key settles a race). Every node starts
  ``academy.labruns.kinds.torchrun_command``'s line, whose c10d rendezvous
  gathers them; the node hosting global rank 0 gets result.json. The run is
  done when every node ended well, failed as soon as one failed (the others
  read that with their heartbeat and stop, as for a cancel), and failed with
  kind ``nodes_missing`` when its nodes were not all taken within
  ``lab_node_wait_s``; the reaper also watches each node's heartbeat.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from datetime import timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import update
from sqlmodel import func, select

from academy.accounts import UNKNOWN_CLIENT
from academy.db import owner_only, session_scope
from academy.errors import UserError
from academy.models import ACTIVE, LabRun, LabRunNode, LabWorker, utcnow
from academy.settings import ROOT, get_settings
from labs.context import LABS

QUEUES = ("cpu", "gpu")
log = logging.getLogger("academy.worker")


def queue_for(params: dict[str, Any]) -> str:
    """The hardware queue a run waits in: NCCL needs GPUs, everything else runs on CPUs."""
    return "gpu" if params.get("backend") == "nccl" else "cpu"


def nodes_of(params: dict[str, Any] | None) -> int:
    """How many nodes (workers, one torchrun each) a run spans; 1 unless it asked for more."""
    return int((params or {}).get("nodes", 1))


# --------------------------------------------------------------------------
# The queue itself (huey)


def _queue_file() -> Path:
    """The embedded queue's SQLite file: beside the database when that is a file too."""
    url = get_settings().database_url
    if url.startswith("sqlite:///") and url.split("///", 1)[1] not in ("", ":memory:"):
        return Path(url.split("///", 1)[1]).with_name("labqueue.db")
    return ROOT / "data" / "labqueue.db"


def get_huey(name: str):
    """The huey instance of queue ``name`` for the current settings (the worker consumes it)."""
    return _queue(name)[0]


def _queue(name: str):
    if name not in QUEUES:
        raise ValueError(f"unknown lab queue {name!r}; known: {', '.join(QUEUES)}")
    url = get_settings().lab_queue_url
    return _huey(name, url, "" if url else str(_queue_file()))


@lru_cache(maxsize=16)
def _huey(name: str, url: str, filename: str):
    """(huey, task) for one queue; cached per storage, so tests may point elsewhere."""
    from huey import RedisHuey, SqliteHuey

    # results=False: the LabRun row is the result; huey keeps nothing after a run.
    if url.startswith(("redis://", "rediss://", "unix://")):
        huey = RedisHuey(f"dpa-labs-{name}", url=url, results=False)
    elif url:
        raise ValueError(f"LAB_QUEUE_URL must be empty (SQLite) or redis://...; got {url!r}")
    else:
        # Run ids only, yet owner-only like the database beside it (review N-16): the
        # file is created 0600 before SQLite opens it, so its -wal and -shm are too.
        owner_only(Path(filename))
        huey = SqliteHuey(f"dpa-labs-{name}", filename=filename, results=False, strict_fifo=True)
    # No retries: a run that a dead worker dropped is failed by the reaper, never run twice.
    task = huey.task(name="run_lab", retries=0)(_run_job)
    return huey, task


# The job a worker process runs for each message: ``academy.labruns.job.execute``, which
# names itself here when the worker starts (``labjob.set_worker``). So the web side
# imports no worker code, and the worker side imports the queue, not the other way.
_job: Callable[[int, int], None] | None = None


def serve(job: Callable[[int, int], None] | None) -> None:
    """Name the job this process runs for each message it takes (None: none)."""
    global _job
    _job = job


def _run_job(run_id: int, node: int = 0) -> None:
    """The registered task: the job :func:`serve` named."""
    if _job is None:
        raise RuntimeError("lab jobs run only inside `python -m academy.worker`")
    _job(run_id, node)


def enqueue(run_id: int, queue: str, *, node: int = 0) -> None:
    """Put a run (its row already written, status queued), or one node of it, on its queue.

    A single-node run's message is its id alone, as before multi-node runs
    existed; node k > 0 of a multi-node run is (id, k).
    """
    task = _queue(queue)[1]
    if node:
        task(run_id, node)
    else:
        task(run_id)


def pending(queue: str) -> int:
    """Messages waiting in the queue's storage (tests and the benchmark)."""
    return get_huey(queue).pending_count()


def pending_run_ids(queue: str) -> set[int]:
    """The run ids whose messages wait in the queue's storage now."""
    return {run_id for run_id, _node in pending_messages(queue)}


def pending_messages(queue: str) -> set[tuple[int, int]]:
    """(run id, node) of each message waiting in the queue's storage now (node 0: a run's first)."""
    found = set()
    for task in get_huey(queue).pending():
        with contextlib.suppress(IndexError, TypeError, ValueError):
            found.add((int(task.args[0]), int(task.args[1]) if len(task.args) > 1 else 0))
    return found


def requeue_lost(queues: list[str], *, now=None) -> int:
    """Put back on the queue the queued runs whose message is gone; returns how many.

    A message can be lost while its row says "queued": Redis restarted
    without persistence or was flushed, or a worker died between taking the
    message and claiming the run. Such a run would wait forever. A run
    queued for longer than ``lab_requeue_after_s`` with no message in its
    queue gets a new one. A message sent twice is harmless: the claim is a
    conditional UPDATE, so the second copy finds the run taken and skips it.
    A multi-node run, queued or running, gets a new message for each node
    that no worker has taken (no :class:`LabRunNode` row) and none waits for;
    a node's second copy finds its row there and skips it.
    """
    cutoff = (now or utcnow()) - timedelta(seconds=get_settings().lab_requeue_after_s)
    count = 0
    for queue in queues:
        with session_scope() as session:
            waiting = session.exec(
                select(LabRun.id, LabRun.status, LabRun.params)
                .where(LabRun.status.in_(ACTIVE), LabRun.queue == queue, LabRun.created_at < cutoff)
            ).all()
            ids = [run_id for run_id, _status, _params in waiting]
            taken = set(session.exec(select(LabRunNode.run_id, LabRunNode.node)
                                     .where(LabRunNode.run_id.in_(ids))).all()) if ids else set()
        expected = []
        for run_id, status, params in waiting:
            nodes = nodes_of(params)
            if nodes == 1:
                if status == "queued":
                    expected.append((run_id, 0))
                continue
            expected += [(run_id, node) for node in range(nodes)
                         if (run_id, node) not in taken and not (node == 0 and status == "running")]
        if not expected:
            continue
        present = pending_messages(queue)
        for run_id, node in expected:
            if (run_id, node) not in present:
                log.warning("run %s: node %s waits with no message in queue %s, sent again",
                            run_id, node, queue)
                enqueue(run_id, queue, node=node)
                count += 1
    return count


# --------------------------------------------------------------------------
# What the web side asks of the database


class LabRequestError(UserError, ValueError):
    """The lab request cannot be run as asked (the page shows ``key`` translated)."""


class QueueFull(LabRequestError):
    """Fair use refused the run: the learner's own limit, or the whole queue's."""


def _admission_lock(session) -> None:
    """Make count-then-insert one step across every app process, not just this one's threads.

    PostgreSQL: a transaction-scoped advisory lock. SQLite: a write that
    matches nothing still takes the database's write lock, so a second
    submitter waits (busy timeout) until this transaction commits.
    """
    if session.get_bind().dialect.name == "postgresql":
        session.exec(select(func.pg_advisory_xact_lock(0x64706173)))  # "dpas"
    else:
        session.exec(update(LabRun).where(LabRun.id == -1).values(status="queued"))


def submit(*, lab: str, params: dict[str, Any], learner_id: int | None, machine: dict[str, Any],
           session_runs: list[int] | tuple[int, ...] = (), client: str | None = None,
           source: str | None = None, nodes: int = 1) -> int:
    """Write a queued run (parameters already validated) and put it on its queue; its id.

    Fair use, counted in the database under :func:`_admission_lock`, refuses
    with :class:`QueueFull` when the asker already has
    ``lab_max_per_learner`` labs queued or running, when ``lab_max_queued``
    are queued or running in all, and, for a guest, when all guests together
    have ``Settings.lab_max_guests`` (a share of the queue kept away from
    signed-in learners, review N-3). A guest (no learner id) is counted by
    ``client`` (``academy.accounts.client_key``, stored with the run): a new
    browser session of the same client is the same guest. Where the client
    is unknown (None or loopback: a proxy on this machine speaks for
    everybody) a guest is counted by ``session_runs``, the ids its browser
    session submitted, and the guests' share still bounds them all.
    Refused with a :class:`LabRequestError` when the queue cannot be reached.
    ``source``: an exercise submission's code (lab ``exercise``), stored
    with the run for the worker that grades it. ``nodes``: workers (one
    torchrun each, ``world_size`` ranks on each) the run spans; more than
    one is refused unless ``lab_max_nodes`` allows it and
    ``lab_rendezvous_endpoint`` is set, and for anything but a lab.
    """
    settings = get_settings()
    queue = queue_for(params)
    if nodes != 1:  # a lab's run only: a grading is one sandbox on one worker
        allowed = settings.lab_max_nodes if settings.lab_rendezvous_endpoint else 1
        if lab not in LABS or not 1 <= nodes <= allowed:
            raise LabRequestError("labs_refused.nodes", max=max(1, allowed))
        params = {**params, "nodes": nodes}
    guest = learner_id is None
    known = guest and client not in (None, "", UNKNOWN_CLIENT)
    with session_scope() as session:
        _admission_lock(session)
        active = LabRun.status.in_(ACTIVE)

        def count(*where) -> int:
            return session.exec(select(func.count()).select_from(LabRun).where(active, *where)).one()

        if not guest:
            mine = (LabRun.learner_id == learner_id,)
        elif known:
            mine = (LabRun.learner_id.is_(None), LabRun.client == client)
        else:
            mine = (LabRun.id.in_(list(session_runs)),)
        if count(*mine) >= settings.lab_max_per_learner:
            raise QueueFull("labs_refused.too_many_guest" if known else "labs_refused.too_many",
                            limit=settings.lab_max_per_learner)
        if count() >= settings.lab_max_queued:
            raise QueueFull("labs_refused.queue_full", limit=settings.lab_max_queued)
        if guest and count(LabRun.learner_id.is_(None)) >= settings.lab_max_guests:
            raise QueueFull("labs_refused.guests_full", limit=settings.lab_max_guests)
        run = LabRun(learner_id=learner_id, lab=lab, params=params, machine=machine,
                     status="queued", queue=queue, source=source,
                     client=(client or UNKNOWN_CLIENT)[:64] if guest else None)
        session.add(run)
        session.flush()
        run_id = run.id
    try:
        _enqueue_nodes(run_id, queue, nodes)
    except Exception as exc:  # the queue's storage is down: say so, do not crash
        with session_scope() as session:
            session.exec(update(LabRun).where(LabRun.id == run_id).values(
                status="failed", finished_at=utcnow(),
                error={"kind": "queue_unavailable", "message": repr(exc)}))
        raise LabRequestError("labs_refused.queue_unavailable") from exc
    return run_id


def _enqueue_nodes(run_id: int, queue: str, nodes: int) -> None:
    """One message per node: the run's own (node 0) first, so that it is claimed first."""
    for node in range(nodes):
        enqueue(run_id, queue, node=node)


def request_cancel(run_id: int) -> bool:
    """Cancel a run: a queued one at once, a running one by its worker within a second.

    False when the run has already ended (or does not exist).
    """
    now = utcnow()
    with session_scope() as session:
        dropped = session.exec(
            update(LabRun).where(LabRun.id == run_id, LabRun.status == "queued")
            .values(status="cancelled", finished_at=now, cancel_requested=True,
                    error={"kind": "cancelled"})
        ).rowcount
        if dropped:
            return True
        return bool(session.exec(
            update(LabRun).where(LabRun.id == run_id, LabRun.status == "running")
            .values(cancel_requested=True)
        ).rowcount)


def queue_position(run_id: int) -> int | None:
    """1 for the next run of its queue to start; None when the run is not waiting."""
    with session_scope() as session:
        run = session.get(LabRun, run_id)
        if run is None or run.status != "queued":
            return None
        return session.exec(
            select(func.count()).select_from(LabRun)
            .where(LabRun.status == "queued", LabRun.queue == run.queue, LabRun.id <= run_id)
        ).one()


def live_workers(*, session, queue: str) -> list[LabWorker]:
    """Workers serving ``queue`` whose heartbeat is recent."""
    cutoff = utcnow() - timedelta(seconds=get_settings().lab_dead_after_s)
    rows = session.exec(select(LabWorker).where(LabWorker.heartbeat_at >= cutoff)).all()
    return [w for w in rows if queue in w.queues.split(",")]


def largest_gpu_set() -> int:
    """GPUs in the largest device set of a live GPU worker (0: none is up).

    An NCCL lab of N ranks needs one set of N GPUs; the web process itself
    may have none, so this, not its own CUDA, says whether one can run.
    """
    with session_scope() as session:
        workers = live_workers(session=session, queue="gpu")
    return max((len(s.split(",")) for w in workers for s in w.devices.split(";") if s), default=0)


def queue_info(run_id: int, *, recent: int = 20) -> tuple[int | None, int, float | None]:
    """(position, slots, expected wait in seconds) of a waiting run; (None, 0, None) otherwise.

    ``slots``: how many runs of its queue the live workers run at once (0:
    no worker is up). The runs ahead (running, and queued before it) fill the
    slots in rounds, each round as long as the mean of the queue's last
    ``recent`` finished runs; None when nothing has run yet or no worker is up.
    """
    position = queue_position(run_id)
    if position is None:
        return None, 0, None
    with session_scope() as session:
        queue = session.get(LabRun, run_id).queue
        slots = sum(w.slots for w in live_workers(session=session, queue=queue))
        running = session.exec(select(func.count()).select_from(LabRun).where(
            LabRun.status == "running", LabRun.queue == queue)).one()
        done = session.exec(
            select(LabRun.started_at, LabRun.finished_at)
            .where(LabRun.queue == queue, LabRun.status == "done", LabRun.started_at.is_not(None),
                   LabRun.finished_at.is_not(None))
            .order_by(LabRun.id.desc()).limit(recent)
        ).all()
    if not done or slots == 0:
        return position, slots, None
    mean = sum((end - start).total_seconds() for start, end in done) / len(done)
    ahead = running + position - 1
    rounds = 0 if ahead < slots else (ahead - slots) // slots + 1
    return position, slots, rounds * mean


def expected_wait_s(run_id: int) -> float | None:
    return queue_info(run_id)[2]


def reap(*, now=None) -> int:
    """Fail running runs whose worker stopped writing its heartbeat; returns how many.

    Safe to call from anywhere, often: the update is conditional on the
    heartbeat being stale, so two reapers never fight, and a live worker's
    run is never touched.
    """
    cutoff = (now or utcnow()) - timedelta(seconds=get_settings().lab_dead_after_s)
    with session_scope() as session:
        stale = session.exec(
            select(LabRun.id, LabRun.worker).where(LabRun.status == "running",
                                                   LabRun.heartbeat_at < cutoff)
        ).all()
        count = 0
        for run_id, worker in stale:
            count += session.exec(
                update(LabRun).where(LabRun.id == run_id, LabRun.status == "running",
                                     LabRun.heartbeat_at < cutoff)
                .values(status="failed", finished_at=utcnow(),
                        error={"kind": "worker_lost", "worker": worker,
                               "message": f"no heartbeat from worker {worker} for "
                                          f"{get_settings().lab_dead_after_s} s"})
            ).rowcount
        # A multi-node run also ends when any of its nodes' workers died.
        stale_nodes = session.exec(
            select(LabRunNode.run_id, LabRunNode.node, LabRunNode.worker)
            .join(LabRun, LabRun.id == LabRunNode.run_id)
            .where(LabRun.status.in_(ACTIVE), LabRunNode.status == "running",
                   LabRunNode.heartbeat_at < cutoff)
        ).all()
        for run_id, node, worker in stale_nodes:
            count += session.exec(
                update(LabRun).where(LabRun.id == run_id, LabRun.status.in_(ACTIVE))
                .values(status="failed", finished_at=utcnow(),
                        error={"kind": "worker_lost", "worker": worker, "node": node,
                               "message": f"no heartbeat from worker {worker} (node {node}) for "
                                          f"{get_settings().lab_dead_after_s} s"})
            ).rowcount
    return count


def reap_if_stale(run: LabRun) -> LabRun:
    """The page's check on the run it shows: reap only when this run's heartbeat is stale.

    So that a run whose worker died ends even when no worker is left to reap
    it, at the cost of one comparison per poll (no write unless stale).
    """
    beat = run.heartbeat_at
    if run.status == "running" and beat is not None:
        if beat.tzinfo is None:  # SQLite hands back naive UTC
            beat = beat.replace(tzinfo=utcnow().tzinfo)
        if utcnow() - beat > timedelta(seconds=get_settings().lab_dead_after_s) and reap():
            with session_scope() as session:
                return session.get(LabRun, run.id)
    return run


def forget_workers() -> None:
    """Workers silent for ten minutes are gone; their rows would only mislead the wait estimate."""
    cutoff = utcnow() - timedelta(minutes=10)
    with session_scope() as session:
        session.exec(LabWorker.__table__.delete().where(LabWorker.heartbeat_at < cutoff))
