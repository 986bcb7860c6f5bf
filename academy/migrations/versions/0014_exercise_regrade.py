"""exercises: stored passes graded again by a newer grader, and withdrawn passes

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04 18:00:00

Issue #35: a pass earned under an older grader (one a side channel fooled) is
graded again by ``python -m academy.regrade``. ``exerciseregrade`` keeps each
new outcome beside the run's own, one row per run and grader (a hash of the
grading code), so a re-grading is never done twice and one cut short is done
on the next start; ``exercisepass`` gets ``withdrawn_at`` and the re-grading
that withdrew it, set together or not at all.
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'exerciseregrade',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('run_id', sa.Integer(), nullable=False),
        sa.Column('learner_id', sa.Integer(), nullable=False),
        sa.Column('exercise', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column('grader', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column('status', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column('reason', sa.JSON(), nullable=True),
        sa.Column('regraded_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(['learner_id'], ['learner.id']),
        sa.ForeignKeyConstraint(['run_id'], ['labrun.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('run_id', 'grader'),
    )
    op.create_index('ix_exerciseregrade_run_id', 'exerciseregrade', ['run_id'], unique=False)
    op.create_index('ix_exerciseregrade_learner_id', 'exerciseregrade', ['learner_id'], unique=False)
    with op.batch_alter_table('exercisepass') as batch:  # SQLite: the table copied with the new rules
        batch.add_column(sa.Column('withdrawn_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True))
        batch.add_column(sa.Column('regrade_id', sa.Integer(), nullable=True))
        batch.create_foreign_key('fk_exercisepass_regrade_id', 'exerciseregrade', ['regrade_id'], ['id'])
        batch.create_check_constraint('ck_exercisepass_withdrawn', '(withdrawn_at IS NULL) = (regrade_id IS NULL)')


def downgrade() -> None:
    with op.batch_alter_table('exercisepass') as batch:
        batch.drop_constraint('ck_exercisepass_withdrawn', type_='check')
        batch.drop_constraint('fk_exercisepass_regrade_id', type_='foreignkey')
        batch.drop_column('regrade_id')
        batch.drop_column('withdrawn_at')
    op.drop_index('ix_exerciseregrade_learner_id', table_name='exerciseregrade')
    op.drop_index('ix_exerciseregrade_run_id', table_name='exerciseregrade')
    op.drop_table('exerciseregrade')
