"""Stored lab runs: what the learner ran and measured."""

from __future__ import annotations

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
