"""Moving a test's database through the Alembic migrations by hand."""

from __future__ import annotations


def columns(engine, table: str) -> set[str]:
    from sqlalchemy import inspect

    return {c["name"] for c in inspect(engine).get_columns(table)}


def alembic(engine, step: str, revision: str) -> None:
    """``step`` ("upgrade" or "downgrade") ``engine``'s database to ``revision``."""
    from alembic import command
    from alembic.config import Config

    from academy.settings import ROOT

    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "academy" / "migrations"))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        getattr(command, step)(cfg, revision)
