"""quiz: at most one open graded and one open practice attempt per learner

Revision ID: 0005
Revises: 0004

Two tabs that started an attempt at the same moment could both keep theirs
(the check-then-insert in ``quizzes.store.start_attempt`` raced under
PostgreSQL's READ COMMITTED). A unique partial index now makes the database
refuse the second. Databases from before may already hold such duplicates:
the oldest open attempt of each kind is kept (the one the quiz page resumes)
and the newer ones become ``abandoned``, which no page lists or counts.
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

OPEN = "status = 'in_progress'"


def upgrade() -> None:
    conn = op.get_bind()
    rows = conn.execute(
        sa.text(f"SELECT id, learner_id, practice FROM quizattempt WHERE {OPEN} ORDER BY id")
    ).all()
    seen: set[tuple[int, bool]] = set()
    for attempt_id, learner_id, practice in rows:
        key = (learner_id, bool(practice))
        if key in seen:
            conn.execute(sa.text("UPDATE quizattempt SET status = 'abandoned' WHERE id = :id"),
                         {"id": attempt_id})
        seen.add(key)
    op.create_index(
        "uq_quizattempt_one_open",
        "quizattempt",
        ["learner_id", "practice"],
        unique=True,
        sqlite_where=sa.text(OPEN),
        postgresql_where=sa.text(OPEN),
    )


def downgrade() -> None:
    op.drop_index("uq_quizattempt_one_open", table_name="quizattempt")
