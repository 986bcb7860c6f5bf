"""Exercise drafts and passes in the database (academy.exercises), on SQLite and PostgreSQL.

The catalog is the stand-in of tests/exercisefakes.py; the rules checked are
ours: one draft and one pass per learner and exercise (the database's), the
64 KiB limit and UTF-8 check before anything is stored or queued, and the
certificate's list of what is missing.
"""

from __future__ import annotations

import codecs

import pytest
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from academy import exercises
from academy.db import make_engine, migrate, session_scope
from academy.labruns import queue as labqueue
from academy.models import EXERCISE_SOURCE_MAX, ExerciseDraft, ExercisePass, LabRun, utcnow
from tests import exercisefakes
from tests.conftest import copy_of
from tests.factories import learner


@pytest.fixture(autouse=True)
def fake_catalog(monkeypatch):
    exercisefakes.install(monkeypatch)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request, tmp_path, migrated_template):
    """A migrated database: a SQLite file, and PostgreSQL where conftest.py can reach one."""
    if request.param == "sqlite":
        url = copy_of(migrated_template, tmp_path / "ex.db")
    else:
        url = request.getfixturevalue("postgres_url")
    engine = make_engine(url)
    migrate(engine)  # a no-op on the template's copy
    with Session(engine, expire_on_commit=False) as session:
        yield session
    engine.dispose()




def finished_run(session, learner_id: int, exercise: str = "ring-allreduce") -> int:
    run = LabRun(learner_id=learner_id, lab=exercises.LAB, params={"exercise": exercise, "lang": "en"},
                 status="done", source="x = 1\n", result=exercisefakes.report(exercise))
    session.add(run)
    session.commit()
    return run.id


def test_a_draft_is_saved_updated_and_read_back_per_learner(db):
    me, other = learner(db), learner(db)
    exercises.save_draft(session=db, learner_id=me, exercise="broadcast", source="first = 1\n")
    exercises.save_draft(session=db, learner_id=me, exercise="broadcast", source="second = 2  # 张伟\n")
    exercises.save_draft(session=db, learner_id=other, exercise="broadcast", source="theirs = 3\n")
    mine = exercises.get_draft(session=db, learner_id=me, exercise="broadcast")
    assert mine.source == "second = 2  # 张伟\n"
    assert exercises.get_draft(session=db, learner_id=other, exercise="broadcast").source == "theirs = 3\n"
    assert exercises.get_draft(session=db, learner_id=me, exercise="ring-allreduce") is None
    rows = db.exec(select(ExerciseDraft).where(ExerciseDraft.learner_id == me)).all()
    assert len(rows) == 1


def test_the_database_refuses_a_second_draft_row(db):
    me = learner(db)
    db.add(ExerciseDraft(learner_id=me, exercise="broadcast", source="a"))
    db.commit()
    db.add(ExerciseDraft(learner_id=me, exercise="broadcast", source="b"))
    with pytest.raises(IntegrityError):
        db.commit()
    db.rollback()


def test_hints_open_one_at_a_time_up_to_the_last_and_reset_keeps_them(db):
    me = learner(db)
    assert [exercises.show_hint(session=db, learner_id=me, exercise="broadcast") for _ in range(5)] \
        == [1, 2, 3, 3, 3]
    draft = exercises.get_draft(session=db, learner_id=me, exercise="broadcast")
    assert draft.hints_shown == 3
    assert draft.source == exercisefakes.STARTER["broadcast"]  # a first hint starts the draft from the starter
    exercises.save_draft(session=db, learner_id=me, exercise="broadcast", source="mine\n")
    reset = exercises.reset_draft(session=db, learner_id=me, exercise="broadcast")
    assert (reset.source, reset.hints_shown) == (exercisefakes.STARTER["broadcast"], 3)


@pytest.mark.parametrize("source, key", [
    ("x" * (EXERCISE_SOURCE_MAX + 1), "exercises.err_too_large"),
    ("é" * (EXERCISE_SOURCE_MAX // 2 + 1), "exercises.err_too_large"),  # counted in UTF-8 bytes
    (b"\xff not utf-8", "exercises.err_not_text"),  # (\xff\xfe would be a UTF-16 BOM: err_encoding)
    ("nul \x00 inside", "exercises.err_not_text"),
    ("\ud800 lone surrogate", "exercises.err_not_text"),
])
def test_too_large_or_not_text_is_refused_before_anything_is_stored(db, source, key):
    me = learner(db)
    with pytest.raises(exercises.SourceRefused) as err:
        exercises.save_draft(session=db, learner_id=me, exercise="broadcast", source=source)
    assert err.value.key == key
    assert exercises.get_draft(session=db, learner_id=me, exercise="broadcast") is None


# Review N-8: Python decodes a file by its BOM or coding comment; the page and a reviewer read UTF-8.
# utf-7 turns "+AAo-" into a line break, so the stub shown below hides a second line that runs.
HIDDEN = "# -*- coding: utf-7 -*-\ndef broadcast(tensor, src):\n    return tensor  +AAo-import os\n"


@pytest.mark.parametrize("source, declared", [
    (HIDDEN, "utf-7"),
    ("#!/usr/bin/env python\n# vim: set fileencoding=latin-1 :\nx = 1\n", "latin-1"),
    ("# coding=ASCII\n", "ASCII"),  # a subset of UTF-8 still is another declaration
    ("\ufeff# coding: cp1252\n", "cp1252"),  # a UTF-8 BOM is fine, a cookie against it is not
    ("# coding: no-such-codec\n", "no-such-codec"),  # Python would refuse it too
    (HIDDEN.encode("utf-8"), "utf-7"),  # an upload
    # A lone CR ends a line for Python (review 2026-12-04 L-1): these cookies are on line 2.
    ("\r# coding: utf-7\ndef broadcast(tensor, src):\n    return tensor\n", "utf-7"),
    (b"#!/usr/bin/env python\r# coding: latin-1\rx = 1\r", "latin-1"),
    (codecs.BOM_UTF16_LE + "x = 1\n".encode("utf-16-le"), "UTF-16"),
    (codecs.BOM_UTF16_BE + "x = 1\n".encode("utf-16-be"), "UTF-16"),
    (codecs.BOM_UTF32_LE + "x = 1\n".encode("utf-32-le"), "UTF-32"),
])
def test_a_declared_encoding_other_than_utf8_is_refused_before_anything_is_stored(db, source, declared):
    me = learner(db)
    with pytest.raises(exercises.SourceRefused) as err:
        exercises.save_draft(session=db, learner_id=me, exercise="broadcast", source=source)
    assert (err.value.key, err.value.values) == ("exercises.err_encoding", {"encoding": declared})
    assert exercises.get_draft(session=db, learner_id=me, exercise="broadcast") is None
    said = {lang: err.value.text(lang) for lang in ("en", "zh", "nl")}
    assert all(f"`{declared}`" in text for text in said.values())
    assert len(set(said.values())) == 3, "each language in its own words"


@pytest.mark.parametrize("source", [
    "# -*- coding: utf-8 -*-\nx = 1\n",
    "# coding: UTF8\n",
    "# vim: fileencoding=utf_8\n",  # aliases of UTF-8, as codecs.lookup names them
    "\ufeffx = 1\n",  # a UTF-8 BOM
    b"\xef\xbb\xbf# coding: utf-8\nx = 1\n",
    "x = 1\n# coding: latin-1\n",  # after a line of code it is a comment, for Python too
    "x = 1\r# coding: latin-1\r",  # the same with the lines ended by CRs
])
def test_utf8_declared_or_not_is_accepted(db, source):
    me = learner(db)
    text = source.decode("utf-8") if isinstance(source, bytes) else source
    assert exercises.save_draft(session=db, learner_id=me, exercise="broadcast", source=source).source == text


def test_the_limit_itself_is_allowed(db):
    me = learner(db)
    exactly = "x" * EXERCISE_SOURCE_MAX
    assert exercises.save_draft(session=db, learner_id=me, exercise="broadcast", source=exactly).source == exactly


def test_a_refused_submission_queues_nothing(app_db, monkeypatch):
    queued = []
    monkeypatch.setattr(labqueue, "enqueue", lambda run_id, _queue, **_node: queued.append(run_id))
    with Session(app_db) as s:
        me = learner(s)
    with pytest.raises(exercises.SourceRefused):
        exercises.submit(learner_id=me, exercise="broadcast", source="y" * (EXERCISE_SOURCE_MAX + 1), lang="en")
    with Session(app_db) as s:
        assert s.exec(select(LabRun)).all() == []
    assert queued == []
    from labs.exercises import messages

    monkeypatch.setattr(messages, "languages", lambda: ["en", "nl"])
    run_id = exercises.submit(learner_id=me, exercise="broadcast", source="ok = 1\n", lang="nl")
    with Session(app_db) as s:
        run = s.get(LabRun, run_id)
        assert (run.lab, run.params, run.source, run.status) == \
            ("exercise", {"exercise": "broadcast", "lang": "nl"}, "ok = 1\n", "queued")
    # A language the grader has no texts in: its text output is English (the page renders the keys).
    other = exercises.submit(learner_id=me, exercise="broadcast", source="ok = 2\n", lang="zh")
    with Session(app_db) as s:
        assert s.get(LabRun, other).params["lang"] == "en"
        # Submitting saves the draft too: a refresh shows what was run.
        assert exercises.get_draft(session=s, learner_id=me, exercise="broadcast").source == "ok = 2\n"
    assert queued == [run_id, other]
    with pytest.raises(exercises.UnknownExercise):
        exercises.submit(learner_id=me, exercise="../etc/passwd", source="x", lang="en")


def test_a_pass_is_recorded_once_and_the_database_refuses_a_second_row(db):
    me = learner(db)
    first, second = finished_run(db, me), finished_run(db, me)
    exercises.record_pass(session=db, learner_id=me, exercise="ring-allreduce", run_id=first)
    db.commit()
    exercises.record_pass(session=db, learner_id=me, exercise="ring-allreduce", run_id=second)  # no error
    db.commit()
    rows = db.exec(select(ExercisePass).where(ExercisePass.learner_id == me)).all()
    assert [(r.exercise, r.run_id) for r in rows] == [("ring-allreduce", first)]  # the first pass stays
    db.add(ExercisePass(learner_id=me, exercise="ring-allreduce", run_id=second))
    with pytest.raises(IntegrityError):
        db.commit()
    db.rollback()


def test_a_withdrawn_pass_counts_for_nothing_until_the_next_passing_run(db):
    """Issue #35: a pass a re-grading withdrew (``academy.regrade``) is no pass; the worker's
    ``record_pass`` for the learner's next passing run makes it one again, and the database keeps
    ``withdrawn_at`` and its re-grading together."""
    from sqlalchemy import update

    from academy.models import ExerciseRegrade

    me = learner(db)
    first, second = finished_run(db, me), finished_run(db, me)
    exercises.record_pass(session=db, learner_id=me, exercise="ring-allreduce", run_id=first)
    regraded = ExerciseRegrade(run_id=first, learner_id=me, exercise="ring-allreduce", grader="g1", status="failed",
                               reason={"key": "bytes_total", "values": {}, "case": "w2"})
    db.add(regraded)
    db.commit()
    db.exec(update(ExercisePass).where(ExercisePass.learner_id == me).values(withdrawn_at=utcnow(),
                                                                            regrade_id=regraded.id))
    db.commit()
    assert not exercises.has_passed(session=db, learner_id=me, exercise="ring-allreduce")
    assert exercises.passes(session=db, learner_id=me) == {}
    assert list(exercises.withdrawn(session=db, learner_id=me)) == ["ring-allreduce"]
    with pytest.raises(IntegrityError):  # withdrawn without the re-grading that says why
        db.exec(update(ExercisePass).where(ExercisePass.learner_id == me).values(regrade_id=None))
        db.commit()
    db.rollback()
    exercises.record_pass(session=db, learner_id=me, exercise="ring-allreduce", run_id=second)
    db.commit()
    db.expire_all()
    [row] = db.exec(select(ExercisePass).where(ExercisePass.learner_id == me)).all()
    assert (row.run_id, row.withdrawn_at, row.regrade_id) == (second, None, None)
    assert exercises.has_passed(session=db, learner_id=me, exercise="ring-allreduce")
    assert exercises.withdrawn(session=db, learner_id=me) == {}


def test_missing_for_certificate_follows_passes_and_the_setting(db, monkeypatch):
    from academy.settings import get_settings

    me = learner(db)
    assert exercises.missing_for_certificate(session=db, learner_id=me) == ["ring-allreduce", "broadcast"]
    exercises.record_pass(session=db, learner_id=me, exercise="broadcast", run_id=finished_run(db, me, "broadcast"))
    db.commit()
    assert exercises.missing_for_certificate(session=db, learner_id=me) == ["ring-allreduce"]
    assert exercises.certified_exercises(session=db, learner_id=me) == ["broadcast"]
    monkeypatch.setenv("CERTIFICATE_REQUIRES_EXERCISES", "false")
    get_settings.cache_clear()
    try:
        assert exercises.missing_for_certificate(session=db, learner_id=me) == []
        assert exercises.certified_exercises(session=db, learner_id=me) == []
    finally:
        monkeypatch.delenv("CERTIFICATE_REQUIRES_EXERCISES")
        get_settings.cache_clear()


# -------------------------------------------------------------- the certificate requirement


def _text_of(data: bytes) -> str:
    import io

    from pypdf import PdfReader

    return "".join(page.extract_text() for page in PdfReader(io.BytesIO(data)).pages)


def _quiz_passed(session) -> int:
    from datetime import UTC, datetime

    from academy.models import QuizAttempt

    me = learner(session)
    session.add(QuizAttempt(learner_id=me, seed=1, status="finished", score=90.0, passed=True,
                            finished_at=datetime(2026, 11, 30, 12, tzinfo=UTC)))
    session.commit()
    return me


@pytest.fixture
def issuer(secrets):  # noqa: ARG001  (own issuer keys for the test, conftest.py)
    import certificates

    return certificates


def test_the_store_refuses_a_certificate_until_the_required_exercises_are_passed(db, issuer):
    from academy.models import Certificate

    me = _quiz_passed(db)
    with pytest.raises(issuer.ExercisesMissing) as err:
        issuer.issue_for_learner(session=db, learner_id=me, name="Zoë", lang="en")
    assert err.value.missing == ["ring-allreduce", "broadcast"]
    assert isinstance(err.value, issuer.NotEligible)  # older callers that catch NotEligible still do
    exercises.record_pass(session=db, learner_id=me, exercise="broadcast", run_id=finished_run(db, me, "broadcast"))
    db.commit()
    with pytest.raises(issuer.ExercisesMissing) as err:
        issuer.issue_for_learner(session=db, learner_id=me, name="Zoë", lang="en")
    assert err.value.missing == ["ring-allreduce"]
    assert db.exec(select(Certificate)).all() == []


@pytest.mark.parametrize("lang, line, criteria", [
    ("en", "including hands-on exercises: ring all-reduce, broadcast", "Wrote and passed the hands-on"),
    ("nl", "inclusief praktijkoefeningen: ring all-reduce, broadcast", "Schreef en haalde de praktijkoefeningen"),
    ("zh", "包括动手练习：环形全归约、广播", "编写并通过了动手编程练习：环形全归约、广播。"),
])
def test_with_the_exercises_passed_the_certificate_signs_them_and_the_pdf_and_credential_say_so(
        db, issuer, lang, line, criteria):
    import json

    from certificates import keys, proofs

    me = _quiz_passed(db)
    from tests.exercisepass import pass_required_exercises

    pass_required_exercises(db, me)
    cert = issuer.issue_for_learner(session=db, learner_id=me, name="Zoë Ødegård", lang=lang)
    payload = json.loads(cert.payload)
    assert (payload["v"], payload["exercises"]) == (2, ["ring-allreduce", "broadcast"])
    data = issuer.render_pdf(cert)
    assert line in _text_of(data).replace("\n", "")
    assert issuer.verify_pdf(data).valid  # version 2 verifies offline too
    assert issuer.lookup(session=db, text=cert.id).valid
    credential = json.loads(cert.credential_json)
    narrative = credential["credentialSubject"]["achievement"]["criteria"]["narrative"]
    assert criteria in narrative.replace("\n", "")
    assert proofs.verify_any(cert.credential_json, keys.local_public_keys()) is not None
    # A reissue under a new name states the same exercises.
    again = issuer.reissue(session=db, cert_id=cert.id, learner_id=me, new_name="Zoë Ø.", lang=lang)
    assert json.loads(again.payload)["exercises"] == ["ring-allreduce", "broadcast"]


def test_with_the_setting_off_the_quiz_is_enough_and_the_certificate_says_nothing_of_exercises(
        db, issuer, monkeypatch):
    import json

    from academy.settings import get_settings

    monkeypatch.setenv("CERTIFICATE_REQUIRES_EXERCISES", "0")
    get_settings.cache_clear()
    try:
        me = _quiz_passed(db)
        cert = issuer.issue_for_learner(session=db, learner_id=me, name="Zoë", lang="en")
        payload = json.loads(cert.payload)
        assert payload["v"] == 1 and "exercises" not in payload
        assert "hands-on exercises" not in _text_of(issuer.render_pdf(cert))
        narrative = json.loads(cert.credential_json)["credentialSubject"]["achievement"]["criteria"]["narrative"]
        assert "exercises" not in narrative
    finally:
        monkeypatch.delenv("CERTIFICATE_REQUIRES_EXERCISES")
        get_settings.cache_clear()


@pytest.mark.parametrize("style", ["serif", "sans", "serif-bold"])
def test_no_discretionary_ligature_joins_st_on_the_certificate(style):
    """reportlab shapes with "dlig" by default, and DejaVu then prints "st" as one old-style
    glyph: "broadcast" on the exercises line (and "Kristina" in a name) looked misspelt."""
    from certificates import text as layout

    for word in ("broadcast", "Kristina"):
        [run] = layout.line_runs(word, style)[0]
        assert len(layout.shape(run).inline) == len(word), (word, style)


def test_the_labs_limit_of_active_runs_counts_exercise_runs_and_says_so(app_db, monkeypatch):  # noqa: ARG001
    from academy.settings import get_settings

    monkeypatch.setattr(labqueue, "enqueue", lambda _run_id, _queue, **_node: None)
    monkeypatch.setenv("LAB_MAX_PER_LEARNER", "1")
    get_settings.cache_clear()
    try:
        with session_scope() as s:
            me = learner(s)
        exercises.submit(learner_id=me, exercise="broadcast", source="a = 1\n", lang="en")
        with pytest.raises(labqueue.QueueFull) as err:
            exercises.submit(learner_id=me, exercise="ring-allreduce", source="b = 1\n", lang="en")
        assert (err.value.key, err.value.values) == ("exercises.too_many", {"limit": 1})
    finally:
        monkeypatch.delenv("LAB_MAX_PER_LEARNER")
        get_settings.cache_clear()


def test_migration_0007_goes_down_and_up_again(db):
    """Down to 0006 removes the exercise tables and labrun.source; up brings them back, on
    SQLite (which drops a column in place since 3.35) and on PostgreSQL."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import inspect

    from academy.settings import ROOT

    engine = db.get_bind()
    db.close()

    def state():
        found = inspect(engine)
        return ("source" in {c["name"] for c in found.get_columns("labrun")},
                {"exercisedraft", "exercisepass"} & set(found.get_table_names()))

    assert state() == (True, {"exercisedraft", "exercisepass"})
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "academy" / "migrations"))
    for target, expected in (("0006", (False, set())), ("head", (True, {"exercisedraft", "exercisepass"}))):
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            (command.downgrade if target == "0006" else command.upgrade)(cfg, target)
        assert state() == expected, target
    me = learner(db)  # the tables work again: a draft and a pass round-trip
    exercises.save_draft(session=db, learner_id=me, exercise="broadcast", source="back = 1\n")
    run_id = finished_run(db, me)
    exercises.record_pass(session=db, learner_id=me, exercise="ring-allreduce", run_id=run_id)
    db.commit()
    assert set(exercises.passes(session=db, learner_id=me)) == {"ring-allreduce"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_app_db(request, tmp_path, monkeypatch):
    """The app's own engine (``session_scope``) on a migrated SQLite file or on PostgreSQL."""
    from tests.conftest import use_database

    url = f"sqlite:///{tmp_path / 'app.db'}" if request.param == "sqlite" \
        else request.getfixturevalue("postgres_url")
    for engine in use_database(monkeypatch, DATABASE_URL=url):
        migrate(engine)
        yield engine


def test_the_latest_run_of_an_exercise_is_found_behind_many_runs_of_others(any_app_db):
    """The page shows the newest report of the exercise opened; it was looked for among the
    learner's 50 newest exercise runs only, so after 50 runs of other exercises it was gone."""
    with Session(any_app_db) as s:
        me, other = learner(s), learner(s)
        mine = finished_run(s, me, "ring-allreduce")
        for _ in range(60):
            finished_run(s, me, "broadcast")
        finished_run(s, other, "ring-allreduce")  # someone else's newer run is not mine
    assert exercises.latest_run(learner_id=me, exercise="ring-allreduce").id == mine
    assert exercises.latest_run(learner_id=me, exercise="broadcast").id == mine + 60
    assert exercises.latest_run(learner_id=me, exercise="average-gradients") is None


def test_a_first_hint_never_overwrites_code_saved_in_between(db, monkeypatch):
    """show_hint reads the draft, then writes: with no draft yet it writes the starter code.
    A save from another tab between the two (simulated: the read sees no draft) was then
    overwritten by the starter, and the learner's code was lost. Only the hint count may change."""
    me = learner(db)
    exercises.save_draft(session=db, learner_id=me, exercise="broadcast", source="my work\n")
    real_get = exercises.get_draft
    monkeypatch.setattr(exercises, "get_draft", lambda **_kw: None)  # read before the other tab saved
    assert exercises.show_hint(session=db, learner_id=me, exercise="broadcast") == 1
    monkeypatch.setattr(exercises, "get_draft", real_get)
    draft = exercises.get_draft(session=db, learner_id=me, exercise="broadcast")
    assert (draft.source, draft.hints_shown) == ("my work\n", 1)


def test_old_reports_are_slimmed_on_sqlite_and_postgresql(db):
    """N-6: the pruning query (a JSON path on the report) on both databases: beyond the newest
    five runs of an exercise, a learner's reports keep their status and summary only."""
    from academy.labruns import kinds

    me = learner(db)
    runs = [finished_run(db, me, "broadcast") for _ in range(7)]
    other = finished_run(db, me, "ring-allreduce")
    assert kinds.prune_results(session=db, run_id=runs[-1]) == 2
    db.commit()
    assert kinds.prune_results(session=db, run_id=runs[-1]) == 0, "slimmed once"
    db.expire_all()
    reports = [db.get(LabRun, run_id).result for run_id in runs]
    assert [bool(r.get("pruned")) for r in reports] == [True, True] + [False] * 5
    assert reports[0]["status"] == "passed" and reports[0]["trace"] is None
    assert reports[0]["cases"] == [{"id": "w3-n7-float32", "status": "passed", "world_size": 3, "size": 7,
                                    "dtype": "float32", "findings": [], "output": {}}]
    assert not db.get(LabRun, other).result.get("pruned")
