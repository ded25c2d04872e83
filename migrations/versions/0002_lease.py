"""Scale-out: the lease table (leader and FIFO-item leases of daemons sharing a database).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-06
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_Time = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "lease",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("owner", sa.String(100), nullable=False),
        sa.Column("acquired_at", _Time, nullable=False),
        sa.Column("expires_at", _Time, nullable=False),
    )
    op.create_index("ix_lease_owner", "lease", ["owner"])


def downgrade() -> None:
    op.drop_index("ix_lease_owner", table_name="lease")
    op.drop_table("lease")
