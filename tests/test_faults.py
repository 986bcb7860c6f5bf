"""Faults: the database locked during quiz submission, the server restarted mid-quiz. Each
ends clearly, with nothing lost or duplicated. (A lab rank that crashes or hangs through
``python -m labs``: tests/test_labs_cli.py.)"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import event
from sqlalchemy.exc import OperationalError
from sqlmodel import select

from academy import db, i18n
from academy.accounts import sign_up
from academy.db import session_scope
from academy.models import QuizAnswer, QuizAttempt
from benchmarks.appserver import AppServer
from benchmarks.quizkey import right_answer
from quizzes import store
from quizzes.bank import load_bank
from quizzes.engine import public_question
from tests.apptest import open_page

ROOT = Path(__file__).resolve().parent.parent


def start_quiz(email: str) -> tuple[int, QuizAttempt]:
    with session_scope() as s:
        learner = sign_up(session=s, email=email, password="long enough pw")
        attempt = store.start_attempt(session=s, learner_id=learner.id, lang="en", bank=load_bank())
    return learner.id, attempt


def submit(learner_id: int, attempt: QuizAttempt, pos: int):
    """What the quiz page does on Submit: one session_scope around record_answer."""
    bank = load_bank()
    with session_scope() as s:
        return store.record_answer(session=s, attempt_id=attempt.id, learner_id=learner_id, position=pos,
                                   response=right_answer(attempt.plan[pos], bank, "en"), lang="en", bank=bank)


def db_path() -> str:
    return str(db.get_engine().url.database)


def stored(attempt_id: int) -> list[int]:
    """The answered positions, read over a connection of its own."""
    with sqlite3.connect(db_path()) as conn:
        rows = conn.execute("SELECT position FROM quizanswer WHERE attempt_id = ? ORDER BY position",
                            (attempt_id,)).fetchall()
    return [r[0] for r in rows]


def attempt_row(attempt_id: int) -> tuple:
    with sqlite3.connect(db_path()) as conn:
        return conn.execute("SELECT status, score, finished_at FROM quizattempt WHERE id = ?",
                            (attempt_id,)).fetchone()


def exclusive_lock() -> sqlite3.Connection:
    """Another connection holding the database's write lock, as a long transaction would."""
    conn = sqlite3.connect(db_path(), isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    return conn


@pytest.fixture
def short_busy_timeout(app_db):
    """The app's engine on the same file, giving up on a lock after 0.3 s instead of 30 s."""
    engine = db.make_engine(str(app_db.url), connect_args={"check_same_thread": False, "timeout": 0.3})

    @event.listens_for(engine, "connect")
    def _short(dbapi_conn, _record):  # runs after make_engine's own pragmas
        dbapi_conn.execute("PRAGMA busy_timeout=300")

    db.set_engine(engine)
    yield engine
    engine.dispose()
    db.set_engine(app_db)


# --- the database locked during submission ---------------------------------------------------


@pytest.mark.usefixtures("app_db")
def test_submission_waits_out_a_brief_lock():
    learner_id, attempt = start_quiz("brief-lock@example.org")
    lock = exclusive_lock()
    outcome: dict = {}

    def answer() -> None:
        try:
            outcome["feedback"] = submit(learner_id, attempt, 0)
        except Exception as exc:  # noqa: BLE001 - reported below
            outcome["error"] = exc

    worker = threading.Thread(target=answer)
    worker.start()
    time.sleep(1.5)  # the lock outlives a few of SQLite's busy retries
    assert worker.is_alive() and stored(attempt.id) == [], "the answer should wait for the lock"
    lock.execute("COMMIT")
    lock.close()
    worker.join(timeout=30)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["feedback"].correct and not outcome["feedback"].duplicate
    assert stored(attempt.id) == [0]


@pytest.mark.usefixtures("short_busy_timeout")
def test_lock_past_the_busy_timeout_fails_cleanly_then_a_retry_works():
    learner_id, attempt = start_quiz("long-lock@example.org")
    submit(learner_id, attempt, 0)
    lock = exclusive_lock()
    try:
        with pytest.raises(OperationalError, match="database is locked"):
            submit(learner_id, attempt, 1)
        with pytest.raises(OperationalError, match="database is locked"), session_scope() as s:
            store.finish_attempt(session=s, attempt_id=attempt.id, learner_id=learner_id)
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    # Nothing half-written: the earlier answer is there, the refused one is not, the attempt is open.
    assert stored(attempt.id) == [0]
    assert attempt_row(attempt.id) == ("in_progress", None, None)
    # The same submission again, now that the lock is gone, is stored once.
    first, again = submit(learner_id, attempt, 1), submit(learner_id, attempt, 1)  # and a double click
    assert first.correct and not first.duplicate and again.duplicate
    assert stored(attempt.id) == [0, 1]
    with session_scope() as s:
        summary = store.finish_attempt(session=s, attempt_id=attempt.id, learner_id=learner_id)
    assert (summary.status, summary.answered, summary.correct) == ("finished", 2, 2)


@pytest.mark.usefixtures("short_busy_timeout")
def test_quiz_page_says_so_when_the_database_stays_locked():
    learner_id, attempt = start_quiz("page-lock@example.org")
    bank = load_bank()
    pos = next(i for i, item in enumerate(attempt.plan) if bank.questions[item["question_id"]].type == "single")
    at = open_page("quiz", "en", learner_id, state={f"quiz_pos_{attempt.id}": pos})
    assert not at.exception
    at.radio(key=f"ans_{attempt.id}_{pos}").set_value(right_answer(attempt.plan[pos], bank, "en"))
    lock = exclusive_lock()
    try:
        [b for b in at.button if b.label == i18n.t("quiz.submit", "en")][0].click()
        at.run()
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert stored(attempt.id) == []
    assert not at.exception, at.exception[0].message
    assert at.error


# --- the server restarted mid-quiz -----------------------------------------------------------


@pytest.fixture
def app_server(tmp_path):
    import shutil

    if shutil.which("chromium") is None:
        pytest.skip("no system Chromium (Debian package 'chromium')")
    srv = AppServer(tmp_path)
    try:
        srv.start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield srv
    srv.stop()


@pytest.mark.browser
def test_server_restart_mid_quiz_resumes_the_attempt(app_server, browser, artifacts):
    from tests import browserkit as kit

    t = lambda key, **v: i18n.t(key, "en", **v)  # noqa: E731
    email, bank = "restart@example.org", load_bank()
    ctx = browser.new_context(locale="en-US", viewport={"width": 1300, "height": 900})
    page = ctx.new_page()
    page.goto(f"{app_server.url}/account?lang=en")
    kit.wait_app(page)
    kit.sign_up(page, "en", name="Rei Start", email=email, password="a long enough password")
    kit.nav(page, "nav.quiz", "en")
    kit.button(kit.main(page), "quiz.start", "en").click()
    kit.see(page, re.compile(re.escape(t("quiz.question_of", n=1, total=12))))
    kit.wait_app(page)
    attempt = kit.open_attempt(app_server.env["DATABASE_URL"], email)
    total = len(attempt.plan)
    kit.answer(page, public_question(attempt.plan[0], bank, "en"), right_answer(attempt.plan[0], bank, "en"), "en")
    kit.alert(page, t("quiz.right"))

    app_server.kill()
    app_server.start()
    page.reload()
    kit.wait_app(page)
    # Still signed in (the cookie's session is in the database), on the same attempt, one answer kept.
    page.get_by_test_id("stSidebar").get_by_text(t("account.signed_in_as", name="Rei Start")).wait_for()
    kit.see(page, t("quiz.answered_of", answered=1, total=total))
    kit.see(page, re.compile(re.escape(t("quiz.question_of", n=2, total=total))))
    page.screenshot(path=str(artifacts / "fault-restart-resumed.png"), full_page=True)
    kit.answer(page, public_question(attempt.plan[1], bank, "en"), right_answer(attempt.plan[1], bank, "en"), "en")
    kit.alert(page, t("quiz.right"))
    kit.see(page, t("quiz.answered_of", answered=2, total=total))
    ctx.close()

    engine = db.make_engine(app_server.env["DATABASE_URL"])
    try:
        from sqlmodel import Session

        with Session(engine) as s:
            attempts = s.exec(select(QuizAttempt).where(QuizAttempt.learner_id == attempt.learner_id)).all()
            answers = s.exec(select(QuizAnswer).where(QuizAnswer.attempt_id == attempt.id)).all()
    finally:
        engine.dispose()
    assert [a.id for a in attempts] == [attempt.id]
    assert sorted(a.position for a in answers) == [0, 1]
    assert "Traceback" not in app_server.log.read_text()
