"""Stored lab runs: what the learner ran and measured, and what a machine measured."""

from __future__ import annotations

import math

from sqlmodel import Session, func, select

from academy.labqueue import EXERCISE
from academy.models import LabRun


def scaling_points(*, session: Session, learner_id: int) -> list[tuple[int, float]]:
    """(world size, scaling efficiency) pairs from the learner's finished DDP runs."""
    rows = session.exec(
        select(LabRun).where(LabRun.learner_id == learner_id, LabRun.lab == "ddp", LabRun.status == "done")
    )
    points: dict[int, float] = {}
    for run in rows:
        rows = (((run.result or {}).get("summary") or {}).get("sections") or {}).get("scaling", {})
        for entry in rows.get("rows", []) if isinstance(rows, dict) else []:
            if "world_size" in entry and "efficiency" in entry:
                points[int(entry["world_size"])] = float(entry["efficiency"])
    return sorted(points.items())


def lab_run_count(*, session: Session, learner_id: int) -> int:
    """How many lab runs the learner started; exercise submissions, which share the queue, not counted."""
    return session.exec(
        select(func.count()).where(LabRun.learner_id == learner_id, LabRun.lab != EXERCISE)
    ).one()


def machine_fit(*, session: Session, worker: str | None, impl: str, world_size: int,
                backend: str, recent: int = 20) -> dict | None:
    """The alpha-beta fit of ``impl`` from the newest benchmark run on the same
    machine as ``worker``, at ``world_size`` ranks and on ``backend``; None if none.

    Why here: a benchmark run already stores its fits (``result.summary.fit``),
    and alpha and B describe the machine, not the learner, so any learner's
    benchmark on the same host counts; a worker is named ``host:pid``
    (``academy.labqueue.worker_name``), so a restarted worker keeps its host's
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


def _usable(value) -> bool:
    """A fitted alpha or B that a model line can use: a positive, finite number
    (a least-squares fit over noisy rows can give alpha < 0 or B = inf)."""
    return isinstance(value, int | float) and math.isfinite(value) and value > 0
