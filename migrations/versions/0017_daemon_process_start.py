"""``daemon.process_start``: the start time of a daemon's process, in clock ticks after the
boot (``/proc/PID/stat``), so that a daemon of the same host tells a recycled PID from the
daemon that registered it (docs/architecture.md, "Fencing"; issue 37). NULL for a daemon
registered before: its PID alone is judged, gone or a zombie.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("daemon", sa.Column("process_start", sa.BigInteger()))


def downgrade() -> None:
    with op.batch_alter_table("daemon") as batch:
        batch.drop_column("process_start")
