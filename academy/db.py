"""Engine and sessions. One engine per process; migrations applied on start.

SQLite (the embedded default) runs with WAL, foreign keys and a busy timeout
so that several learners can write at once; PostgreSQL needs nothing extra.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlmodel import Session, create_engine

from academy.settings import ROOT, get_settings

_engine: Engine | None = None
_lock = threading.Lock()


def owner_only(path: Path) -> None:
    """Make the SQLite file (and its -wal/-shm, if there) readable by the owner alone, its
    folder 0700: it holds password hashes, session ids and certificate data (review F-18).

    SQLite creates -wal and -shm with the main file's mode, so creating that file
    0600 first covers them; an older database gets its modes fixed here.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.parent.resolve() == (ROOT / "data").resolve():  # our own folder; never chmod a shared one
        path.parent.chmod(0o700)
    os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
    for f in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if f.exists():
            f.chmod(0o600)


def make_engine(url: str, **kwargs) -> Engine:
    """Create an engine; for SQLite also the folder and file (owner only), WAL and pragmas."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[1] if "///" in url else ""  # "sqlite://": in memory
        if path and path != ":memory:" and not path.startswith("file:"):
            owner_only(Path(path))
        kwargs.setdefault("connect_args", {"check_same_thread": False, "timeout": 30})
    engine = create_engine(url, **kwargs)
    if engine.dialect.name == "sqlite":
        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()
    return engine


VERSIONS = ROOT / "academy" / "migrations" / "versions"
_REVISION = re.compile(r"""^(down_revision|revision)\s*=\s*(?:['"]([^'"]+)['"]|None)""", re.M)


def head_revision() -> str | None:
    """The newest migration's revision, read from the files without loading Alembic
    (None unless the files make one straight line; ``tests/test_storage.py`` holds it to
    Alembic's own answer)."""
    revisions, parents = set(), set()
    for path in VERSIONS.glob("*.py"):
        found = dict(m.groups() for m in _REVISION.finditer(path.read_text(encoding="utf-8")))
        if "revision" not in found:
            return None
        revisions.add(found["revision"])
        parents.add(found.get("down_revision"))
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def _at_head(engine: Engine) -> bool:
    """Whether the database already stands at the newest revision (one cheap read)."""
    head = head_revision()
    try:
        with engine.connect() as conn:
            stamped = [row[0] for row in conn.exec_driver_sql("SELECT version_num FROM alembic_version")]
    except DBAPIError:  # no version table yet: a new database
        return False
    return head is not None and stamped == [head]


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest Alembic revision.

    A database already there is left alone without importing Alembic, which each
    process (a worker, a command, the app) would otherwise load and run on first use:
    0.3 s of CPU per process for a no-op.
    """
    if _at_head(engine):
        return
    from alembic import command
    from alembic.config import Config

    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "academy" / "migrations"))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def get_engine() -> Engine:
    """The process-wide engine, created and migrated on first use."""
    global _engine
    with _lock:
        if _engine is None:
            engine = make_engine(get_settings().database_url)
            migrate(engine)
            _engine = engine
        return _engine


def set_engine(engine: Engine | None) -> None:
    """Swap the process-wide engine (tests)."""
    global _engine
    with _lock:
        _engine = engine


@contextmanager
def session_scope() -> Iterator[Session]:
    """A session that commits on success and rolls back on error."""
    with Session(get_engine(), expire_on_commit=False) as session:
        try:
            yield session
            session.commit()
        except Exception:
            session.rollback()
            raise
