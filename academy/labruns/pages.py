"""Lab runs for the pages: check a request and queue it, read the runs back, and what they measured.

The web process never starts a lab. :func:`submit` checks the request against
the lab's schema (``labs.params``) and Settings' limits, then hands it to the
job queue (:func:`academy.labruns.queue.submit`), which writes a
:class:`~academy.models.LabRun` row; a ``python -m academy.worker`` process,
here or on another machine, runs it (``academy.labruns.job``) and writes progress
and the outcome back to the row. The page polls the row, so any app replica
can show any run. Cancel (``academy.labruns.queue.request_cancel``) sets a flag
the worker acts on within a second (a queued run is dropped at once).

So that one visitor cannot fill the queue and make everyone else wait, a
learner (or a guest's client: its address, see :func:`academy.labruns.queue.submit`)
may have ``Settings.lab_max_per_learner`` labs queued or running, all guests
together ``Settings.lab_max_guests`` and all visitors ``Settings.lab_max_queued``;
each is counted in the database when a run is submitted.

Reading a lab's parameters (``labs.context.load_lab``) imports no PyTorch;
only a request for NCCL that no GPU worker can serve loads it, to count this
machine's GPUs. The labs are imported where a lab is named, not when a page
imports this module.
"""

from __future__ import annotations

import math
import statistics
import threading
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlmodel import Session, func, select

from academy.db import session_scope
from academy.labruns import queue as labqueue
from academy.models import ACTIVE, LabRun
from academy.settings import get_settings
from labs import params as lab_params
from labs.params import ParamError, Run, Spec, offered
from labs.request import NODES, Request

# The page's kind of error; the queue's fair-use refusals (QueueFull) are of it too.
LabRequestError = labqueue.LabRequestError


def lab_names() -> tuple[str, ...]:
    """The labs a learner may run, in the course's order (``labs.context.LABS``)."""
    from labs import context

    return tuple(context.LABS)


# --------------------------------------------------------------------------
# A request from the Labs page


def offers(lab: str) -> dict[str, tuple[type, Spec]]:
    """What a learner may set for ``lab``: the parameters the page offers
    (`labs.params.Run`'s and the lab's own), with the model each belongs to."""
    from labs import context

    return {name: (cls, spec) for cls in (Run, context.load_lab(lab).Params)
            for name, (_f, spec) in offered(cls).items()}


def validate(lab: str, params: dict[str, Any], *, nodes: int = 1) -> Request:
    """The page's request for ``lab``: only the parameters the page offers, made into a
    ``labs.request.Request`` (`Run`'s model and the lab's) and checked once, against
    Settings' limits in the page's ranges and by the lab's own rule, on ``nodes``
    workers (more than one only as ``Settings.lab_max_nodes`` allows, with a
    rendezvous endpoint). Refused with a :class:`LabRequestError` in the learner's words."""
    from labs import context

    if lab not in lab_names():
        raise LabRequestError("labs.err_unknown_lab", lab=lab)
    offer = offers(lab)
    clean = {key: value for key, value in params.items() if value is not None and key in offer}
    settings = get_settings()
    limits = settings.labs
    clean.setdefault("world_size", min(context.world_size_default(lab), limits.max_world_size))
    allowed = settings.lab_max_nodes if settings.lab_rendezvous_endpoint else 1
    try:
        # Requests the lab itself would refuse are refused here, in the
        # learner's language, instead of after starting processes.
        request = Request.checked(lab, {**clean, NODES: nodes}, limits, page=True, max_nodes=allowed)
    except ParamError as err:
        raise _refusal(err, offer) from None
    except (TypeError, ValueError):  # a value of the wrong type, or a lab's own rule across fields
        raise LabRequestError("labs.err_value") from None
    # NCCL needs a GPU per rank: a live GPU worker's device set, or else this machine's GPUs.
    # Only this question loads PyTorch here (to count the GPUs); "auto" and gloo need no GPU.
    world_size = request.run.world_size
    if request.run.backend == "nccl" and labqueue.largest_gpu_set() < world_size:
        try:
            context.resolve_backend("nccl", world_size)
        except ValueError:
            import torch

            gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
            raise LabRequestError("labs_refused.nccl", gpus=gpus) from None
    return request


def _refusal(err: ParamError, offer: dict[str, tuple[type, Spec]]) -> LabRequestError:
    """The learner's words for a value the schema refused."""
    high = err.values.get("high")
    if err.rule == "avg_int":
        return LabRequestError("labs_refused.avg_int")
    if err.rule == "world_between":  # a lab that runs on fewer ranks than the limits allow
        return LabRequestError("labs.err_world_between", low=err.values["low"], high=high)
    if err.rule == "empty":  # a list the learner emptied (a multiselect)
        return LabRequestError("labs_refused.empty")
    if err.rule == "nodes":  # the topology lab: ranks split evenly over its nodes
        return LabRequestError("labs_refused.topology_nodes")
    if err.name == NODES:
        return LabRequestError("labs_refused.nodes", max=max(1, high or 1))
    if err.name == "world_size" and high is not None:
        return LabRequestError("labs.err_world_size", max=high)
    if err.name == "fail_rank" and high is not None:
        return LabRequestError("labs.err_fail_rank", max=high)
    if err.rule == "rank":  # a lab's rank field beyond the run's ranks (the straggler's, the failure lab's)
        return LabRequestError("labs.err_rank", max=high, count=high + 1)
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
    :class:`LabRequestError` when the parameters are not allowed (:func:`validate`),
    by fair use (:func:`academy.labruns.queue.submit`: the learner's or guest
    client's own limit, the guests' share, or the queue's), or when the queue
    cannot be reached. The row keeps the request (``Request.stored``).
    """
    request = validate(lab, params, nodes=nodes)
    return labqueue.submit(lab=lab, params=request.stored(), learner_id=learner_id, machine=machine,
                           session_runs=session_runs, client=client, nodes=request.nodes)


# --------------------------------------------------------------------------
# Runs as the pages read them


def get_run(run_id: int) -> LabRun | None:
    """The run's row; a running one whose worker has died is failed on the way (reaper)."""
    with session_scope() as session:
        run = session.get(LabRun, run_id)
    return labqueue.reap_if_stale(run) if run is not None else None


_recovered = threading.Event()


def recover_after_restart_once() -> None:
    """Called by the page: the first call in a server process fails the runs whose worker
    died (queued runs wait on: the queue is durable)."""
    if not _recovered.is_set():
        _recovered.set()
        labqueue.reap()


def history(*, learner_id: int, limit: int = 20) -> list[LabRun]:
    """The learner's lab runs, newest first (exercise submissions have their own page)."""
    with session_scope() as session:
        stmt = select(LabRun).where(LabRun.learner_id == learner_id, LabRun.lab.in_(lab_names())) \
            .order_by(LabRun.id.desc()).limit(limit)
        return list(session.exec(stmt))


# A guest's runs are listed from a cookie (they have no account to keep them by): the ids of
# their newest GUEST_RUNS_KEPT runs, signed so that a browser cannot list others' runs by
# writing ids in, and kept for GUEST_RUNS_DAYS days (journey review m14: "Runs in this
# visit" emptied on every reload).
GUEST_RUNS_KEPT = 20
GUEST_RUNS_DAYS = 7


def _guest_serializer() -> URLSafeTimedSerializer:
    from academy.keystore import session_secret

    return URLSafeTimedSerializer(session_secret(), salt="dpa-guest-lab-runs")


def guest_token(run_ids: list[int]) -> str:
    """The guest's newest run ids (at most `GUEST_RUNS_KEPT`), signed for their cookie."""
    return _guest_serializer().dumps([int(i) for i in run_ids][-GUEST_RUNS_KEPT:])


def guest_run_ids(token: str | None) -> list[int]:
    """The run ids a guest's cookie holds, oldest first; none if it is absent, forged or older
    than `GUEST_RUNS_DAYS` days."""
    try:
        found = _guest_serializer().loads(token or "", max_age=GUEST_RUNS_DAYS * 86400)
    except BadSignature:
        return []
    return [i for i in found if isinstance(i, int) and not isinstance(i, bool)] if isinstance(found, list) else []


def runs(run_ids: list[int]) -> list[LabRun]:
    """A guest's runs (this visit's and those their cookie brought back), newest first; only
    guests' runs, never a learner's."""
    if not run_ids:
        return []
    with session_scope() as session:
        return list(session.exec(select(LabRun).where(LabRun.id.in_(run_ids), LabRun.lab.in_(lab_names()),
                                                      LabRun.learner_id.is_(None))
                                 .order_by(LabRun.id.desc())))


def active_run_id(*, learner_id: int, labs: tuple[str, ...] | None = None) -> int | None:
    """The learner's newest queued or running run of ``labs``, if any (from any server process).

    The labs page asks for its labs only (the default); the exercises page for ``("exercise",)``.
    """
    with session_scope() as session:
        run = session.exec(select(LabRun).where(LabRun.learner_id == learner_id,
                                                LabRun.lab.in_(labs or lab_names()),
                                                LabRun.status.in_(ACTIVE))
                           .order_by(LabRun.id.desc())).first()
    return run.id if run is not None else None


def lab_run_count(*, session: Session, learner_id: int) -> int:
    """How many lab runs the learner started; exercise submissions, which share the queue, not counted."""
    return session.exec(
        select(func.count()).where(LabRun.learner_id == learner_id, LabRun.lab.in_(lab_names()))
    ).one()


# --------------------------------------------------------------------------
# What the runs measured


def scaling_points(*, session: Session, learner_id: int) -> list[tuple[int, float]]:
    """(world size, scaling efficiency) pairs from the learner's finished DDP runs."""
    found = session.exec(
        select(LabRun).where(LabRun.learner_id == learner_id, LabRun.lab == "ddp", LabRun.status == "done")
    )
    points: dict[int, float] = {}
    for run in found:
        scaling = (((run.result or {}).get("summary") or {}).get("sections") or {}).get("scaling", {})
        for entry in scaling.get("rows", []) if isinstance(scaling, dict) else []:
            if "world_size" in entry and "efficiency" in entry:
                points[int(entry["world_size"])] = float(entry["efficiency"])
    return sorted(points.items())


def machine_fit(*, session: Session, worker: str | None, impl: str, world_size: int,
                backend: str, recent: int = 20) -> dict | None:
    """The alpha-beta fit of ``impl`` from the newest benchmark run on the same
    machine as ``worker``, at ``world_size`` ranks and on ``backend``; None if none.

    Why here: a benchmark run already stores its fits (``result.summary.fit``),
    and alpha and B describe the machine, not the learner, so any learner's
    benchmark on the same host counts; a worker is named ``host:pid``
    (``academy.labruns.job.worker_name``), so a restarted worker keeps its host's
    fits. Only the ``recent`` newest benchmark runs are looked at.
    """
    if not worker:
        return None
    host = worker.rsplit(":", 1)[0]
    rows = session.exec(
        select(LabRun).where(LabRun.lab == "bench", LabRun.status == "done",
                             LabRun.worker.startswith(f"{host}:"))
        .order_by(LabRun.id.desc()).limit(recent))
    for run in rows:
        summary = (run.result or {}).get("summary") or {}
        fit = (summary.get("fit") or {}).get(impl)
        if (summary.get("world_size") == world_size and summary.get("backend") == backend
                and fit and _usable(fit.get("alpha_s")) and _usable(fit.get("bandwidth_Bps"))):
            return {**fit, "run_id": run.id, "world_size": world_size}
    return None


def run_machine_fit(run: LabRun, impl: str) -> dict | None:
    """:func:`machine_fit` for the machine that ran ``run``, at its world size and backend."""
    summary = (run.result or {}).get("summary") or {}
    with session_scope() as session:
        return machine_fit(session=session, worker=run.worker, impl=impl,
                           world_size=summary.get("world_size", 0), backend=summary.get("backend", ""))


ESTIMATE_FROM = 20  # the newest finished runs of a lab an estimate learns from
ESTIMATE_SHOWN_S = 10.0  # the page announces runs expected to take this long or longer


def estimate_s(lab: str, params: dict[str, Any]) -> float | None:
    """How long a run of ``lab`` with ``params`` should take once started, judging by the
    newest finished runs of that lab (any machine's: one queue, one kind of machine): their
    work per unit of the lab's ``cost`` (``labs.ring.cost``: bytes a rank sends over the run),
    times this run's, plus their median start and stop. None for a lab without a cost or
    without a finished run to judge by (journey review m2: 65 s of "Starting the processes"
    that nothing announced)."""
    from labs import context

    module = context.load_lab(lab)
    if not hasattr(module, "cost"):
        return None
    mine = _cost(module, params)
    if not mine:
        return None
    with session_scope() as session:
        found = session.exec(select(LabRun).where(LabRun.lab == lab, LabRun.status == "done")
                             .order_by(LabRun.id.desc()).limit(ESTIMATE_FROM)).all()
    rates, overheads = [], []
    for run in found:
        result = run.result or {}
        units = _cost(module, run.params or {})
        wall, overhead = result.get("wall_s"), result.get("overhead_s")
        if units and isinstance(wall, int | float) and isinstance(overhead, int | float):
            rates.append(max(wall - overhead, 0.0) / units)
            overheads.append(overhead)
    if not rates:
        return None
    return statistics.median(overheads) + statistics.median(rates) * mine


def _cost(module, params: dict[str, Any]) -> float | None:
    """The lab's cost of ``params`` (a run's stored parameters), or None if they do not build."""
    values = {k: v for k, v in params.items() if k in lab_params.specs(module.Params)}
    try:
        return module.cost(module.Params(**values), int(params.get("world_size", 1)))
    except (TypeError, ValueError):
        return None


def step_model_fit(run: LabRun) -> dict | None:
    """The alpha-beta fit for a DDP run's step model ("predict, then measure"), with its ``source``.

    The run's own (``source`` "run"): its timeline section timed ``dist.all_reduce``
    alone at its world size and backend, on the machine as loaded then
    (``labs.ddp.timeline.calibrate``); else, for runs made before it did, the
    machine's newest benchmark at that world size (`run_machine_fit`, ``source``
    "bench", with its ``run_id``); None when neither exists.
    """
    summary = (run.result or {}).get("summary") or {}
    own = ((summary.get("sections") or {}).get("timeline") or {}).get("fit")
    if isinstance(own, dict) and _usable(own.get("alpha_s")) and _usable(own.get("bandwidth_Bps")):
        return {**own, "source": "run", "world_size": summary.get("world_size", 0)}
    fit = run_machine_fit(run, "all_reduce")
    return None if fit is None else {**fit, "source": "bench"}


def _usable(value) -> bool:
    """A fitted alpha or B that a model line can use: a positive, finite number
    (a least-squares fit over noisy rows can give alpha < 0 or B = inf)."""
    return isinstance(value, int | float) and math.isfinite(value) and value > 0
