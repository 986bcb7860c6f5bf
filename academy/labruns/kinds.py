"""The two kinds of job the lab queue carries, and what each is to the worker.

A run (a :class:`~academy.models.LabRun` row) is either a lab (``python -m labs
LAB ...``, ``LabRun.lab`` the lab's name) or the grading of a learner's code
(``python -m labs.exercises grade ...``, ``LabRun.lab`` "exercise", see
:mod:`academy.exercises`). The queue and the worker's job
(:mod:`academy.labruns.job`) treat every run alike: claim, heartbeat, cancel,
nodes, reaping. Where the kinds differ they ask the run's :class:`Kind`
(:func:`kind_of`), one entry of :data:`KINDS`:

- ``command``: the process that does the run, and what its environment adds
  (a ValueError: the run cannot be run as stored, and fails as invalid);
- ``fit``: its ``result.json`` as the report to keep, within
  ``Settings.lab_result_max_bytes`` (review N-6: a grading report of 2.7 MB
  was stored whole). Too large is a small report that says so: a lab's run
  fails, a grading's report is an error (never a pass);
- ``outcome``: what the report means once the process ended by itself: the
  run done or failed, and for a passing grading the pass to record with it;
- ``slim`` and ``series``: what an older run keeps of its report once newer
  ones of its series follow (:func:`prune_results`): a lab's what its page
  shows, a grading's its verdict and each case's id and status.

The plain lab's functions are here; the grading's are ``academy.exercises``'
own (its report is ``labs.exercises.report.GradeReport``). A Kind is two
entries of one table, not a plugin point.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import update
from sqlmodel import select

from academy import exercises
from academy.labruns.queue import nodes_of
from academy.models import TERMINAL, LabRun
from academy.settings import get_settings
from labs.processes import RANK_PRELUDE
from labs.reports import TOO_LARGE
from labs.request import Request

log = logging.getLogger("academy.worker")


@dataclass(frozen=True)
class Ended:
    """How a run's process ended by itself on this worker: its exit code, what the kind's
    ``fit`` made of its ``result.json`` (None: it wrote none), the tail of its output,
    and where it ran (``{"worker"}``, with ``"node"`` for a node of a multi-node run)."""

    code: int | None
    report: Any
    output: str
    where: dict[str, Any]


@dataclass(frozen=True)
class Kind:
    """What one kind of job is to the worker (the module docstring says each part)."""

    name: str
    command: Callable[[LabRun, Path], tuple[list[str], dict[str, str]]]
    fit: Callable[[LabRun, dict[str, Any] | None, int], Any]
    outcome: Callable[[LabRun, Ended], dict[str, Any] | None]  # None: nothing to go by, the run crashed
    slim: Callable[[dict[str, Any]], dict[str, Any]]
    series: Callable[[LabRun], list[Any]]  # SQL conditions beside the run's lab and owner


# --------------------------------------------------------------------------
# A lab: python -m labs LAB ... (or torchrun for a run over several nodes)


def command(request: Request, workdir: Path) -> list[str]:
    """``python -m labs`` for ``request`` (its `Request.argv`), writing its events and result
    in ``workdir``. The command reads its limits from the environment the worker gives
    it (``academy.labruns.pool.lab_env``), so its default timeouts are the worker's."""
    return [sys.executable, "-m", "labs", *request.argv(), "--json",
            "--events", str(workdir / "events.jsonl"), "--out", str(workdir / "result.json")]


def load_labs() -> None:
    """Import every lab's module (their parameter models, which a run's `Request` is made of)."""
    from labs import context

    for lab in context.LABS:
        context.load_lab(lab)


JOIN_GRACE_S = 15  # torchrun's rendezvous timeout, beyond the worker's own wait for nodes

# Each rank of a multi-node run is ``python -m labs`` run by labs.processes.RANK_PRELUDE,
# which dies with its torchrun (a worker killed with ``kill -9`` takes its torchrun along).


def torchrun_command(request: Request, workdir: Path, *, run_id: int) -> list[str]:
    """One node of a multi-node run (``request.nodes > 1``), as its worker starts it.

    Every node runs this same line (only the workdir differs); torchrun's
    c10d rendezvous at ``Settings.lab_rendezvous_endpoint`` gathers them
    under the run's id. torchrun gives up a little after ``lab_node_wait_s``,
    so that the worker's own check (a node never taken: ``nodes_missing``)
    comes first and names the cause; torchrun's timeout is for nodes that
    were all taken yet cannot meet (an unreachable endpoint). The request's
    ``world_size`` is ranks per node, torchrun's to give, as is how they start. The ranks are
    ``python -m labs LAB ...`` behind ``labs.processes.RANK_PRELUDE``; the one that gets
    global rank 0 writes the events and result.json in its node's workdir.
    """
    settings = get_settings()
    endpoint = settings.lab_rendezvous_endpoint
    if not endpoint:
        raise ValueError("a multi-node lab needs LAB_RENDEZVOUS_ENDPOINT (host:port)")
    # Without what torchrun does itself: the ranks per node and how they start (its own
    # parser would also take ``--start`` for a prefix of its ``--start-method``).
    lab_args = [*request.argv(without=("world_size", "start")), "--json",
                "--events", str(workdir / "events.jsonl"), "--out", str(workdir / "result.json")]
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(request.nodes),
            "--nproc-per-node", str(request.run.world_size), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", endpoint, "--rdzv-id", f"dpa-run-{run_id}",
            "--rdzv-conf", f"join_timeout={settings.lab_node_wait_s + JOIN_GRACE_S}",
            "--no-python", sys.executable, "-c", RANK_PRELUDE, *lab_args]


def _lab_command(run: LabRun, workdir: Path) -> tuple[list[str], dict[str, str]]:
    """The stored request made again (checked once here, against this worker's limits: a
    ValueError if they refuse it), as ``python -m labs`` or, over nodes, torchrun's line."""
    request = Request.checked(run.lab, run.params or {}, get_settings().labs)
    if request.nodes == 1:
        return command(request, workdir), {}
    return torchrun_command(request, workdir, run_id=run.id), {}


# What an old lab run keeps of its result: everything the page shows, not each rank's own return.
LAB_KEPT = ("ok", "lab", "world_size", "backend", "params", "summary", "wall_s", "work_s", "overhead_s")


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), default=str).encode())


def _lab_fit(run: LabRun, result: dict[str, Any] | None, limit: int) -> dict[str, Any] | None:
    """``result`` if it fits in ``limit`` bytes; else without each rank's own return value (the
    page shows the summary); what still does not fit becomes an error of kind ``report_too_large``."""
    if result is None or (size := _size(result)) <= limit:
        return result
    if "ranks" in result:
        slim = {k: v for k, v in result.items() if k != "ranks"}
        if _size(slim) <= limit:
            return slim
    log.warning("run %s: report of %s bytes is over the limit of %s; stored as too large", run.id, size, limit)
    return {"ok": False, "error": {"kind": TOO_LARGE, "size": size, "limit": limit,
                                   "message": f"the lab's report has {size} bytes, more than {limit}"}}


def _last_line(output: str) -> str:
    """The last line that says something (torchrun ends its report with a rule of '=')."""
    lines = [line for line in output.strip().splitlines() if line.strip(" =-")]
    return lines[-1] if lines else ""


def crashed(ended: Ended) -> dict[str, Any]:
    """A run that ended with no report to go by: a crash, in its output's last words."""
    return {"kind": "crash", "message": _last_line(ended.output), "exit_code": ended.code}


def _lab_outcome(run: LabRun, ended: Ended) -> dict[str, Any]:
    """A lab's run: done when it exited 0 with a report that has no error. An ordinary run keeps
    the report of a failed lab too; a node of a multi-node run names itself in its error, and
    only the node of global rank 0 has the result."""
    result, code = ended.report, ended.code
    error = (result or {}).get("error")
    if nodes_of(run.params) == 1:
        if result is not None and code == 0 and not error:
            return {"status": "done", "result": result}
        return {"status": "failed", "error": error or crashed(ended), "result": result}
    if code == 0 and (error or {}).get("kind") == TOO_LARGE:
        return {"status": "failed", "error": {**error, **ended.where}}
    if code == 0:
        return {"status": "done", "result": result if result is not None and not error else None}
    return {"status": "failed", "error": {**(error or crashed(ended)), **ended.where}}


def _lab_slim(result: dict[str, Any]) -> dict[str, Any]:
    return {**{k: result[k] for k in LAB_KEPT if k in result}, "pruned": True}


LAB = Kind("lab", command=_lab_command, fit=_lab_fit, outcome=_lab_outcome, slim=_lab_slim,
           series=lambda _run: [])

# --------------------------------------------------------------------------
# A grading: python -m labs.exercises grade EXERCISE submission.py ...

GRADING = Kind("grading", command=exercises.command, fit=exercises.fit,
               outcome=lambda run, ended: exercises.outcome(run, ended.report, ended.code),
               slim=exercises.slim, series=exercises.series)

KINDS = {"lab": LAB, "grading": GRADING}


def kind_of(lab: str) -> Kind:
    """The kind of a run whose ``LabRun.lab`` is ``lab``: a grading for a submission's, a lab else."""
    return KINDS["grading" if lab == exercises.LAB else "lab"]


# --------------------------------------------------------------------------
# What is kept of a report (review N-6): a cap on each, the full one for the newest runs only

PRUNE_BATCH = 50  # old reports slimmed per finished run: a long backlog is worked off bit by bit


def prune_results(*, session, run_id: int) -> int:
    """Slim the reports of the asker's older runs of the same series (a lab: the same lab; a
    grading: the same exercise) beyond the newest ``Settings.lab_keep_full_results``; how many.

    The asker is the learner, or for a guest its client. Called when a run
    ends, in its transaction; at most :data:`PRUNE_BATCH` rows at a time.
    """
    run = session.get(LabRun, run_id)
    if run is None:
        return 0
    kind = kind_of(run.lab)
    group = [LabRun.lab == run.lab, *kind.series(run)]
    if run.learner_id is not None:
        group.append(LabRun.learner_id == run.learner_id)
    else:
        group += [LabRun.learner_id.is_(None), LabRun.client == run.client]
    newest = select(LabRun.id).where(*group).order_by(LabRun.id.desc()) \
        .limit(get_settings().lab_keep_full_results).scalar_subquery()
    # The row ids first, then the full reports one at a time (they may be megabytes each).
    old = session.exec(
        select(LabRun.id).where(*group, LabRun.status.in_(TERMINAL), LabRun.id.not_in(newest),
                                LabRun.result.is_not(None), LabRun.result["pruned"].as_boolean().is_(None))
        .order_by(LabRun.id.desc()).limit(PRUNE_BATCH)
    ).all()
    count = 0
    for old_id in old:
        result = session.exec(select(LabRun.result).where(LabRun.id == old_id)).one()
        if isinstance(result, dict):
            session.exec(update(LabRun).where(LabRun.id == old_id).values(result=kind.slim(result)))
            count += 1
    return count
