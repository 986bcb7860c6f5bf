"""One home for what many tests make: a learner, a finished lab run, and waiting for a run to end.

Each writes through the app's own engine (``academy.db.session_scope``, what
``app_db`` and the worker fixtures point at) unless a test hands it a
``session`` of its own (the ``session`` fixture's in-memory database).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from sqlmodel import Session

from academy.db import session_scope
from academy.models import LabRun, Learner, QuizAttempt

TERMINAL = ("done", "failed", "cancelled")


def learner(session: Session | None = None, *, email: str | None = None, display_name: str = "Learner",
            password: str | None = None, admin: bool = False, exercises: bool = False,
            quiz: bool = False) -> int:
    """A new learner's id (a fresh address unless ``email`` is given).

    ``password``: signed up the real way (``academy.accounts.sign_up``, an Argon2
    hash), so that a browser can sign in; otherwise a row with a placeholder hash.
    ``exercises``: the certificate's required exercises passed, each through a
    finished run (``tests.exercisepass``). ``quiz``: a passed quiz attempt.
    """
    from tests.exercisepass import pass_required_exercises

    email = email or f"learner-{uuid.uuid4().hex[:10]}@example.org"
    with _session(session) as s:
        if password is not None:
            from academy.accounts import sign_up

            row = sign_up(session=s, email=email, password=password, display_name=display_name)
        else:
            row = Learner(email=email, display_name=display_name, password_hash="x")
        row.is_admin = admin
        s.add(row)
        s.commit()
        if exercises:
            pass_required_exercises(s, row.id)
        if quiz:
            s.add(QuizAttempt(learner_id=row.id, seed=1, status="finished", score=90.0, passed=True,
                              finished_at=datetime(2026, 11, 30, 12, 0, tzinfo=UTC)))
            s.commit()
        return row.id


def finished_run(lab: str, result: dict[str, Any] | None, *, status: str = "done",
                 params: dict[str, Any] | None = None, machine: dict[str, Any] | None = None,
                 **fields: Any) -> int:
    """A lab run as a worker leaves it when it ends (``result`` is what it stored); its id.
    ``fields`` are further ``LabRun`` columns (``learner_id``, ``worker``, ``source`` ...)."""
    with session_scope() as s:
        run = LabRun(lab=lab, params=params if params is not None else {"world_size": 2}, status=status,
                     result=result, machine=machine if machine is not None else {}, **fields)
        s.add(run)
        s.flush()
        return run.id


def wait_for_run(run_id: int, until: tuple[str, ...] = TERMINAL, timeout: float = 90, poll: float = 0.1, *,
                 reap: bool = False) -> LabRun:
    """The run's row once its status is one of ``until`` (by default: it ended); AssertionError
    after ``timeout``. ``reap``: read it as the Labs page does (``academy.labruns.pages.get_run``,
    which fails a run whose worker stopped beating); otherwise only a worker's reaper ends
    such a run, which is what the worker tests wait for."""
    from academy.labruns import pages

    deadline = time.monotonic() + timeout
    while True:
        if reap:
            row = pages.get_run(run_id)
        else:
            with session_scope() as s:
                row = s.get(LabRun, run_id)
        if row is not None and row.status in until:
            return row
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} never became {until}; it is {row and row.status}")
        time.sleep(poll)


@contextlib.contextmanager
def _session(session: Session | None) -> Iterator[Session]:
    """``session`` as it is, or a ``session_scope`` of the app's engine."""
    if session is not None:
        yield session
    else:
        with session_scope() as own:
            yield own
