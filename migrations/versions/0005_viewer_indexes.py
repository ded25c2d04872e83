"""Indexes for the Message Viewer's filters on a large table: by status (a rare or empty
status is found by an index probe, not a scan of the queue index) and by creation time
(a time window far back).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""
from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_message_header_status", "message_header", ["status", "id"])
    op.create_index("ix_message_header_created", "message_header", ["time_created"])


def downgrade() -> None:
    op.drop_index("ix_message_header_created", table_name="message_header")
    op.drop_index("ix_message_header_status", table_name="message_header")
