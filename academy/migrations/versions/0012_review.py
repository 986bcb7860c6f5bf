"""review queue: questions built from lab runs, FSRS cards, their reviews; seconds per quiz answer

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04 17:00:00

Issue #42. ``runquestion`` holds a question built from the figures of a
learner's finished lab run (one per run and template: a unique constraint);
``reviewcard`` a question in a learner's review queue with its FSRS state,
either a bank question or a run question (a check constraint says exactly
one) and each once per learner (unique constraints); ``reviewlog`` every
review applied, a quiz answer at most once (``answer_id`` unique).
``quizanswer.seconds`` keeps how long the learner took, which the schedule
rates by; answers stored before have none and count as neither quick nor slow.
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'runquestion',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('learner_id', sa.Integer(), nullable=False),
        sa.Column('run_id', sa.Integer(), nullable=False),
        sa.Column('lab', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column('template', sqlmodel.sql.sqltypes.AutoString(length=96), nullable=False),
        sa.Column('params', sa.JSON(), nullable=True),
        sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(['learner_id'], ['learner.id']),
        sa.ForeignKeyConstraint(['run_id'], ['labrun.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('run_id', 'template'),
    )
    op.create_index('ix_runquestion_learner_id', 'runquestion', ['learner_id'], unique=False)
    op.create_index('ix_runquestion_run_id', 'runquestion', ['run_id'], unique=False)
    op.create_table(
        'reviewcard',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('learner_id', sa.Integer(), nullable=False),
        sa.Column('question_id', sqlmodel.sql.sqltypes.AutoString(length=96), nullable=True),
        sa.Column('run_question_id', sa.Integer(), nullable=True),
        sa.Column('state', sa.Integer(), nullable=False),
        sa.Column('step', sa.Integer(), nullable=True),
        sa.Column('stability', sa.Float(), nullable=True),
        sa.Column('difficulty', sa.Float(), nullable=True),
        sa.Column('due', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column('last_review', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column('reps', sa.Integer(), nullable=False),
        sa.Column('retired', sa.Boolean(), nullable=False),
        sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.CheckConstraint('(question_id IS NULL) <> (run_question_id IS NULL)', name='ck_reviewcard_one_question'),
        sa.ForeignKeyConstraint(['learner_id'], ['learner.id']),
        sa.ForeignKeyConstraint(['run_question_id'], ['runquestion.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('learner_id', 'question_id'),
        sa.UniqueConstraint('run_question_id'),
    )
    op.create_index('ix_reviewcard_learner_due', 'reviewcard', ['learner_id', 'due'], unique=False)
    op.create_table(
        'reviewlog',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('card_id', sa.Integer(), nullable=False),
        sa.Column('learner_id', sa.Integer(), nullable=False),
        sa.Column('answer_id', sa.Integer(), nullable=True),
        sa.Column('rating', sa.Integer(), nullable=False),
        sa.Column('correct', sa.Boolean(), nullable=False),
        sa.Column('seconds', sa.Float(), nullable=True),
        sa.Column('reviewed_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(['answer_id'], ['quizanswer.id']),
        sa.ForeignKeyConstraint(['card_id'], ['reviewcard.id']),
        sa.ForeignKeyConstraint(['learner_id'], ['learner.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('answer_id'),
    )
    op.create_index('ix_reviewlog_card_id', 'reviewlog', ['card_id'], unique=False)
    op.create_index('ix_reviewlog_learner_id', 'reviewlog', ['learner_id'], unique=False)
    # A nullable column without a default: an in-place ALTER on SQLite and PostgreSQL.
    op.add_column('quizanswer', sa.Column('seconds', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('quizanswer') as batch_op:
        batch_op.drop_column('seconds')
    op.drop_index('ix_reviewlog_learner_id', table_name='reviewlog')
    op.drop_index('ix_reviewlog_card_id', table_name='reviewlog')
    op.drop_table('reviewlog')
    op.drop_index('ix_reviewcard_learner_due', table_name='reviewcard')
    op.drop_table('reviewcard')
    op.drop_index('ix_runquestion_run_id', table_name='runquestion')
    op.drop_index('ix_runquestion_learner_id', table_name='runquestion')
    op.drop_table('runquestion')
