"""accounts: atomic sign-in counters and one-time admin tokens

The per-address failure log (``signinfailure``) is replaced by one counter row
per key (address, client, address+client) that is bumped atomically before a
password is checked; admin rights come from a one-time token the server's
operator prints, no longer from a configured e-mail address.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('signincounter',
    sa.Column('key', sqlmodel.sql.sqltypes.AutoString(length=400), nullable=False),
    sa.Column('window_start', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('count', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('key')
    )
    op.create_table('admintoken',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('expires_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('used_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.Column('used_by', sa.Integer(), nullable=True),
    sa.ForeignKeyConstraint(['used_by'], ['learner.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('signinfailure', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_signinfailure_email'))
        batch_op.drop_index(batch_op.f('ix_signinfailure_at'))
    op.drop_table('signinfailure')


def downgrade() -> None:
    op.create_table('signinfailure',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('email', sqlmodel.sql.sqltypes.AutoString(length=254), nullable=False),
    sa.Column('at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('signinfailure', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_signinfailure_at'), ['at'], unique=False)
        batch_op.create_index(batch_op.f('ix_signinfailure_email'), ['email'], unique=False)
    op.drop_table('admintoken')
    op.drop_table('signincounter')
