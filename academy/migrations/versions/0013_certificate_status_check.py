"""certificate: the server's keyed check of each row's revocation state

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04 17:00:00

Review 2026-12-04 I-3: ``revoked_at``, ``revoked_reason``, ``replaced_by`` and
``show_replacement`` were outside the signature and the row check, so whoever
could write the database could un-revoke a certificate (clear ``revoked_at``)
and it verified as valid. Each row now keeps an HMAC of that state under the
row-check key (``certificates.signing.status_check``), written with every
change of it; a look-up that finds it wrong or missing does not trust the row.

The rows already there are sealed here, as they stand, where the key is at
hand: the row-check key, or, on a server that holds an issuer key but no
row-check key yet, a new one (as the first look-up would make it). Elsewhere
(a database migrated away from its secrets folder) they stay unsealed until
``python -m certificates add-checks`` runs beside the keys.
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A nullable column without a default: an in-place ALTER on SQLite and PostgreSQL.
    op.add_column('certificate', sa.Column('status_mac', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True))
    table = sa.table('certificate', sa.column('id', sa.String()), sa.column('revoked_at', sa.DateTime()),
                     sa.column('revoked_reason', sa.String()), sa.column('replaced_by', sa.String()),
                     sa.column('show_replacement', sa.Boolean()), sa.column('status_mac', sa.String()))
    bind = op.get_bind()
    rows = bind.execute(sa.select(table.c.id, table.c.revoked_at, table.c.revoked_reason, table.c.replaced_by,
                                  table.c.show_replacement)).all()
    if not rows:
        return
    from academy.settings import get_settings
    from certificates import keys, signing

    issuer = (get_settings().secrets_dir / keys.KEYS_SUBDIR / "active").exists()
    key = keys.check_key(create=issuer)
    if key is None:
        return
    for cert_id, revoked_at, reason, replaced_by, show in rows:
        bind.execute(table.update().where(table.c.id == cert_id).values(
            status_mac=signing.status_check(cert_id, revoked_at, reason, replaced_by, bool(show), key)))


def downgrade() -> None:
    op.drop_column('certificate', 'status_mac')  # SQLite 3.35+ drops columns in place
