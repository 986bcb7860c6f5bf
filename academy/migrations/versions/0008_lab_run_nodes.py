"""Multi-node lab runs: one row per node and the worker running it

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 08:00:00

A lab run may ask for several nodes (``params["nodes"]``); each is a message
on the run's queue, and the worker that takes node k writes the row
(run, k) here, then its heartbeat and, at the end, the node's status. The
primary key makes taking a node one conditional INSERT (a node never runs
twice); the reaper fails a run one of whose nodes stopped beating.
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'labrunnode',
        sa.Column('run_id', sa.Integer(), nullable=False),
        sa.Column('node', sa.Integer(), nullable=False),
        sa.Column('worker', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column('heartbeat_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column('status', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.ForeignKeyConstraint(['run_id'], ['labrun.id']),
        sa.PrimaryKeyConstraint('run_id', 'node'),
    )


def downgrade() -> None:
    op.drop_table('labrunnode')
