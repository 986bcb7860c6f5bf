"""Lab runs on a job queue: queue, worker, heartbeat, progress, cancel flag; workers

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 05:00:00

Lab runs are now jobs that ``python -m academy.worker`` processes take from a
huey queue (academy/labruns/queue.py). The run row carries what the web process
used to keep in memory: the hardware queue it waits in, the worker that
claimed it and that worker's heartbeat on it, the newest progress event, and
the learner's cancel request. ``labworker`` lists the workers.
"""

from alembic import op
import sqlalchemy as sa
import sqlmodel


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ALTERs (as in 0002/0003): SQLite adds columns with defaults in place.
    op.add_column('labrun', sa.Column('queue', sqlmodel.sql.sqltypes.AutoString(length=16),
                                      nullable=False, server_default='cpu'))
    op.add_column('labrun', sa.Column('worker', sqlmodel.sql.sqltypes.AutoString(length=128),
                                      nullable=True))
    op.add_column('labrun', sa.Column('heartbeat_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True))
    op.add_column('labrun', sa.Column('progress', sa.JSON(), nullable=True))
    op.add_column('labrun', sa.Column('cancel_requested', sa.Boolean(), nullable=False,
                                      server_default=sa.false()))
    op.create_index('ix_labrun_queue', 'labrun', ['queue'], unique=False)
    op.create_table(
        'labworker',
        sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column('host', sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
        sa.Column('pid', sa.Integer(), nullable=False),
        sa.Column('queues', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column('slots', sa.Integer(), nullable=False),
        sa.Column('devices', sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
        sa.Column('started_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column('heartbeat_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint('name'),
    )


def downgrade() -> None:
    op.drop_table('labworker')
    op.drop_index('ix_labrun_queue', table_name='labrun')
    op.drop_column('labrun', 'cancel_requested')  # SQLite 3.35+ drops columns in place
    op.drop_column('labrun', 'progress')
    op.drop_column('labrun', 'heartbeat_at')
    op.drop_column('labrun', 'worker')
    op.drop_column('labrun', 'queue')
