"""Alembic environment: runs on the connection handed over by academy.db.migrate,
or, from the alembic CLI, on the database that DATABASE_URL names."""

from alembic import context
from sqlmodel import SQLModel

import academy.models  # noqa: F401  (registers the tables)

target_metadata = SQLModel.metadata


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,  # SQLite cannot ALTER most things in place
    )
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    from academy.db import make_engine
    from academy.settings import get_settings

    with make_engine(get_settings().database_url).connect() as conn:
        _run(conn)
        conn.commit()
