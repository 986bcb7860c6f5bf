"""Stored passes graded again by the current grader (issue #35, ``academy.regrade``).

Most tests grade with a stand-in (a report per source, the stored run's own
format), so that they check the bookkeeping: what is withdrawn, kept, given
back, recorded once per grader, resumed after a kill. One test grades real
stored submissions in the sandbox (an honest ring and two that an older grader
passed and the current one fails) and shows the outcome on the Admin page and
the learner's Exercises page, in every language.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from sqlmodel import func, select

from academy import exercises, i18n, regrade
from academy.db import session_scope
from academy.models import ExercisePass, ExerciseRegrade, LabRun, Learner, QuizAttempt
from certificates.eligibility import eligibility
from labs.exercises.report import CaseReport, Finding, GradeReport, Problem

HONEST, CHEAT, FLAKY, BROKEN = "# honest\n", "# cheat\n", "# flaky\n", "# broken sandbox\n"
FINDING = {"check": "bytes", "passed": False, "key": "bytes_total",
           "values": {"sent": 0, "expected": 56, "world_size": 2, "size": 7}}


def report(status: str, exercise: str = "ring-allreduce", grader: str | None = None) -> GradeReport:
    """A grading report as the grader gives it (status, error, cases with findings)."""
    error = Problem(key="harness_failed", values={"returncode": 1}) if status == "error" else None
    case = CaseReport(id="w2-n7-float32", status="passed" if status == "passed" else "failed", world_size=2,
                      size=7, dtype="float32", findings=[] if status == "passed" else [Finding(**FINDING)])
    return GradeReport(exercise=exercise, status=status, error=error, cases=[] if error else [case],
                       duration_s=0.1, sandbox="none", grader=grader)


class Grader:
    """The stand-in grader: passes HONEST, fails CHEAT, fails FLAKY once then passes it, cannot run
    BROKEN; counts what it grades."""

    def __init__(self, *, broken_fixed: bool = False) -> None:
        self.calls: list[tuple[str, str]] = []
        self.broken_fixed = broken_fixed

    def __call__(self, exercise: str, source: str) -> GradeReport:
        self.calls.append((exercise, source))
        if source == FLAKY:
            return report("failed" if self.calls.count((exercise, source)) == 1 else "passed", exercise)
        if source == BROKEN:
            return report("passed" if self.broken_fixed else "error", exercise)
        return report("passed" if source == HONEST else "failed", exercise)


def learner(email: str | None = None) -> int:
    with session_scope() as session:
        person = Learner(email=email or f"re-{uuid.uuid4().hex[:8]}@example.org", password_hash="x",
                         display_name="Re Grader")
        session.add(person)
        session.flush()
        return person.id


def stored_pass(me: int, source: str, exercise: str = "ring-allreduce", *, when: datetime | None = None) -> int:
    """A passing run as an older grader stored it (no ``grader`` in its report), and the pass; the run's id."""
    with session_scope() as session:
        run = LabRun(learner_id=me, lab=exercises.LAB, params={"exercise": exercise, "lang": "en"}, status="done",
                     source=source, result=report("passed", exercise).dump(), finished_at=when or datetime.now(UTC))
        session.add(run)
        session.flush()
        exercises.record_pass(session=session, learner_id=me, exercise=exercise, run_id=run.id)
        return run.id


def state(me: int, exercise: str = "ring-allreduce") -> tuple[int, bool]:
    """(the pass's run, whether it is withdrawn)."""
    with session_scope() as session:
        held = session.exec(select(ExercisePass).where(ExercisePass.learner_id == me,
                                                       ExercisePass.exercise == exercise)).one()
        return held.run_id, held.withdrawn_at is not None


def certificate(me: int, name: str):
    """A certificate issued to ``me`` the real way (a passed quiz, the required exercises passed)."""
    from certificates import store

    with session_scope() as session:
        attempt = QuizAttempt(learner_id=me, seed=1, status="finished", score=92.0, passed=True,
                              finished_at=datetime.now(UTC))
        session.add(attempt)
        session.flush()
        return store.issue_certificate(session=session, learner_id=me, attempt_id=attempt.id, name=name,
                                       lang="en", score=92, pass_date="2026-12-01")


def regrades() -> int:
    with session_scope() as session:
        return session.exec(select(func.count()).select_from(ExerciseRegrade)).one()


@pytest.mark.usefixtures("app_db")
def test_the_passes_that_fail_now_are_withdrawn_and_a_second_run_grades_nothing():
    honest, cheat, flaky = learner(), learner(), learner()
    runs = {who: stored_pass(who, source) for who, source in ((honest, HONEST), (cheat, CHEAT), (flaky, FLAKY))}
    other = stored_pass(honest, CHEAT, "broadcast")  # not asked for: left alone
    grade = Grader()
    done = regrade.regrade(exercises=["ring-allreduce"], grade=grade)
    assert (done.total, done.held, done.withdrawn, done.unfinished) == (3, 2, 1, 0)
    assert grade.calls.count(("ring-allreduce", CHEAT)) == 2, "a failure is confirmed before it counts"
    assert [state(who) for who in (honest, cheat, flaky)] == [(runs[honest], False), (runs[cheat], True),
                                                               (runs[flaky], False)]
    assert state(honest, "broadcast") == (other, False)
    with session_scope() as session:
        assert list(exercises.passes(session=session, learner_id=cheat)) == []
        [(held, why)] = exercises.withdrawn(session=session, learner_id=cheat).values()
        assert (why.run_id, why.status, why.reason) == (runs[cheat], "failed", {**{k: FINDING[k] for k in
                                                        ("key", "values")}, "case": "w2-n7-float32"})
        # Beside the run's own outcome, which is kept as it was.
        assert session.get(LabRun, runs[cheat]).result["status"] == "passed"
    recorded = regrades()
    assert recorded == 3

    again = Grader()
    done = regrade.regrade(exercises=["ring-allreduce"], grade=again)
    assert again.calls == [] and done.graded == 0 and regrades() == recorded, "nothing is graded twice"
    assert (done.held, done.still_withdrawn) == (2, 1)
    assert [state(who)[1] for who in (honest, cheat, flaky)] == [False, True, False]


@pytest.mark.usefixtures("app_db")
def test_a_killed_run_goes_on_where_it_stopped():
    people = [learner() for _ in range(4)]
    for who, source in zip(people, (HONEST, CHEAT, HONEST, CHEAT), strict=True):
        stored_pass(who, source)

    class Killed(Grader):
        def __call__(self, exercise, source):
            if len(self.calls) == 2:  # the second pass's confirmation: killed mid-grading
                raise KeyboardInterrupt
            return super().__call__(exercise, source)

    with pytest.raises(KeyboardInterrupt):
        regrade.regrade(grade=Killed())
    assert regrades() == 1 and [state(who)[1] for who in people] == [False, False, False, False]
    rest = Grader()
    done = regrade.regrade(grade=rest)
    assert [source for _ex, source in rest.calls] == [CHEAT, CHEAT, HONEST, CHEAT, CHEAT], \
        "the first pass is not graded again, the one cut short is graded whole"
    assert done.withdrawn == 2 and [state(who)[1] for who in people] == [False, True, False, True]


@pytest.mark.usefixtures("app_db")
def test_another_passing_run_keeps_the_pass_and_passing_again_gives_it_back():
    me = learner()
    first = stored_pass(me, CHEAT, when=datetime(2026, 11, 1, tzinfo=UTC))
    later = stored_pass(me, HONEST)  # a second pass of the same exercise: the first one is the pass
    assert state(me) == (first, False)
    done = regrade.regrade(grade=Grader())
    assert (done.held, done.withdrawn) == (1, 0) and state(me) == (later, False)

    cheater = learner()
    stored_pass(cheater, CHEAT)
    regrade.regrade(grade=Grader())
    assert state(cheater)[1] is True
    with session_scope() as session:  # the worker's own call for a new passing run
        run = LabRun(learner_id=cheater, lab=exercises.LAB, params={"exercise": "ring-allreduce"}, status="done",
                     source=HONEST, result=report("passed", grader="whatever").dump())
        session.add(run)
        session.flush()
        exercises.record_pass(session=session, learner_id=cheater, exercise="ring-allreduce", run_id=run.id)
    assert state(cheater) == (run.id, False)
    with session_scope() as session:
        assert "ring-allreduce" in exercises.passes(session=session, learner_id=cheater)
        assert exercises.withdrawn(session=session, learner_id=cheater) == {}


@pytest.mark.usefixtures("app_db")
def test_what_the_sandbox_could_not_grade_stays_as_it_was_until_a_run_that_can():
    me = learner()
    run = stored_pass(me, BROKEN)
    done = regrade.regrade(grade=Grader())
    assert (done.unfinished, done.withdrawn, regrades()) == (1, 0, 0) and state(me) == (run, False)
    assert "the sandbox could not grade it" in done.problems[0]
    done = regrade.regrade(grade=Grader(broken_fixed=True))
    assert (done.unfinished, done.held) == (0, 1) and regrades() == 1


@pytest.mark.usefixtures("app_db")
def test_a_new_grader_grades_again_and_gives_back_what_it_passes(monkeypatch):
    from labs.exercises import grader

    me = learner()
    stored_pass(me, FLAKY)

    class Strict(Grader):  # the grader of the day fails it every time
        def __call__(self, exercise, source):
            self.calls.append((exercise, source))
            return report("failed", exercise)

    regrade.regrade(grade=Strict())
    assert state(me)[1] is True
    assert regrade.regrade(grade=Strict()).graded == 0
    monkeypatch.setattr(grader, "fingerprint", lambda exercise: f"next-{exercise}")
    done = regrade.regrade(grade=Grader())
    assert (done.graded, done.restored) == (2, 1) and state(me)[1] is False, "a later grader passes it: back"


@pytest.mark.usefixtures("app_db")
def test_a_run_graded_by_the_current_grader_is_not_graded_again():
    from labs.exercises import grader

    me = learner()
    with session_scope() as session:
        run = LabRun(learner_id=me, lab=exercises.LAB, params={"exercise": "broadcast"}, status="done",
                     source=CHEAT, result=report("passed", "broadcast", grader.fingerprint("broadcast")).dump())
        session.add(run)
        session.flush()
        exercises.record_pass(session=session, learner_id=me, exercise="broadcast", run_id=run.id)
    grade = Grader()
    assert regrade.regrade(grade=grade).held == 1 and grade.calls == []


def test_the_grader_s_fingerprint_changes_with_its_code_and_only_its_exercise_s(monkeypatch):
    """Every report names its grader; a change to the ring's checks is a new ring grader and the
    same broadcast grader."""
    from labs.exercises import grader

    ring, bcast = grader.fingerprint("ring-allreduce"), grader.fingerprint("broadcast")
    assert len({ring, bcast}) == 2 and all(len(f) == 16 for f in (ring, bcast))
    assert grader._report("ring-allreduce").grader == ring
    from pathlib import Path

    definition = Path(grader.load("ring-allreduce").__file__).resolve()
    read = Path.read_bytes
    grader.fingerprint.cache_clear()
    monkeypatch.setattr(Path, "read_bytes", lambda self: read(self) + (b"\n# stricter\n" if self == definition else b""))
    try:
        assert grader.fingerprint("broadcast") == bcast
        assert grader.fingerprint("ring-allreduce") != ring
    finally:
        monkeypatch.undo()
        grader.fingerprint.cache_clear()


class FakeSandboxes:
    """Stands in for ``regrade._Sandboxes`` under the command: the stand-in grader, no sandbox."""

    def __init__(self) -> None:
        self.grade = Grader()

    def close(self) -> None:
        pass


def test_the_command_shows_progress_and_lists_flagged_certificates(capsys, secrets, monkeypatch):  # noqa: ARG001
    from certificates import store

    me = learner("flagged@example.org")
    stored_pass(me, CHEAT)
    for ex in ("broadcast", "average-gradients"):
        stored_pass(me, HONEST, ex)
    cert = certificate(me, "Zoë Cheat")
    assert regrade.main(["--list"]) == 0
    assert "No certificate in force rests on a withdrawn pass." in capsys.readouterr().out
    with monkeypatch.context() as patched:
        patched.setattr(regrade, "_Sandboxes", FakeSandboxes)
        assert regrade.main([]) == 0
    out, err = capsys.readouterr()
    assert "3 passes" in out and "1 withdrawn" in out and "1 certificate(s) in force" in out
    assert "[" + "#" * 30 + "] 3/3 passes" in err
    assert regrade.main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert cert.id in listed and "flagged@example.org" in listed and "ring-allreduce: pass withdrawn" in listed
    assert "w2-n7-float32: " in listed, "with the reason, in English for the operator"
    with session_scope() as session:
        assert eligibility(session=session, learner_id=me).reason == "already_issued"  # revoking is theirs
        store.revoke(session=session, cert_id=cert.id, actor_id=None, reason="ring pass withdrawn")
        verdict = eligibility(session=session, learner_id=me)
    assert (verdict.reason, verdict.missing) == ("exercises_missing", ("ring-allreduce",))
    assert regrade.main(["--list"]) == 0
    assert "No certificate in force" in capsys.readouterr().out


# --------------------------------------------------------------------------
# Real stored submissions, the real grader, and the pages


@pytest.mark.needs_sandbox
@pytest.mark.usefixtures("app_db")
def test_real_stored_passes_honest_and_dishonest_and_what_the_pages_show(secrets):  # noqa: ARG001
    """An honest ring, a ring that sends its whole buffer each step (the bytes rule fails it)
    and an average-gradients file whose coding cookie hides behind a lone CR (review
    2026-12-04 L-1: the check refuses it now), each stored as passed by an older grader:
    the sandboxed grader withdraws exactly the two dishonest ones, a second run grades
    nothing, the Admin page lists the certificate that rested on one, and the learner's
    Exercises page says why, in en, zh and nl."""
    from labs import exercises as defs
    from tests.apptest import open_page
    from tests.test_exercises import FIXTURES

    honest, cheat = learner("honest@example.org"), learner("cheat@example.org")
    stored_pass(honest, defs.reference("ring-allreduce"))
    whole = stored_pass(cheat, (FIXTURES / "ring_whole_buffer.py").read_text())
    hidden = "\r# coding: utf-7\n" + defs.reference("average-gradients")
    stored_pass(cheat, hidden, "average-gradients")
    stored_pass(cheat, defs.reference("broadcast"), "broadcast")
    cert = certificate(cheat, "Mallory Ring")

    done = regrade.regrade()
    assert (done.total, done.withdrawn, done.held, done.unfinished) == (4, 2, 2, 0), done
    assert done.graded == 1 + 2 + 2 + 1  # honest ring; whole buffer twice; cookie twice; broadcast
    assert [state(honest)[1], state(cheat)[1], state(cheat, "average-gradients")[1],
            state(cheat, "broadcast")[1]] == [False, True, True, False]
    with session_scope() as session:
        taken = exercises.withdrawn(session=session, learner_id=cheat)
        assert taken["ring-allreduce"][1].reason["key"].startswith("bytes")
        assert taken["average-gradients"][1].reason == {"key": "source_encoding", "values": {"encoding": "utf-7"},
                                                        "case": None}
        assert eligibility(session=session, learner_id=honest).reason == "quiz_missing"
        [flagged] = regrade.flagged_certificates(session=session)
    assert flagged.certificate_id == cert.id
    assert sorted(w.exercise for w in flagged.passes) == ["average-gradients", "ring-allreduce"]
    again = regrade.regrade()
    assert (again.graded, again.withdrawn, again.still_withdrawn) == (0, 0, 2), "a rerun does nothing"

    with session_scope() as session:
        admin = session.get(Learner, honest)
        admin.is_admin = True
        session.add(admin)
    for lang in ("en", "zh", "nl"):
        at = open_page("admin", lang, honest)
        assert not at.exception, at.exception
        assert i18n.t("admin_regrade.title", lang) in [h.value for h in at.subheader]
        shown = [x.value for x in at.text]
        assert any(cert.id in line and "cheat@example.org" in line for line in shown), shown
        said = exercises.message("source_encoding", lang, {"encoding": "utf-7"}, "average-gradients")
        assert any(line.endswith(said) for line in shown), shown
        title = exercises.text("average-gradients", lang)["title"]  # in the admin's language too
        assert any(line.startswith(title) for line in shown), shown

        page = open_page("exercises", lang, cheat, exercise="average-gradients")
        assert not page.exception, page.exception
        held = taken["average-gradients"][0]
        assert i18n.t("exercises.withdrawn", lang, passed=i18n.format_date(held.passed_at, lang),
                      date=i18n.format_date(held.withdrawn_at, lang)) in [w.value for w in page.warning]
        assert exercises.message("source_encoding", lang, {"encoding": "utf-7"}, "average-gradients") in \
            [x.value for x in page.text]
        marks = [m.value for m in page.markdown]
        assert sum(i18n.t("exercises.withdrawn_mark", lang) in m for m in marks) == 2, marks
        assert not any(defs.reference("average-gradients").splitlines()[3] in c.value for c in page.code), \
            "no reference after a withdrawn pass"
    assert whole
