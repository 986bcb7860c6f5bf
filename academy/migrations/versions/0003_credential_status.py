"""Open Badges 3.0 credential and status-list index per certificate

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 04:20:00

``status_index`` is the certificate's bit in the public Bitstring Status List
(unique: two certificates never share a bit); ``credential_json`` and
``credential_jwt`` keep the signed OpenBadgeCredential in its two forms, made
once because its e-mail salt is random.
Both nullable: older rows get them on first request.
"""

from alembic import op
import sqlalchemy as sa
import sqlmodel


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ALTERs, not batch mode (as in 0002): SQLite adds nullable columns and
    # an index in place, while a batch copy would have to drop ``certificate``,
    # which other tables' foreign keys forbid.
    op.add_column('certificate', sa.Column('status_index', sa.Integer(), nullable=True))
    op.add_column(
        'certificate', sa.Column('credential_json', sqlmodel.sql.sqltypes.AutoString(), nullable=True)
    )
    op.add_column(
        'certificate', sa.Column('credential_jwt', sqlmodel.sql.sqltypes.AutoString(), nullable=True)
    )
    op.create_index('ix_certificate_status_index', 'certificate', ['status_index'], unique=True)


def downgrade() -> None:
    op.drop_index('ix_certificate_status_index', table_name='certificate')
    op.drop_column('certificate', 'credential_jwt')  # SQLite 3.35+ drops columns in place
    op.drop_column('certificate', 'credential_json')
    op.drop_column('certificate', 'status_index')
