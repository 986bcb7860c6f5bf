"""Running labs for the web app: validate the request, then hand it to the job queue.

The web process never starts a lab. :func:`submit` writes a
:class:`~academy.models.LabRun` row and puts it on the queue (academy/labqueue.py);
a ``python -m labs.worker`` process, here or on another machine, runs it and
writes progress and the outcome back to the row. The page polls the row, so
any app replica can show any run. Cancel sets a flag the worker acts on
within a second (a queued run is dropped at once).

So that one visitor cannot fill the queue and make everyone else wait, a
learner (or a guest's browser session) may have ``Settings.lab_max_per_learner``
labs queued or running, and all visitors together ``Settings.lab_max_queued``;
both are counted in the database when a run is submitted.
"""

from __future__ import annotations

import threading
from typing import Any

import torch
from sqlmodel import select

from academy import labqueue
from academy.db import session_scope
from academy.models import LabRun
from academy.settings import get_settings
from labs.launch import resolve_backend
from labs.ring import DTYPES

LABS = ("ring", "bench", "ddp")
ACTIVE = ("queued", "running")
# Parameters a learner may set, per lab, mapped to the CLI's flags.
FLAGS = {
    "world_size": "--world-size", "backend": "--backend", "size": "--size", "dtype": "--dtype",
    "op": "--op", "fail_rank": "--fail-rank", "fail_at_step": "--fail-at-step",
    "fail_mode": "--fail-mode", "min_bytes": "--min-bytes", "max_bytes": "--max-bytes",
    "steps": "--steps", "algo": "--algo",
}
ALLOWED = {
    "ring": {"world_size", "backend", "size", "dtype", "op", "algo", "fail_rank", "fail_at_step", "fail_mode"},
    "bench": {"world_size", "backend", "min_bytes", "max_bytes", "fail_rank", "fail_at_step", "fail_mode"},
    "ddp": {"world_size", "backend", "steps", "fail_rank", "fail_at_step", "fail_mode"},
}


class LabRequestError(ValueError):
    """The request cannot be run as asked (the page shows ``code`` translated)."""

    def __init__(self, code: str, **values: Any):
        super().__init__(code)
        self.code, self.values = code, values


def validate(lab: str, params: dict[str, Any]) -> dict[str, Any]:
    """Keep only known parameters, with types and bounds checked."""
    if lab not in LABS:
        raise LabRequestError("labs.err_unknown_lab", lab=lab)
    clean: dict[str, Any] = {}
    for key, value in params.items():
        if value is None or key not in ALLOWED[lab]:
            continue
        clean[key] = value
    ws = int(clean.get("world_size", 2))
    if not 1 <= ws <= get_settings().lab_max_world_size:
        raise LabRequestError("labs.err_world_size", max=get_settings().lab_max_world_size)
    clean["world_size"] = ws
    if "fail_rank" in clean and not 0 <= int(clean["fail_rank"]) < ws:
        raise LabRequestError("labs.err_fail_rank", max=ws - 1)
    for key in ("size", "min_bytes", "max_bytes"):
        if key in clean and not 8 <= int(clean[key]) <= 256 * 2**20:
            raise LabRequestError("labs.err_size")
    # Requests the lab itself would refuse are refused here, in the learner's
    # language, instead of after starting processes.
    if clean.get("op") == "avg" and not DTYPES[clean.get("dtype", "float32")].is_floating_point:
        raise LabRequestError("labs_refused.avg_int")
    if clean.get("backend") == "nccl":
        try:
            resolve_backend("nccl", ws)
        except ValueError:
            gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
            raise LabRequestError("labs_refused.nccl", gpus=gpus) from None
    return clean


def submit(*, lab: str, params: dict[str, Any], learner_id: int | None, machine: dict[str, Any],
           session_runs: list[int] | tuple[int, ...] = ()) -> int:
    """Queue a lab run; returns its LabRun id.

    Refused with a :class:`LabRequestError` when the parameters are not
    allowed, or by fair use (:func:`academy.labqueue.submit`): the learner's
    own limit, or the queue's.
    """
    clean = validate(lab, params)
    try:
        return labqueue.submit(lab=lab, params=clean, learner_id=learner_id, machine=machine,
                               session_runs=session_runs)
    except labqueue.QueueFull as err:
        raise LabRequestError(err.code, **err.values) from None
    except Exception as exc:  # noqa: BLE001  (the queue's storage is down: say so, do not crash)
        raise LabRequestError("labs_refused.queue_unavailable") from exc


def progress(run_id: int) -> dict[str, Any] | None:
    """The newest progress event of a running lab, as its worker last wrote it."""
    run = get_run(run_id)
    return run.progress if run is not None else None


def queue_position(run_id: int) -> int | None:
    """1 for the next to start in its queue; None when not waiting."""
    return labqueue.queue_position(run_id)


def queue_info(run_id: int) -> tuple[int | None, int, float | None]:
    """(position, slots of the live workers, expected wait in seconds or None) of a waiting run."""
    return labqueue.queue_info(run_id)


def cancel(run_id: int) -> bool:
    """Stop a run: a queued one is dropped at once, a running one is killed by its worker."""
    return labqueue.request_cancel(run_id)


def get_run(run_id: int) -> LabRun | None:
    """The run's row; a running one whose worker has died is failed on the way (reaper)."""
    with session_scope() as session:
        run = session.get(LabRun, run_id)
    return labqueue.reap_if_stale(run) if run is not None else None


def recover_after_restart() -> int:
    """Runs whose worker died are failed with the reason; queued runs wait on (the queue is durable)."""
    return labqueue.reap()


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
    """The learner's newest queued or running lab, if any (from any server process)."""
    with session_scope() as session:
        run = session.exec(select(LabRun).where(LabRun.learner_id == learner_id,
                                                LabRun.status.in_(("queued", "running")))
                           .order_by(LabRun.id.desc())).first()
    return run.id if run is not None else None
