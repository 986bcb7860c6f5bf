"""Stored passes graded again by the current grader (issue #35).

    python -m academy.regrade [--exercise ID ...] [--jobs N]   # grade again; withdraw what no longer holds
    python -m academy.regrade --list                          # certificates that rest on a withdrawn pass

A pass (``ExercisePass``) was earned under the grader of its day. When the
grader is made stricter (a side channel closed, a rule added), a pass that a
side channel earned looks like an honest one in its stored report: only
grading its code again tells them apart. This runs every pass of the
exercises asked for (default: those a certificate requires) through the
current grader and records each new outcome beside the old one
(``ExerciseRegrade``: the run, the grader, the status, the first thing that
failed), then:

- the pass holds when its own run passes again; where that run fails, the
  learner's other passing runs of the exercise are graded, newest first, and
  the first that passes becomes the pass's run;
- where none passes, the pass is withdrawn (``withdrawn_at``, and the
  re-grading that says why): it counts for nothing, the learner's Exercises
  page says why, and they pass again by running code that passes
  (``exercises.record_pass`` turns the withdrawn row into a pass);
- a withdrawn pass whose run passes a later grader is given back.

A certificate is never revoked here: one that states an exercise whose pass is
withdrawn is listed for the admins (:func:`flagged_certificates`: the Admin
page and ``--list``), with the reason, for them to decide.

A failed re-grading is confirmed by a second one before it counts (a case
that stalled on a loaded machine is not the learner's failure); one the
sandbox could not run at all (:data:`OURS`) leaves the pass as it is, is not
recorded, and makes the command exit 1: run it again.

Which grader: ``labs.exercises.grader.fingerprint``, a hash of every file
that can decide the exercise's verdict, which each report carries
(``GradeReport.grader``). A run whose report came from the current grader, or which
has a re-grading under it, is not graded again, so a second run of the
command grades nothing, and one that was killed goes on where it stopped
(each outcome is committed as it comes). After a change to one exercise's
grading only that exercise's passes are graded again. Each grading uses a
sandbox started while the one before was graded (``grader.prestart``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import update
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session, col, select

from academy import exercises as store
from academy.db import session_scope
from academy.models import Certificate, ExercisePass, ExerciseRegrade, LabRun, Learner, utcnow
from academy.settings import get_settings
from labs.exercises import EXERCISES
from labs.exercises.report import GradeReport

# Errors that are the grading machine's, not the code's: no verdict, the pass stays as it is.
OURS = frozenset({"sandbox_unavailable", "harness_failed", "setup_timeout"})
REASON_MAX = 2048  # bytes of JSON of a reason's values (a crash message is the learner's text)

Grade = Callable[[str, str], GradeReport]  # (exercise, source) -> its report, as grader.grade gives it


@dataclass
class Summary:
    """What one run of :func:`regrade` did, pass by pass (``settled`` counts every pass looked at)."""

    total: int = 0
    settled: int = 0
    graded: int = 0  # gradings run (a failure's confirmation counts too)
    held: int = 0
    withdrawn: int = 0
    restored: int = 0  # withdrawn before, passed by another of the learner's runs or a later grader now
    still_withdrawn: int = 0
    unfinished: int = 0  # the sandbox could not grade: left as it was, to be done on the next run
    problems: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, what: str, graded: int) -> None:
        with self.lock:
            self.settled += 1
            self.graded += graded
            setattr(self, what, getattr(self, what) + 1)


@dataclass(frozen=True)
class Verdict:
    """The current grader's outcome for one run: from its own report, a stored re-grading, or a new one."""

    status: str
    regrade_id: int | None = None


def reason(report: GradeReport) -> dict[str, Any]:
    """The first thing that failed in a report, as a message key with its values (and the
    case): what the learner's page and the admin's list say, each in its own language
    (stored as JSON with the re-grading)."""
    found: dict[str, Any] = {"key": "case_not_run", "values": {}, "case": None}
    if report.error is not None:
        found = {"key": report.error.key, "values": dict(report.error.values), "case": None}
    else:
        for case in report.cases:
            failing = [f for f in case.findings if not f.passed]
            if case.status == "failed" and failing:
                found = {"key": failing[0].key, "values": dict(failing[0].values), "case": case.id}
                break
    if len(json.dumps(found["values"], default=str).encode()) > REASON_MAX:
        found["values"] = {}
    return found


def reason_text(found: dict[str, Any] | None, lang: str, exercise: str) -> str:
    """A re-grading's reason in ``lang``: the grader's own message for it, after its case."""
    if not found:
        return ""
    said = store.message(found.get("key") or "case_not_run", lang, found.get("values"), exercise)
    return f"{found['case']}: {said}" if found.get("case") else said


def _ours(report: GradeReport) -> bool:
    return report.status == "error" and report.error is not None and report.error.key in OURS


def _judge(exercise: str, source: str, grade: Grade) -> tuple[str, dict[str, Any] | None, int] | None:
    """(status, reason, gradings) of the current grader for ``source``; None when it could not grade.
    A failure is graded once more, and only a second failure stands."""
    first = grade(exercise, source)
    if first.status == "passed":
        return "passed", None, 1
    if _ours(first):
        return None
    second = grade(exercise, source)
    if second.status == "passed":
        return "passed", None, 2
    if _ours(second):
        return None
    return second.status, reason(second), 2


def _record(run: LabRun, grader: str, status: str, found: dict[str, Any] | None) -> int:
    """Keep a re-grading (once per run and grader: a second one's insert does nothing); its id."""
    with session_scope() as session:
        dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
        session.exec(dialect.insert(ExerciseRegrade.__table__).values(
            run_id=run.id, learner_id=run.learner_id, exercise=run.params["exercise"], grader=grader,
            status=status, reason=found, regraded_at=utcnow(),
        ).on_conflict_do_nothing(index_elements=["run_id", "grader"]))
        session.commit()
        return session.exec(select(ExerciseRegrade.id).where(
            ExerciseRegrade.run_id == run.id, ExerciseRegrade.grader == grader)).one()


def _verdict(run: LabRun, grader: str, grade: Grade, counted: list[int]) -> Verdict | None:
    """The current grader's verdict on ``run``, grading it only when nothing says it yet."""
    stored = store.read_report(run.result)
    if stored is not None and stored.grader == grader and stored.status == "passed":
        return Verdict("passed")  # graded by this very grader when it was submitted
    with session_scope() as session:
        done = session.exec(select(ExerciseRegrade).where(
            ExerciseRegrade.run_id == run.id, ExerciseRegrade.grader == grader)).first()
    if done is not None:
        return Verdict(done.status, done.id)
    if not run.source:
        return None  # nothing to grade: left as it is, and said
    judged = _judge(run.params["exercise"], run.source, grade)
    if judged is None:
        return None
    status, found, n = judged
    counted.append(n)
    return Verdict(status, _record(run, grader, status, found))


def _passing_runs(session: Session, learner_id: int, exercise: str) -> list[LabRun]:
    """The learner's runs of ``exercise`` whose stored report passed, newest first."""
    return list(session.exec(select(LabRun).where(
        LabRun.learner_id == learner_id, LabRun.lab == store.LAB, LabRun.status == "done",
        LabRun.params["exercise"].as_string() == exercise, LabRun.result["status"].as_string() == "passed",
    ).order_by(col(LabRun.id).desc())).all())


def _settle(pass_id: int, grader_of: Callable[[str], str], grade: Grade) -> tuple[str, int, str | None]:
    """Grade what backs one pass under the current grader and act on it:
    (what became of it, gradings run, a problem to report or None)."""
    counted: list[int] = []
    with session_scope() as session:
        held = session.get(ExercisePass, pass_id)
        own = session.get(LabRun, held.run_id)
        others = [r for r in _passing_runs(session, held.learner_id, held.exercise) if r.id != held.run_id]
    grader = grader_of(held.exercise)
    was_withdrawn = held.withdrawn_at is not None
    own_verdict = None
    for run in [own, *others]:
        verdict = _verdict(run, grader, grade, counted) if run is not None else None
        if verdict is None:
            why = "its run is gone" if run is None else "no source kept" if not run.source else "the sandbox could not grade it"
            return "unfinished", sum(counted), f"pass {pass_id} (run {held.run_id}): {why}"
        own_verdict = own_verdict or verdict
        if verdict.status == "passed":
            if run.id == held.run_id and not was_withdrawn:
                return "held", sum(counted), None
            with session_scope() as session:  # this run is the pass now (a withdrawn one comes back)
                session.exec(update(ExercisePass).where(col(ExercisePass.id) == pass_id).values(
                    run_id=run.id, passed_at=run.finished_at or utcnow(), withdrawn_at=None, regrade_id=None))
                session.commit()
            return ("restored" if was_withdrawn else "held"), sum(counted), None
    if was_withdrawn:
        return "still_withdrawn", sum(counted), None
    with session_scope() as session:
        # Not if the learner passed again meanwhile, under this grader: that run is the pass then.
        newer = [r for r in _passing_runs(session, held.learner_id, held.exercise)
                 if r.id not in {held.run_id, *(o.id for o in others)}]
        if newer:
            return _settle(pass_id, grader_of, grade)
        session.exec(update(ExercisePass).where(
            col(ExercisePass.id) == pass_id, col(ExercisePass.withdrawn_at).is_(None),
        ).values(withdrawn_at=utcnow(), regrade_id=own_verdict.regrade_id))
        session.commit()
    return "withdrawn", sum(counted), None


class _Sandboxes:
    """Grading with the next sandbox already warming (``grader.prestart``) while this one grades."""

    def __init__(self) -> None:
        self.waiting: contextlib.AbstractContextManager | None = None
        self.warm = None

    def _start(self) -> None:
        from labs.exercises import grader
        from labs.sandbox import run as sandbox

        try:
            self.waiting = grader.prestart()
            self.warm = self.waiting.__enter__()
        except sandbox.SandboxUnavailable:
            self.waiting = self.warm = None  # grade() says why, as it does without a warm start

    def grade(self, exercise: str, source: str) -> GradeReport:
        from labs.exercises import grader

        if self.waiting is None:
            self._start()
        used, warm = self.waiting, self.warm
        self._start()
        try:
            return grader.grade(exercise, source, warm=warm)
        finally:
            if used is not None:
                used.__exit__(None, None, None)

    def close(self) -> None:
        if self.waiting is not None:
            self.waiting.__exit__(None, None, None)
            self.waiting = self.warm = None


def regrade(*, exercises: Sequence[str] | None = None, grade: Grade | None = None, jobs: int = 1,
            on_progress: Callable[[Summary], None] | None = None) -> Summary:
    """Settle every pass of ``exercises`` (default: those a certificate requires) under the
    current grader, ``jobs`` passes at a time; ``grade`` defaults to the sandboxed grader,
    each grading in a sandbox started during the one before. ``on_progress`` gets the
    summary after each pass."""
    from labs.exercises import grader

    chosen = tuple(exercises or store.required())
    for exercise in chosen:
        if exercise not in EXERCISES:
            raise ValueError(f"unknown exercise {exercise!r}; known: {', '.join(EXERCISES)}")
    with session_scope() as session:
        ids = list(session.exec(select(ExercisePass.id).where(col(ExercisePass.exercise).in_(chosen))
                                .order_by(col(ExercisePass.id))).all())
    summary = Summary(total=len(ids))
    local = threading.local()
    made: list[_Sandboxes] = []

    def grading(exercise: str, source: str) -> GradeReport:
        if grade is not None:
            return grade(exercise, source)
        if not hasattr(local, "sandboxes"):
            local.sandboxes = _Sandboxes()
            made.append(local.sandboxes)
        return local.sandboxes.grade(exercise, source)

    def one(pass_id: int) -> None:
        what, graded, problem = _settle(pass_id, grader.fingerprint, grading)
        summary.add(what, graded)
        if problem:
            with summary.lock:
                summary.problems.append(problem)
        if on_progress is not None:
            on_progress(summary)

    try:
        if jobs <= 1:
            for pass_id in ids:
                one(pass_id)
        else:
            with ThreadPoolExecutor(jobs) as pool:
                list(pool.map(one, ids))
    finally:
        for sandboxes in made:
            sandboxes.close()
    return summary


# --------------------------------------------------------------------------
# What the admins see


@dataclass(frozen=True)
class Withdrawn:
    """One withdrawn pass a flagged certificate states: when, and what the newer grader found."""

    exercise: str
    withdrawn_at: datetime
    reason: dict[str, Any] | None


@dataclass(frozen=True)
class Flagged:
    """A certificate in force that states exercises whose passes are withdrawn."""

    certificate_id: str
    name: str
    learner_id: int
    email: str
    passes: tuple[Withdrawn, ...]


def flagged_certificates(*, session: Session) -> list[Flagged]:
    """Every certificate in force (not revoked) whose signed payload states an exercise whose
    pass its learner no longer holds (withdrawn by a re-grading), oldest withdrawal first."""
    rows = session.exec(
        select(Certificate, ExercisePass, ExerciseRegrade, Learner.email)
        .join(ExercisePass, col(ExercisePass.learner_id) == col(Certificate.learner_id))
        .join(ExerciseRegrade, col(ExerciseRegrade.id) == col(ExercisePass.regrade_id))
        .join(Learner, col(Learner.id) == col(Certificate.learner_id))
        .where(col(Certificate.revoked_at).is_(None), col(Certificate.course_id) == get_settings().course_id)
        .order_by(col(ExercisePass.withdrawn_at), col(Certificate.id), col(ExercisePass.exercise))
    ).all()
    found: dict[str, Flagged] = {}
    for cert, held, regraded, email in rows:
        stated = json.loads(cert.payload).get("exercises") or []  # what its signature says it rests on
        if held.exercise not in stated:
            continue
        entry = found.setdefault(cert.id, Flagged(cert.id, cert.name, held.learner_id, email, ()))
        found[cert.id] = dataclasses.replace(
            entry, passes=(*entry.passes, Withdrawn(held.exercise, held.withdrawn_at, regraded.reason)))
    return list(found.values())


# --------------------------------------------------------------------------
# The command


def _bar(summary: Summary, width: int = 30) -> str:
    done = summary.settled / summary.total if summary.total else 1.0
    filled = int(done * width)
    return (f"[{'#' * filled}{'.' * (width - filled)}] {summary.settled}/{summary.total} passes · "
            f"{summary.graded} graded · {summary.withdrawn} withdrawn · {summary.restored} given back")


def _progress(stream) -> Callable[[Summary], None]:
    """A progress bar on ``stream``: redrawn in place on a terminal, else a line per tenth."""
    tty = stream.isatty()
    last = [-1]

    def show(summary: Summary) -> None:
        if tty:
            print("\r" + _bar(summary), end="", file=stream, flush=True)
            return
        tenth = summary.settled * 10 // max(summary.total, 1)
        if tenth != last[0] or summary.settled == summary.total:
            last[0] = tenth
            print(_bar(summary), file=stream, flush=True)

    return show


def cmd_list() -> int:
    with session_scope() as session:
        flagged = flagged_certificates(session=session)
    if not flagged:
        print("No certificate in force rests on a withdrawn pass.")
        return 0
    for f in flagged:  # English, for the operator
        print(f"{f.certificate_id}  {f.name}  <{f.email}>")
        for w in f.passes:
            print(f"    {w.exercise}: pass withdrawn {w.withdrawn_at:%Y-%m-%d %H:%M} UTC: "
                  f"{reason_text(w.reason, 'en', w.exercise)}")
    print(f"{len(flagged)} certificate(s). Revoke with `python -m certificates revoke ID --reason ...` "
          "(or on the Admin page) where the learner should lose it; the learner may pass again.")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m academy.regrade", description=__doc__.split("\n\n")[0])
    parser.add_argument("--exercise", action="append", choices=EXERCISES, metavar="ID",
                        help="only this exercise (repeat for more; default: those a certificate requires)")
    parser.add_argument("--jobs", type=int, default=1, metavar="N", help="passes graded at once (default 1)")
    parser.add_argument("--list", action="store_true",
                        help="list the certificates in force that rest on a withdrawn pass, and grade nothing")
    args = parser.parse_args(argv)
    if args.list:
        return cmd_list()
    t0 = time.monotonic()
    summary = regrade(exercises=args.exercise, jobs=max(1, args.jobs), on_progress=_progress(sys.stderr))
    if sys.stderr.isatty():
        print(file=sys.stderr)
    print(f"{summary.total} passes in {time.monotonic() - t0:.0f} s: {summary.held} hold, {summary.withdrawn} "
          f"withdrawn, {summary.restored} given back, {summary.still_withdrawn} still withdrawn; "
          f"{summary.graded} gradings.")
    for problem in summary.problems:
        print(f"  not graded: {problem}")
    if summary.unfinished:
        print(f"{summary.unfinished} passes could not be graded now and are as they were: run this again.")
    with session_scope() as session:
        flagged = len(flagged_certificates(session=session))
    if flagged:
        print(f"{flagged} certificate(s) in force rest on a withdrawn pass: `python -m academy.regrade --list`.")
    return 1 if summary.unfinished else 0


if __name__ == "__main__":
    sys.exit(main())
