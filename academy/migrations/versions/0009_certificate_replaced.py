"""certificate: whether a replaced certificate names its replacement

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 22:20:00

Issue #22: a reissued certificate's Verify page and ``/api/verify/{id}`` say
"replaced by a newer certificate" rather than "revoked". Whether they also
give the newer certificate's ID is the holder's choice on the reissue form
(the new ID's page shows the new name, which may tell of a change of name),
kept here; off for every certificate replaced before.
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ALTER (as in 0002/0003): SQLite adds a column with a constant default in place.
    op.add_column(
        "certificate",
        sa.Column("show_replacement", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    op.drop_column("certificate", "show_replacement")  # SQLite 3.35+ drops columns in place
