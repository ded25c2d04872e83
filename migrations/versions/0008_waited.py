"""``message_header.waited``: someone waits for the message to end, so the transaction that
ends it announces it (NOTIFY ``encore_done`` on PostgreSQL, the doorbell on SQLite) — only
those messages, so bulk traffic pays nothing for waiters.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("message_header", sa.Column("waited", sa.Boolean(), nullable=False,
                                              server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("message_header") as batch:
        batch.drop_column("waited")
