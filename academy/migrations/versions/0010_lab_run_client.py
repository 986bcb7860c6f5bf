"""The client of a guest's lab run

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 22:00:00

A guest has no learner id, and a new browser session was a new guest: one
client filled the whole lab queue with sessions (review N-3). A guest's run
now records its client (``academy.accounts.client_key``: an IP address in one
spelling), by which guests are counted; a learner's run leaves it empty.
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('labrun', sa.Column('client', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True))


def downgrade() -> None:
    op.drop_column('labrun', 'client')  # SQLite 3.35+ drops columns in place
