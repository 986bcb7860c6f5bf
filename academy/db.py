"""Engine and sessions. One engine per process; migrations applied on start.

SQLite (the embedded default) runs with WAL, foreign keys and a busy timeout
so that several learners can write at once; PostgreSQL needs nothing extra.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Engine
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


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest Alembic revision."""
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
