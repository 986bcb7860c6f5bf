"""certificate: the server's keyed check of each row

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 07:40:00

Issue #26: a look-up of a certificate checked its Ed25519 signature, which
capped first look-ups near the speed of a bare verify. Each row now keeps an
HMAC-SHA256 of its payload and signature under a key only the server holds
(``certificates.keys.check_key``); a look-up that finds it right skips the
Ed25519 verify. Rows issued before have none and are checked by their
signature as before, until ``python -m certificates add-checks`` gives them one.
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A nullable column without a default: an in-place ALTER on SQLite and PostgreSQL.
    op.add_column('certificate', sa.Column('check_mac', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True))


def downgrade() -> None:
    op.drop_column('certificate', 'check_mac')  # SQLite 3.35+ drops columns in place
