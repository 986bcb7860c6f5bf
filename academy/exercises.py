"""Coding exercises for the web app: drafts, submissions, passes, and what the certificate needs.

The exercises themselves (statements, hidden cases, the grader, the sandbox)
live in ``labs.exercises``; this module keeps what belongs to a learner:

- a draft per exercise (the code as last saved, and how many hints they
  opened), so that a refresh or another device brings the same code back;
- a submission, which is a lab run (lab ``exercise``) on the same queue, with
  the same fair-use limits, as the labs: a job of the kind *grading*
  (``academy.labruns.kinds``), whose parts are here: the command a worker runs
  on it (:func:`command`), the report it stores as the run's result
  (:func:`fit`: a ``labs.exercises.report.GradeReport``, capped), what a
  grading run's end means (:func:`outcome`), and what an older run keeps once
  newer ones of the same exercise follow (:func:`slim`, :func:`series`);
- a pass per exercise (:func:`record_pass`), written by the worker in the
  same transaction as a passing report, one row at most (the database
  refuses a second); one that a newer grader no longer grants is withdrawn
  by ``academy.regrade`` (:func:`withdrawn`) and counts for nothing until the
  learner passes again.

Plain keyword-only functions over a ``Session``, as ``quizzes.store``; the
page (``app/views/exercises.py``) only lays them out.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session, col, select

from academy import i18n
from academy.content import DEFAULT_LANG
from academy.db import session_scope
from academy.errors import UserError
from academy.labruns import queue as labqueue
from academy.models import (
    EXERCISE_SOURCE_MAX,
    ExerciseDraft,
    ExercisePass,
    ExerciseRegrade,
    LabRun,
    utcnow,
)
from academy.settings import get_settings
from labs import exercises as defs
from labs.exercises import messages
from labs.exercises.encoding import foreign_encoding
from labs.exercises.report import CaseReport, GradeReport

LAB = "exercise"  # LabRun.lab of a submission: a job of the kind grading (academy.labruns.kinds)
log = logging.getLogger("academy.worker")


class SourceRefused(labqueue.LabRequestError):
    """The code cannot be queued as it is (too large, not text); ``key`` names the page's text."""


class UnknownExercise(UserError, ValueError):
    key = "exercises.err_unknown"


# --------------------------------------------------------------------------
# The exercises (trusted definitions in labs.exercises; text in content/exercises)


def catalog() -> tuple[str, ...]:
    """Exercise ids in the order the course gives them: those whose definition is in place."""
    return tuple(defs.available())


def required() -> tuple[str, ...]:
    """The exercises a certificate needs when ``certificate_requires_exercises`` is on."""
    return tuple(defs.REQUIRED_FOR_CERTIFICATE)


def check_exercise(exercise: str) -> str:
    """The id if it is an exercise learners can open now; :class:`UnknownExercise` otherwise."""
    if exercise not in catalog():
        raise UnknownExercise(exercise=str(exercise)[:64])
    return exercise


def text(exercise: str, lang: str) -> dict[str, Any]:
    """Title, summary, statement and hints of an exercise in ``lang`` (English where missing).

    An exercise whose texts are not written yet is named by its id, so a page
    that lists the certificate's exercises never fails on one.
    """
    found = messages.exercise(exercise, lang) if exercise in defs.EXERCISES else {}
    return {"title": exercise, "summary": "", "statement": "", "hints": [], **found}


def starter(exercise: str) -> str:
    return defs.starter(check_exercise(exercise))


def reference(exercise: str) -> str:
    """The reference solution. Callers show it only to a learner who passed (:func:`has_passed`)."""
    return defs.reference(check_exercise(exercise))


def message(key: str, lang: str, values: dict[str, Any] | None = None, exercise: str | None = None) -> str:
    """A grader's finding or error in the learner's language (``labs.exercises.messages``):
    the exercise's own wording first, then the shared one."""
    return messages.text(key, lang, exercise, **(values or {}))


def case_label(exercise: str, case: CaseReport, lang: str) -> str:
    """A report's case in words, as its exercise's cases are sized (the exercise's
    ``CASE_SIZE``): a tensor's elements (the default), a data set's samples
    (shard-indices), or a global batch of samples and features (the training
    exercises); broadcast's cases also name the rank the tensor comes from."""
    values = {"id": case.id, "world": case.world_size, "count": case.size, "dtype": case.dtype}
    kind = getattr(defs.load(exercise), "CASE_SIZE", "tensor") if exercise in defs.EXERCISES else "tensor"
    if kind == "batch" and case.shape is not None and len(case.shape) == 2:
        samples, features = case.shape
        return i18n.t("exercises.case_batch", lang, id=case.id, world=case.world_size, count=samples,
                      features=features, per_rank=samples // max(1, case.world_size))
    if kind == "dataset":
        return i18n.t("exercises.case_dataset", lang, **values)
    if case.src is not None:  # broadcast's cases name the rank the tensor comes from (review m11)
        return i18n.t("exercises.case_src", lang, src=case.src, **values)
    return i18n.t("exercises.case", lang, **values)


def waiting(row: dict[str, Any], lang: str, exercise: str | None = None) -> str:
    """One rank of a deadlock report in the learner's language, with its direction
    ("waiting in send to rank 1", "waiting in recv from rank 0"; ``labs.exercises.messages``)."""
    return messages.waiting(row, lang, exercise)


# --------------------------------------------------------------------------
# Source checks


def check_source(source: str | bytes) -> str:
    """The source as text if it may be saved and graded; :class:`SourceRefused` otherwise.

    Checked before anything is stored or queued, so an oversized or binary
    upload costs neither a row nor a worker. A source that declares an encoding
    other than UTF-8 (a coding comment in its first two lines, a UTF-16 or UTF-32
    byte order mark) is refused too: Python would run other code than the page
    shows (review N-8; ``labs.exercises.encoding``).
    """
    if isinstance(source, bytes):
        if len(source) > EXERCISE_SOURCE_MAX:
            raise SourceRefused("exercises.err_too_large", size=len(source), limit=EXERCISE_SOURCE_MAX)
        _refuse_foreign_encoding(source)  # before decoding: a UTF-16 file is not UTF-8, but it says what it is
        try:
            source = source.decode("utf-8")
        except UnicodeDecodeError:
            raise SourceRefused("exercises.err_not_text") from None
    if not isinstance(source, str):
        raise SourceRefused("exercises.err_not_text")
    try:
        size = len(source.encode("utf-8"))
    except UnicodeEncodeError:  # lone surrogates: not UTF-8 text
        raise SourceRefused("exercises.err_not_text") from None
    if size > EXERCISE_SOURCE_MAX:
        raise SourceRefused("exercises.err_too_large", size=size, limit=EXERCISE_SOURCE_MAX)
    if "\x00" in source:  # a NUL is no Python source, and PostgreSQL text cannot hold it
        raise SourceRefused("exercises.err_not_text")
    _refuse_foreign_encoding(source)
    return source


def _refuse_foreign_encoding(source: str | bytes) -> None:
    declared = foreign_encoding(source)
    if declared is not None:
        raise SourceRefused("exercises.err_encoding", encoding=declared)


# --------------------------------------------------------------------------
# Drafts


def get_draft(*, session: Session, learner_id: int, exercise: str) -> ExerciseDraft | None:
    return session.exec(select(ExerciseDraft).where(
        ExerciseDraft.learner_id == learner_id, ExerciseDraft.exercise == exercise)).first()


def _upsert_draft(session: Session, learner_id: int, exercise: str, values: dict[str, Any],
                  update: tuple[str, ...] | None = None) -> None:
    """Insert the draft or update the given columns, in one statement: two tabs that
    save at once leave one row (the unique constraint) instead of an error.

    ``update``: the columns a row that exists already gets (default: all of ``values``);
    the others are only for a new row."""
    table = ExerciseDraft.__table__
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    row = {"learner_id": learner_id, "exercise": exercise, "source": "", "hints_shown": 0,
           "updated_at": utcnow(), **values}
    stmt = dialect.insert(table).values(**row)
    columns = tuple(values) if update is None else update
    stmt = stmt.on_conflict_do_update(index_elements=["learner_id", "exercise"],
                                      set_={k: stmt.excluded[k] for k in (*columns, "updated_at")})
    session.exec(stmt)


def save_draft(*, session: Session, learner_id: int, exercise: str, source: str) -> ExerciseDraft:
    """Keep the learner's code for this exercise (refused like a submission when too large); commits."""
    source = check_source(source)
    _upsert_draft(session, learner_id, check_exercise(exercise), {"source": source})
    session.commit()
    return get_draft(session=session, learner_id=learner_id, exercise=exercise)


def reset_draft(*, session: Session, learner_id: int, exercise: str) -> ExerciseDraft:
    """Back to the starter code (the hints opened stay opened)."""
    return save_draft(session=session, learner_id=learner_id, exercise=exercise, source=starter(exercise))


def show_hint(*, session: Session, learner_id: int, exercise: str) -> int:
    """Open the next hint; returns how many are open now (never more than there are)."""
    total = len(text(exercise, DEFAULT_LANG).get("hints") or [])
    draft = get_draft(session=session, learner_id=learner_id, exercise=exercise)
    shown = min((draft.hints_shown if draft else 0) + 1, total)
    if draft is None:
        # A new draft starts from the starter; one another tab saved since we read keeps its code.
        _upsert_draft(session, learner_id, exercise, {"source": starter(exercise), "hints_shown": shown},
                      update=("hints_shown",))
    else:
        _upsert_draft(session, learner_id, exercise, {"hints_shown": shown})
    session.commit()
    return shown


# --------------------------------------------------------------------------
# Passes


def record_pass(*, session: Session, learner_id: int, exercise: str, run_id: int) -> None:
    """Record that ``run_id`` passed ``exercise`` for the learner, unless a pass is there already;
    a withdrawn pass (``academy.regrade``) becomes this run's pass.

    Does not commit: the worker (``academy.labruns.job._end_node``) calls it in the
    transaction that stores the run's report, so a pass never exists without
    its passing report. One statement that the unique constraint settles (ON
    CONFLICT: nothing for a standing pass, the new run for a withdrawn one), so
    two passing runs finishing at once leave one row.
    """
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    table = ExercisePass.__table__
    stmt = dialect.insert(table).values(learner_id=learner_id, exercise=exercise, run_id=run_id, passed_at=utcnow())
    session.exec(stmt.on_conflict_do_update(
        index_elements=["learner_id", "exercise"],
        set_={"run_id": stmt.excluded.run_id, "passed_at": stmt.excluded.passed_at, "withdrawn_at": None,
              "regrade_id": None},
        where=table.c.withdrawn_at.is_not(None)))


# --------------------------------------------------------------------------
# A submission as a job: the grading kind of academy.labruns.kinds


def grading_env() -> dict[str, str]:
    """What a grading command (and a warm grader, ``academy.labruns.pool``) adds to the lab
    processes' environment: the sandbox's settings, ``EXERCISE_*``."""
    return get_settings().exercises.environ()


def command(run: LabRun, workdir: Path) -> tuple[list[str], dict[str, str]]:
    """The command that grades a submission, and what its environment adds: the learner's code
    goes to the grader as ``workdir/submission.py``, and the grader runs it only inside the
    sandbox the settings name (``labs/sandbox/run.py``), within their limits."""
    (workdir / "submission.py").write_text(run.source or "", encoding="utf-8")
    return [sys.executable, "-m", "labs.exercises", "grade", str(run.params["exercise"]),
            str(workdir / "submission.py"), "--json", "--lang", str(run.params.get("lang", DEFAULT_LANG)),
            "--events", str(workdir / "events.jsonl"), "--out", str(workdir / "result.json")], grading_env()


def read_report(stored: Any) -> GradeReport | None:
    """A grading run's stored result as its report; None when it is none (no result, or
    not a grading report: the page then says the grader failed)."""
    try:
        return GradeReport.model_validate(stored) if stored is not None else None
    except ValidationError:
        return None


def fit(run: LabRun, result: dict[str, Any] | None, limit: int) -> GradeReport | None:
    """The grader's ``result.json`` as the report to keep: whole if its JSON fits in ``limit``
    bytes, else the small error report that says so (``GradeReport.capped``: never a pass).
    None when the grader wrote none, or something that is no report."""
    report = read_report(result)
    if report is None:
        if result is not None:
            log.warning("run %s: the grader's result is no grading report; not kept", run.id)
        return None
    kept = report.capped(limit)
    if kept is not report:
        log.warning("run %s: report over the limit of %s bytes; stored as too large", run.id, limit)
    return kept


def outcome(run: LabRun, report: GradeReport | None, returncode: int | None) -> dict[str, Any] | None:
    """What a grading run that ended by itself means, for the worker to record; None when it
    left no report (the run then failed as any lab's would).

    A report, whatever it says (passed, a case failed, cannot be graded: the
    grader exits 0, 1 or 2), is the run's result; the page reads its status.
    Only a passing one (exit 0, status "passed") of a signed-in learner earns
    the pass: ``passed`` is then (learner id, exercise).
    """
    if report is None or returncode not in (0, 1, 2):
        return None
    passed = returncode == 0 and report.status == "passed" and run.learner_id is not None
    return {"status": "done", "result": report.dump(),
            "passed": (run.learner_id, run.params["exercise"]) if passed else None}


def slim(stored: dict[str, Any]) -> dict[str, Any]:
    """What an older submission keeps of its report (``GradeReport.slim``: its grader too,
    which ``academy.regrade`` reads)."""
    report = read_report(stored)
    return report.slim().dump() if report is not None else {"pruned": True}


def series(run: LabRun) -> list[Any]:
    """Reports are slimmed per exercise: a learner's newest runs of each keep theirs whole."""
    return [LabRun.params["exercise"].as_string() == str((run.params or {}).get("exercise", ""))]


STANDING = col(ExercisePass.withdrawn_at).is_(None)  # a pass that counts: not withdrawn by a re-grading


def passes(*, session: Session, learner_id: int) -> dict[str, ExercisePass]:
    """The learner's passes by exercise id (those withdrawn by a re-grading left out)."""
    rows = session.exec(select(ExercisePass).where(ExercisePass.learner_id == learner_id, STANDING)).all()
    return {row.exercise: row for row in rows}


def has_passed(*, session: Session, learner_id: int, exercise: str) -> bool:
    return session.exec(select(ExercisePass.id).where(
        ExercisePass.learner_id == learner_id, ExercisePass.exercise == exercise, STANDING)).first() is not None


def withdrawn(*, session: Session, learner_id: int) -> dict[str, tuple[ExercisePass, ExerciseRegrade]]:
    """The learner's withdrawn passes by exercise id, each with the re-grading that withdrew it
    (its ``reason``: what the newer grader found; ``academy.regrade``)."""
    rows = session.exec(select(ExercisePass, ExerciseRegrade)
                        .join(ExerciseRegrade, col(ExerciseRegrade.id) == col(ExercisePass.regrade_id))
                        .where(ExercisePass.learner_id == learner_id)).all()
    return {p.exercise: (p, r) for p, r in rows}


def missing_for_certificate(*, session: Session, learner_id: int) -> list[str]:
    """The required exercises the learner has not passed, in course order; none when
    ``certificate_requires_exercises`` is off."""
    if not get_settings().certificate_requires_exercises:
        return []
    done = passes(session=session, learner_id=learner_id)
    return [ex for ex in required() if ex not in done]


def certified_exercises(*, session: Session, learner_id: int) -> list[str]:
    """What a new certificate states the learner passed: the required exercises when the
    setting is on (the caller has checked that none is missing), else nothing."""
    if not get_settings().certificate_requires_exercises:
        return []
    done = passes(session=session, learner_id=learner_id)
    return [ex for ex in required() if ex in done]


# --------------------------------------------------------------------------
# Submissions (lab runs of lab "exercise")


def submit(*, learner_id: int, exercise: str, source: str, lang: str,
           machine: dict[str, Any] | None = None) -> int:
    """Save the draft and queue the code for grading; the run's id.

    Refused before anything is written when the source is too large or not
    text (:class:`SourceRefused`), and like any lab by fair use (the
    learner's own limit of active runs, the queue's) or an unreachable queue.
    """
    exercise = check_exercise(exercise)
    source = check_source(source)
    with session_scope() as session:
        save_draft(session=session, learner_id=learner_id, exercise=exercise, source=source)
    # The grader's own text output is in a language it has (the page renders the
    # report's keys itself, in the learner's language, whatever this is).
    lang = lang if lang in messages.languages() else DEFAULT_LANG
    try:
        return labqueue.submit(lab=LAB, params={"exercise": exercise, "lang": lang}, learner_id=learner_id,
                               machine=machine or {}, source=source)
    except labqueue.QueueFull as err:
        if err.key != "labs_refused.too_many":
            raise
        # The limit counts labs and exercise runs together: say so in the exercise's words.
        raise labqueue.QueueFull("exercises.too_many", **err.values) from None


def latest_run(*, learner_id: int, exercise: str) -> LabRun | None:
    """The learner's newest submission of this exercise (any status).

    Filtered in SQL on the run's ``params`` (JSON on SQLite and PostgreSQL alike), so
    that it is found however many runs of other exercises came after it.
    """
    with session_scope() as session:
        return session.exec(select(LabRun).where(
            LabRun.learner_id == learner_id, LabRun.lab == LAB,
            LabRun.params["exercise"].as_string() == exercise,
        ).order_by(col(LabRun.id).desc()).limit(1)).first()


def own_run(*, learner_id: int, run_id: int) -> LabRun | None:
    """A submission of this learner's, never another's (its source is in the row)."""
    with session_scope() as session:
        run = session.get(LabRun, run_id)
    if run is None or run.learner_id != learner_id or run.lab != LAB:
        return None
    return labqueue.reap_if_stale(run)


def case_progress(event: dict[str, Any] | None) -> tuple[int, int] | None:
    """(case k, of n) from the grader's newest progress event (``--events``: ``step`` of
    ``total_steps``, counted from 1), as the worker stored it; None before the first."""
    if not event:
        return None
    k, n = event.get("step"), event.get("total_steps")
    if isinstance(k, int) and isinstance(n, int) and n > 0:
        return k, n
    return None
