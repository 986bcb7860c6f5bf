"""certificate policy: one active certificate per learner and course

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 04:10:00

Databases from before the policy may hold several active certificates for
one learner and course (F-2: one pass minted 15). The unique index cannot be
built over them, so first, per learner and course, the newest active
certificate is kept and the others are revoked with reason "superseded by
policy", point to the kept one, and get a "superseded" event (actor NULL:
the migration). Certificates tied to nobody (learner_id NULL) are left as
they are. Also adds ``certificate.disqualified`` (F-3).
"""

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

REASON = "superseded by policy"


def _supersede_duplicates() -> None:
    conn = op.get_bind()
    rows = conn.execute(
        sa.text(
            "SELECT id, learner_id, course_id FROM certificate "
            "WHERE revoked_at IS NULL AND learner_id IS NOT NULL "
            "ORDER BY learner_id, course_id, issued_at DESC, id DESC"
        )
    ).all()
    now = datetime.now(UTC)
    kept: dict[tuple[int, str], str] = {}
    for cert_id, learner_id, course_id in rows:
        newest = kept.setdefault((learner_id, course_id), cert_id)
        if newest == cert_id:
            continue
        conn.execute(
            sa.text(
                "UPDATE certificate SET revoked_at = :now, revoked_reason = :why, replaced_by = :by "
                "WHERE id = :id AND revoked_at IS NULL"
            ),
            {"now": now, "why": REASON, "by": newest, "id": cert_id},
        )
        conn.execute(
            sa.text(
                "INSERT INTO certificateevent (certificate_id, action, actor_id, reason, at) "
                "VALUES (:id, 'superseded', NULL, :why, :now)"
            ),
            {"id": cert_id, "why": f"{REASON}: kept {newest}", "now": now},
        )


def upgrade() -> None:
    _supersede_duplicates()
    # Plain ALTERs, not batch mode: SQLite adds a defaulted column and a
    # partial index in place, while a batch table copy would have to drop
    # "certificate", which certificateevent's foreign key forbids.
    op.add_column(
        "certificate",
        sa.Column("disqualified", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.create_index(
        "uq_certificate_one_active",
        "certificate",
        ["learner_id", "course_id"],
        unique=True,
        sqlite_where=sa.text("revoked_at IS NULL"),
        postgresql_where=sa.text("revoked_at IS NULL"),
    )


def downgrade() -> None:
    # The superseded certificates stay revoked: un-revoking would bring back
    # the duplicates the policy removed.
    op.drop_index("uq_certificate_one_active", table_name="certificate")
    op.drop_column("certificate", "disqualified")  # SQLite 3.35+ drops columns in place
