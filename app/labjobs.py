"""Running labs for the web app: validate the request, then hand it to the job queue.

The web process never starts a lab. :func:`submit` writes a
:class:`~academy.models.LabRun` row and puts it on the queue (academy/labqueue.py);
a ``python -m academy.worker`` process, here or on another machine, runs it and
writes progress and the outcome back to the row. The page polls the row, so
any app replica can show any run. Cancel sets a flag the worker acts on
within a second (a queued run is dropped at once).

So that one visitor cannot fill the queue and make everyone else wait, a
learner (or a guest's client: its address, see :func:`academy.labqueue.submit`)
may have ``Settings.lab_max_per_learner`` labs queued or running, all guests
together ``Settings.lab_max_guests`` and all visitors ``Settings.lab_max_queued``;
each is counted in the database when a run is submitted.
"""

from __future__ import annotations

import threading
from typing import Any

import torch
from sqlmodel import select

from academy import labqueue, labruns
from academy.db import session_scope
from academy.models import LabRun
from academy.settings import get_settings
from labs import context
from labs import params as lab_params
from labs.launch import resolve_backend
from labs.params import ParamError, Run, Spec, offered

LABS = tuple(context.LABS)
ACTIVE = ("queued", "running")


# The page's kind of error; the queue's fair-use refusals (QueueFull) are of it too.
LabRequestError = labqueue.LabRequestError


def offers(lab: str) -> dict[str, tuple[type, Spec]]:
    """What a learner may set for ``lab``: the parameters the page offers
    (`labs.params.Run`'s and the lab's own), with the model each belongs to."""
    return {name: (cls, spec) for cls in (Run, context.load_lab(lab).Params)
            for name, (_f, spec) in offered(cls).items()}


def validate(lab: str, params: dict[str, Any]) -> dict[str, Any]:
    """Keep only the parameters the page offers, converted to their fields' types
    and checked against their model (``labs.params``) and Settings' limits, in
    the page's ranges."""
    if lab not in LABS:
        raise LabRequestError("labs.err_unknown_lab", lab=lab)
    offer = offers(lab)
    clean = {key: value for key, value in params.items() if value is not None and key in offer}
    limits = get_settings().labs
    clean.setdefault("world_size", min(context.world_size_default(lab), limits.max_world_size))
    try:
        # Requests the lab itself would refuse are refused here, in the
        # learner's language, instead of after starting processes.
        for cls in (Run, context.load_lab(lab).Params):
            model = lab_params.validate(cls, {k: v for k, v in clean.items() if offer[k][0] is cls}, limits, page=True)
            clean.update({k: getattr(model, k) for k in clean if offer[k][0] is cls})
    except ParamError as err:
        raise _refusal(err, offer) from None
    except (TypeError, ValueError):  # a value of the wrong type, or a lab's own rule across fields
        raise LabRequestError("labs.err_value") from None
    # NCCL needs a GPU per rank: a live GPU worker's device set, or else this machine's GPUs.
    if clean.get("backend") == "nccl" and labqueue.largest_gpu_set() < clean["world_size"]:
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


def submit(*, lab: str, params: dict[str, Any], learner_id: int | None, machine: dict[str, Any],
           session_runs: list[int] | tuple[int, ...] = (), client: str | None = None,
           nodes: int = 1) -> int:
    """Queue a lab run; returns its LabRun id.

    ``client`` (``ui.client()``) and ``session_runs`` say who a guest is.
    ``nodes``: workers the run spans, ``world_size`` ranks on each (the Labs
    form does not offer it; callers of this function may). Refused with a
    :class:`LabRequestError` when the parameters are not allowed, when more
    nodes are asked for than ``Settings.lab_max_nodes`` allows (or no
    rendezvous endpoint is set), by fair use (:func:`academy.labqueue.submit`:
    the learner's or guest client's own limit, the guests' share, or the
    queue's), or when the queue cannot be reached.
    """
    clean = validate(lab, params)
    return labqueue.submit(lab=lab, params=clean, learner_id=learner_id, machine=machine,
                           session_runs=session_runs, client=client, nodes=nodes)


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
    """The learner's lab runs, newest first (exercise submissions have their own page)."""
    with session_scope() as session:
        stmt = select(LabRun).where(LabRun.learner_id == learner_id, LabRun.lab.in_(LABS)) \
            .order_by(LabRun.id.desc()).limit(limit)
        return list(session.exec(stmt))


def runs(run_ids: list[int]) -> list[LabRun]:
    """A guest's runs of this visit, newest first."""
    if not run_ids:
        return []
    with session_scope() as session:
        return list(session.exec(select(LabRun).where(LabRun.id.in_(run_ids), LabRun.lab.in_(LABS))
                                 .order_by(LabRun.id.desc())))


def latest_result(learner_id: int | None, lab: str) -> dict[str, Any] | None:
    if learner_id is None:
        return None
    with session_scope() as session:
        run = session.exec(select(LabRun).where(LabRun.learner_id == learner_id, LabRun.lab == lab,
                                                LabRun.status == "done").order_by(LabRun.id.desc())).first()
        return run.result if run else None


def machine_fit(run: LabRun, impl: str) -> dict | None:
    """The alpha-beta fit of ``impl`` from the newest benchmark on the machine
    that ran ``run``, at its world size and backend (``academy.labruns.machine_fit``)."""
    summary = (run.result or {}).get("summary") or {}
    with session_scope() as session:
        return labruns.machine_fit(session=session, worker=run.worker, impl=impl,
                                   world_size=summary.get("world_size", 0),
                                   backend=summary.get("backend", ""))


_recovered = threading.Event()


def recover_after_restart_once() -> None:
    """Called by the page: the first call in a server process tidies stale runs."""
    if not _recovered.is_set():
        _recovered.set()
        recover_after_restart()


def active_run_id(*, learner_id: int, labs: tuple[str, ...] = LABS) -> int | None:
    """The learner's newest queued or running run of ``labs``, if any (from any server process).

    The labs page asks for its labs only; the exercises page for ``("exercise",)``.
    """
    with session_scope() as session:
        run = session.exec(select(LabRun).where(LabRun.learner_id == learner_id, LabRun.lab.in_(labs),
                                                LabRun.status.in_(("queued", "running")))
                           .order_by(LabRun.id.desc())).first()
    return run.id if run is not None else None
