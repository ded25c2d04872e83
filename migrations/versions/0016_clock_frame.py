"""The clock frame of an SQLite file's daemons (docs/architecture.md, "Which clock decides
what", issue 36): ``clock_frame`` holds, per boot of the host, the wall time at which its
monotonic clock read 0, as the daemons last agreed. A daemon that reads another value has
seen the wall clock step, and carries the stored due times and leases across the step once.

Revision ID: 0016
Revises: 0014
Create Date: 2026-12-03
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "clock_frame",
        sa.Column("boot", sa.String(100), primary_key=True),
        sa.Column("zero_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("clock_frame")
