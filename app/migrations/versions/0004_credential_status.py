"""Open Badges 3.0 credential and status-list index per certificate

Revision ID: 0004
Revises: 0001
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


revision = '0004'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('certificate', schema=None) as batch_op:
        batch_op.add_column(sa.Column('status_index', sa.Integer(), nullable=True))
        batch_op.add_column(
            sa.Column('credential_json', sqlmodel.sql.sqltypes.AutoString(), nullable=True)
        )
        batch_op.add_column(
            sa.Column('credential_jwt', sqlmodel.sql.sqltypes.AutoString(), nullable=True)
        )
        batch_op.create_unique_constraint('uq_certificate_status_index', ['status_index'])


def downgrade() -> None:
    with op.batch_alter_table('certificate', schema=None) as batch_op:
        batch_op.drop_constraint('uq_certificate_status_index', type_='unique')
        batch_op.drop_column('credential_jwt')
        batch_op.drop_column('credential_json')
        batch_op.drop_column('status_index')
