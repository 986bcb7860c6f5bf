"""Running labs for the web app: a queue with a global limit, outside Streamlit.

Each lab runs as its own process group, ``python -m labs LAB ... --events F
--out G``, started by a worker thread of this module, never by the Streamlit
script thread. A rerun or page switch does not touch it; the page polls
:func:`status`. Cancel kills the whole process group. At most
``Settings.lab_concurrency`` labs run at once; the rest wait in FIFO order.
Every run is a :class:`~academy.models.LabRun` row: queued, running, then done,
failed or cancelled.

So that one visitor cannot fill the queue and make everyone else wait, a
learner (or a guest's browser session) may have ``Settings.lab_max_per_learner``
labs queued or running, and all visitors together ``Settings.lab_max_queued``;
both are counted in the database when a run is submitted. A run's working
directory exists only while it runs, and a finished run leaves no ``Job``
behind: the database row is the record.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from sqlmodel import func, select

from academy.db import session_scope
from academy.errors import UserError
from academy.models import LabRun, utcnow
from academy.settings import ROOT, get_settings
from labs import context
from labs.launch import resolve_backend
from labs.params import ParamError, Run, Spec, check, element_type, flag, offered

LABS = tuple(context.LABS)
ACTIVE = ("queued", "running")


class LabRequestError(UserError, ValueError):
    """The request cannot be run as asked (the page shows ``key`` translated)."""


@dataclass
class Job:
    run_id: int
    lab: str
    params: dict[str, Any]
    workdir: Path | None = None  # made when the run starts, removed when it ends
    proc: subprocess.Popen | None = None
    cancelled: bool = False
    started: float | None = None
    last_event: dict[str, Any] | None = None


class _Manager:
    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.queue: deque[Job] = deque()
        self.running: dict[int, Job] = {}
        self.jobs: dict[int, Job] = {}
        self.workers: list[threading.Thread] = []

    def ensure_workers(self) -> None:
        want = get_settings().lab_concurrency
        with self.lock:
            self.workers = [w for w in self.workers if w.is_alive()]
            while len(self.workers) < want:
                worker = threading.Thread(target=self._work, name="lab-worker", daemon=True)
                worker.start()
                self.workers.append(worker)

    def _work(self) -> None:
        while True:
            with self.lock:
                while not self.queue:
                    self.lock.wait()
                job = self.queue.popleft()
                if job.cancelled:
                    continue
                self.running[job.run_id] = job
            try:
                _run(job)
            finally:
                with self.lock:
                    self.running.pop(job.run_id, None)
                    self.jobs.pop(job.run_id, None)  # the LabRun row now holds everything
                    self.lock.notify_all()


_manager = _Manager()


def offers(lab: str) -> dict[str, tuple[type, Spec]]:
    """What a learner may set for ``lab``: the parameters the page offers
    (`labs.params.Run`'s and the lab's own), with the dataclass each belongs to."""
    return {name: (cls, spec) for cls in (Run, context.load_lab(lab).Params)
            for name, (_f, spec) in offered(cls).items()}


def validate(lab: str, params: dict[str, Any]) -> dict[str, Any]:
    """Keep only the parameters the page offers, checked against their schema
    (``labs.params``) and Settings' limits, in the page's ranges."""
    if lab not in LABS:
        raise LabRequestError("labs.err_unknown_lab", lab=lab)
    offer = offers(lab)
    clean: dict[str, Any] = {}
    try:
        for key, value in params.items():
            if value is None or key not in offer:
                continue
            kind, _many = element_type(offer[key][0], key)
            clean[key] = kind(value)
    except (TypeError, ValueError):
        raise LabRequestError("labs.err_value") from None
    clean.setdefault("world_size", Run().world_size)
    limits = get_settings().lab_limits
    try:
        # Requests the lab itself would refuse are refused here, in the
        # learner's language, instead of after starting processes.
        for cls in (Run, context.load_lab(lab).Params):
            check(cls(**{k: v for k, v in clean.items() if offer[k][0] is cls}), limits, page=True)
    except ParamError as err:
        raise _refusal(err, offer) from None
    except ValueError:  # a lab's own rule across fields (e.g. bench: max below min)
        raise LabRequestError("labs.err_value") from None
    if clean.get("backend") == "nccl":
        try:
            resolve_backend("nccl", clean["world_size"])
        except ValueError:
            gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
            raise LabRequestError("labs_refused.nccl", gpus=gpus) from None
    return clean


def _refusal(err: ParamError, offer: dict[str, tuple[type, Spec]]) -> LabRequestError:
    """The learner's words for a value the schema refused."""
    high = err.values.get("high")
    if err.rule == "avg_int":
        return LabRequestError("labs_refused.avg_int")
    if err.name == "world_size" and high is not None:
        return LabRequestError("labs.err_world_size", max=high)
    if err.name == "fail_rank" and high is not None:
        return LabRequestError("labs.err_fail_rank", max=high)
    if err.name in offer and offer[err.name][1].unit == "bytes" and high is not None:
        return LabRequestError("labs.err_size", low=err.values["low"], high=high)
    return LabRequestError("labs.err_value")


def command(lab: str, params: dict[str, Any], workdir: Path) -> list[str]:
    settings = get_settings()
    args = [sys.executable, "-m", "labs", lab, "--json", "--timeout", str(settings.lab_timeout_s),
            "--hang-timeout", str(settings.lab_hang_timeout_s),
            "--events", str(workdir / "events.jsonl"), "--out", str(workdir / "result.json")]
    offer = offers(lab)
    for key, value in params.items():
        args += [flag(key, offer[key][1]), str(value)]
    return args


_admit = threading.Lock()


def submit(*, lab: str, params: dict[str, Any], learner_id: int | None, machine: dict[str, Any],
           session_runs: list[int] | tuple[int, ...] = ()) -> int:
    """Queue a lab run; returns its LabRun id.

    Refused with a :class:`LabRequestError` when the learner already has
    ``lab_max_per_learner`` labs queued or running, or ``lab_max_queued`` are
    queued or running in all. A guest has no learner id: ``session_runs``,
    the ids its browser session submitted, are what it is counted by. The
    counts come from the database (not this process's memory), and the lock
    makes count and insert one step for the server's threads.
    """
    clean = validate(lab, params)
    settings = get_settings()
    with _admit, session_scope() as session:
        active = LabRun.status.in_(ACTIVE)
        mine = LabRun.learner_id == learner_id if learner_id is not None else LabRun.id.in_(list(session_runs))
        if session.exec(select(func.count()).select_from(LabRun).where(active, mine)).one() \
                >= settings.lab_max_per_learner:
            raise LabRequestError("labs_refused.too_many", limit=settings.lab_max_per_learner)
        if session.exec(select(func.count()).select_from(LabRun).where(active)).one() >= settings.lab_max_queued:
            raise LabRequestError("labs_refused.queue_full", limit=settings.lab_max_queued)
        run = LabRun(learner_id=learner_id, lab=lab, params=clean, machine=machine, status="queued")
        session.add(run)
        session.flush()
        run_id = run.id
    job = Job(run_id=run_id, lab=lab, params=clean)
    _manager.ensure_workers()
    with _manager.lock:
        _manager.jobs[run_id] = job
        _manager.queue.append(job)
        _manager.lock.notify_all()
    return run_id


def _set(run_id: int, **fields: Any) -> None:
    with session_scope() as session:
        run = session.get(LabRun, run_id)
        for key, value in fields.items():
            setattr(run, key, value)
        session.add(run)


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


def _run(job: Job) -> None:
    """Run the job's CLI to the end, record the outcome, then delete its working directory."""
    try:
        job.workdir = Path(tempfile.mkdtemp(prefix=f"lab-{job.run_id}-"))
        _set(job.run_id, status="running", started_at=utcnow())
        _run_in(job)
    except Exception as exc:  # noqa: BLE001  (a worker thread must never die with the run left "running")
        _set(job.run_id, status="failed", finished_at=utcnow(), error={"kind": "crash", "message": repr(exc)})
    finally:
        if job.workdir is not None:
            shutil.rmtree(job.workdir, ignore_errors=True)


def _run_in(job: Job) -> None:
    job.started = time.monotonic()
    # Settings' limits go to the CLI in the variables it reads (they may have come from .env).
    env = {**os.environ, **get_settings().lab_limits.environ(), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    log = open(job.workdir / "output.log", "w")  # noqa: SIM115
    try:
        job.proc = subprocess.Popen(
            command(job.lab, job.params, job.workdir), cwd=ROOT, env=env, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
        # The CLI bounds itself; this is the backstop if even that hangs.
        limit = get_settings().lab_timeout_s + 30
        while job.proc.poll() is None:
            if job.cancelled or time.monotonic() - job.started > limit:
                _kill(job.proc)
                break
            time.sleep(0.2)
    finally:
        log.close()
    result = _read_json(job.workdir / "result.json")
    output = (job.workdir / "output.log").read_text(errors="replace")[-4000:]
    if job.cancelled:
        _set(job.run_id, status="cancelled", finished_at=utcnow(), error={"kind": "cancelled"})
    elif result is not None and job.proc.returncode == 0 and not result.get("error"):
        _set(job.run_id, status="done", finished_at=utcnow(), result=result)
    else:
        error = (result or {}).get("error") or {
            "kind": "crash", "message": output.strip().splitlines()[-1] if output.strip() else "",
            "exit_code": job.proc.returncode,
        }
        _set(job.run_id, status="failed", finished_at=utcnow(), error=error, result=result)


def _read_json(path: Path) -> dict[str, Any] | None:
    """The lab's JSON; Infinity/NaN (e.g. an unfittable bandwidth) become None,
    since PostgreSQL's JSON type does not accept them."""
    try:
        return json.loads(path.read_text(), parse_constant=lambda _name: None)
    except (OSError, ValueError):
        return None


def progress(run_id: int) -> dict[str, Any] | None:
    """The newest progress event of a running lab."""
    job = _manager.jobs.get(run_id)
    if job is None:
        return None
    if job.workdir is None:  # still queued: nothing written yet
        return job.last_event
    path = job.workdir / "events.jsonl"
    try:
        with path.open() as fh:
            lines = fh.read().splitlines()
    except OSError:
        return job.last_event
    for line in reversed(lines):
        try:
            job.last_event = json.loads(line)
            break
        except ValueError:
            continue  # a line still being written
    return job.last_event


def queue_position(run_id: int) -> int | None:
    """1 for the next to start; None when not waiting."""
    with _manager.lock:
        for i, job in enumerate(_manager.queue, 1):
            if job.run_id == run_id:
                return i
    return None


def cancel(run_id: int) -> bool:
    """Stop a run: a queued one is dropped at once, a running one is killed by its worker."""
    with _manager.lock:
        job = _manager.jobs.get(run_id)
        if job is None:
            return False
        job.cancelled = True
        if job in _manager.queue:
            _manager.queue.remove(job)
            del _manager.jobs[run_id]
            _set(run_id, status="cancelled", finished_at=utcnow(), error={"kind": "cancelled"})
    return True


def get_run(run_id: int) -> LabRun | None:
    with session_scope() as session:
        return session.get(LabRun, run_id)


def recover_after_restart() -> int:
    """Runs left queued or running by a previous server process can never finish: say so."""
    with session_scope() as session:
        stale = session.exec(select(LabRun).where(LabRun.status.in_(("queued", "running")))).all()
        live = set(_manager.jobs)
        count = 0
        for run in stale:
            if run.id not in live:
                run.status, run.finished_at = "failed", utcnow()
                run.error = {"kind": "restart"}
                session.add(run)
                count += 1
    return count


def history(*, learner_id: int, limit: int = 20) -> list[LabRun]:
    with session_scope() as session:
        stmt = select(LabRun).where(LabRun.learner_id == learner_id).order_by(LabRun.id.desc()).limit(limit)
        return list(session.exec(stmt))


def runs(run_ids: list[int]) -> list[LabRun]:
    """A guest's runs of this visit, newest first."""
    if not run_ids:
        return []
    with session_scope() as session:
        return list(session.exec(select(LabRun).where(LabRun.id.in_(run_ids)).order_by(LabRun.id.desc())))


def latest_result(learner_id: int | None, lab: str) -> dict[str, Any] | None:
    if learner_id is None:
        return None
    with session_scope() as session:
        run = session.exec(select(LabRun).where(LabRun.learner_id == learner_id, LabRun.lab == lab,
                                                LabRun.status == "done").order_by(LabRun.id.desc())).first()
        return run.result if run else None


_recovered = threading.Event()


def recover_after_restart_once() -> None:
    """Called by the page: the first call in a server process tidies stale runs."""
    if not _recovered.is_set():
        _recovered.set()
        recover_after_restart()


def active_run_id(*, learner_id: int) -> int | None:
    """The learner's newest queued or running lab in this server process, if any."""
    with session_scope() as session:
        run = session.exec(select(LabRun).where(LabRun.learner_id == learner_id,
                                                LabRun.status.in_(("queued", "running")))
                           .order_by(LabRun.id.desc())).first()
    return run.id if run is not None and run.id in _manager.jobs else None
