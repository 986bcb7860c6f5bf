"""Thirty learners and five browsers at once: every acknowledged write is stored exactly once.

The learners are threads calling the app's own functions on the database of
the real app under ``streamlit run``, while browser contexts sign up and
verify certificates on it. Only correctness is asserted; the timings are
what ``python -m benchmarks.load`` reports.
"""

from __future__ import annotations

import sqlite3

import pytest

from benchmarks.load import run_load

pytestmark = [pytest.mark.browser, pytest.mark.slow]


# Nothing here reads a clock: every learner and browser finishes at least one
# round however slow the machine is, and only counts and losses are asserted.
# The limits are generous on purpose, for 2 cores shared with the other xdist
# worker: 90 s per browser step (benchmarks.load.BROWSER_TIMEOUT_MS) and
# 15 minutes for the whole test.
@pytest.mark.timeout(900)
@pytest.mark.usefixtures("on_server_db")
def test_thirty_learners_and_five_browsers(server):
    # The certificate rule stays on: each learner passes the required exercises
    # (as the worker records a passing report) before claiming.
    log = server.base / "server.log"
    log_start = log.stat().st_size
    result = run_load(learners=30, browsers=5, seconds=2, url=server.url)

    assert result["journal_mode"] == "wal"
    assert result["errors"] == []
    assert result["problems"] == []
    acked = result["acknowledged"]
    assert acked["learners"] >= 31  # every thread finished at least one learner, plus the seed
    assert acked["certificates"] == acked["learners"]  # each learner passed in the end
    assert acked["answers"] >= 12 * acked["learners"]
    assert acked["browser_sign_ups"] >= 5 and acked["browser_verifies"] >= 5
    assert {"sign_up", "sign_in", "record_answer", "finish_attempt", "issue_certificate", "lookup",
            "browser_sign_up", "browser_verify"} <= set(result["ops"])
    with open(log, errors="replace") as fh:
        fh.seek(log_start)
        assert "Traceback" not in fh.read()

    # The same facts straight from the file, without the app's models.
    path = server.env["DATABASE_URL"].removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT email FROM learner GROUP BY email HAVING COUNT(*) > 1").fetchall() == []
        assert conn.execute("SELECT attempt_id, position FROM quizanswer GROUP BY attempt_id, position "
                            "HAVING COUNT(*) > 1").fetchall() == []
        assert conn.execute("SELECT learner_id FROM quizattempt WHERE status = 'in_progress' AND "
                            "learner_id IN (SELECT id FROM learner WHERE email LIKE 'load%')").fetchall() == []
        assert conn.execute("SELECT learner_id, attempt_id, name, language FROM certificate "
                            "WHERE revoked_at IS NULL GROUP BY 1, 2, 3, 4 HAVING COUNT(*) > 1").fetchall() == []
