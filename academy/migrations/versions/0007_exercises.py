"""Coding exercises: drafts, passes, and the submitted source on a lab run

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 07:00:00

An exercise submission is a lab run (lab ``exercise``, issue #16); its source
travels in the new ``labrun.source`` column, not in ``params``, which pages
list and download. ``exercisedraft`` keeps each learner's code per exercise
and the hints they opened; ``exercisepass`` records the first passing run per
learner and exercise, one row at most (a unique constraint), which the
certificate requirement reads.
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

SOURCE_MAX = 64 * 1024  # academy.models.EXERCISE_SOURCE_MAX when this was written


def upgrade() -> None:
    op.add_column('labrun', sa.Column('source', sqlmodel.sql.sqltypes.AutoString(length=SOURCE_MAX),
                                      nullable=True))
    op.create_table(
        'exercisedraft',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('learner_id', sa.Integer(), nullable=False),
        sa.Column('exercise', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column('source', sqlmodel.sql.sqltypes.AutoString(length=SOURCE_MAX), nullable=False),
        sa.Column('hints_shown', sa.Integer(), nullable=False),
        sa.Column('updated_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(['learner_id'], ['learner.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('learner_id', 'exercise'),
    )
    op.create_index('ix_exercisedraft_learner_id', 'exercisedraft', ['learner_id'], unique=False)
    op.create_table(
        'exercisepass',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('learner_id', sa.Integer(), nullable=False),
        sa.Column('exercise', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column('run_id', sa.Integer(), nullable=False),
        sa.Column('passed_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(['learner_id'], ['learner.id']),
        sa.ForeignKeyConstraint(['run_id'], ['labrun.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('learner_id', 'exercise'),
    )
    op.create_index('ix_exercisepass_learner_id', 'exercisepass', ['learner_id'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_exercisepass_learner_id', table_name='exercisepass')
    op.drop_table('exercisepass')
    op.drop_index('ix_exercisedraft_learner_id', table_name='exercisedraft')
    op.drop_table('exercisedraft')
    op.drop_column('labrun', 'source')
