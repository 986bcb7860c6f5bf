"""Storage: migrations, SQLite pragmas, round trips, PostgreSQL when reachable."""

import os
import subprocess
import sys

import pytest
from sqlalchemy import inspect, text
from sqlmodel import Session, select

from academy.db import head_revision, make_engine, migrate
from academy.models import LabRun, Learner, LessonProgress
from academy.settings import ROOT
from tests.conftest import copy_of


def test_migrations_create_every_table(engine):
    from sqlmodel import SQLModel

    assert set(SQLModel.metadata.tables) <= set(inspect(engine).get_table_names())


def test_an_existing_database_upgrades_through_the_moved_migrations(tmp_path):
    # The migrations moved to academy/migrations (issue #14) with their revision
    # ids: a database that the old layout stamped at 0001 upgrades to head,
    # through migrate() and through the alembic CLI's own alembic.ini.
    from alembic import command
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from academy.settings import ROOT

    cli = Config(str(ROOT / "alembic.ini"))
    scripts = ScriptDirectory.from_config(cli)
    revisions = [r.revision for r in scripts.walk_revisions()]  # head first, one line of history
    assert revisions[-1] == "0001" and len(revisions) >= 2 and len(scripts.get_heads()) == 1
    assert head_revision() == scripts.get_current_head(), "migrate()'s own reading of the files"
    eng = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    with eng.begin() as conn:
        cli.attributes["connection"] = conn
        command.upgrade(cli, "0001")
    migrate(eng)
    with eng.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == scripts.get_current_head()


def test_sqlite_runs_with_wal_foreign_keys_and_busy_timeout(tmp_path):
    eng = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with eng.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() >= 5000


def test_foreign_keys_enforced(session):
    from sqlalchemy.exc import IntegrityError

    session.add(LessonProgress(learner_id=999, section_id="overview"))
    with pytest.raises(IntegrityError):
        session.commit()


def test_progress_round_trip_is_idempotent(session):
    from academy import lessons

    learner = Learner(email="p@example.org", password_hash="x")
    session.add(learner)
    session.commit()
    lessons.mark_done(session=session, learner_id=learner.id, section_id="overview")
    lessons.mark_done(session=session, learner_id=learner.id, section_id="overview")
    assert lessons.completed(session=session, learner_id=learner.id) == {"overview"}
    lessons.mark_undone(session=session, learner_id=learner.id, section_id="overview")
    assert lessons.completed(session=session, learner_id=learner.id) == set()


def test_json_columns_round_trip(session):
    run = LabRun(lab="ring", params={"world_size": 2}, result={"trace": [[1, 2]], "名": "张伟"})
    session.add(run)
    session.commit()
    session.expunge_all()
    again = session.exec(select(LabRun)).one()
    assert again.params == {"world_size": 2} and again.result["名"] == "张伟"
    assert again.created_at.tzinfo is not None


@pytest.mark.postgres
def test_postgres_migrations_and_round_trip(postgres_url):
    eng = make_engine(postgres_url)
    migrate(eng)
    migrate(eng)  # applying twice is a no-op
    with Session(eng) as s:
        s.add(Learner(email=f"pg-{os.getpid()}@example.org", password_hash="h", display_name="Zoë 张伟"))
        s.commit()
        found = s.exec(select(Learner).where(Learner.email == f"pg-{os.getpid()}@example.org")).one()
        assert found.display_name == "Zoë 张伟"
        s.delete(found)
        s.commit()
    eng.dispose()


def test_a_database_at_head_is_opened_without_alembic(tmp_path, migrated_template):
    """Every process migrates on first use; at head that is one read, not Alembic's import
    and walk of the scripts (a command, a worker and the app each start sooner)."""
    url = copy_of(migrated_template, tmp_path / "at-head.db")
    code = ("import sys; from academy.db import get_engine; get_engine(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('alembic', 'mako')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "DATABASE_URL": url}, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]", out
    eng = make_engine(url)
    from tests.migrations import alembic

    alembic(eng, "downgrade", "0010")  # behind: Alembic upgrades it
    assert "check_mac" not in {c["name"] for c in inspect(eng).get_columns("certificate")}
    migrate(eng)
    with eng.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == head_revision()
        assert {"check_mac", "status_mac"} <= {c["name"] for c in inspect(conn).get_columns("certificate")}
        assert "seconds" in {c["name"] for c in inspect(conn).get_columns("quizanswer")}
        assert {"reviewcard", "reviewlog", "runquestion", "exerciseregrade"} <= set(inspect(conn).get_table_names())
