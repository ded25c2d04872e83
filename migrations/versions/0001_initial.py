"""Initial schema: event_log, message_header, message_attempt, item_state, daemon.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_Time = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "event_log",
        sa.Column("id", _Id, primary_key=True, autoincrement=True),
        sa.Column("time_logged", _Time, nullable=False),
        sa.Column("type", sa.String(10), nullable=False),
        sa.Column("config_name", sa.String(200)),
        sa.Column("job", sa.String(200)),
        sa.Column("message_id", _Id),
        sa.Column("session_id", _Id),
        sa.Column("source_class", sa.String(200)),
        sa.Column("source_method", sa.String(200)),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("stack", sa.Text),
    )
    op.create_index("ix_event_log_message", "event_log", ["message_id"])
    op.create_index("ix_event_log_config_time", "event_log", ["config_name", "time_logged"])
    op.create_table(
        "message_header",
        sa.Column("id", _Id, primary_key=True, autoincrement=True),
        sa.Column("session_id", _Id),
        sa.Column("source", sa.String(200)),
        sa.Column("target", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(10), nullable=False),
        sa.Column("body_class", sa.String(300)),
        sa.Column("body", sa.Text),
        sa.Column("status", sa.String(12), nullable=False),
        sa.Column("is_error", sa.Boolean, nullable=False),
        sa.Column("error_text", sa.Text),
        sa.Column("time_created", _Time, nullable=False),
        sa.Column("time_processed", _Time),
        sa.Column("time_completed", _Time),
        sa.Column("corresponding_id", _Id),
        sa.Column("retry_needed", sa.Boolean, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("first_attempt_at", _Time),
        sa.Column("next_attempt_at", _Time),
        sa.Column("claimed_by", sa.String(100)),
        sa.Column("lease_expires_at", _Time),
    )
    op.create_index("ix_message_header_queue", "message_header", ["target", "status", "id"])
    op.create_index("ix_message_header_due", "message_header",
                    ["target", "status", "next_attempt_at"])
    op.create_index("ix_message_header_claim", "message_header", ["claimed_by"])
    op.create_index("ix_message_header_session", "message_header", ["session_id"])
    op.create_table(
        "message_attempt",
        sa.Column("id", _Id, primary_key=True, autoincrement=True),
        sa.Column("message_id", _Id,
                  sa.ForeignKey("message_header.id", ondelete="CASCADE"), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("server", sa.String(500)),
        sa.Column("started_at", _Time, nullable=False),
        sa.Column("ended_at", _Time),
        sa.Column("outcome", sa.String(20)),
        sa.Column("status_code", sa.Integer),
        sa.Column("error_text", sa.Text),
    )
    op.create_index("ix_message_attempt_message", "message_attempt", ["message_id", "attempt"])
    op.create_table(
        "item_state",
        sa.Column("config_name", sa.String(200), primary_key=True),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("updated_at", _Time, nullable=False),
    )
    op.create_table(
        "daemon",
        sa.Column("id", sa.String(100), primary_key=True),
        sa.Column("host", sa.String(200), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("production", sa.String(200)),
        sa.Column("started_at", _Time, nullable=False),
        sa.Column("heartbeat_at", _Time, nullable=False),
        sa.Column("items", sa.Text),
    )


def downgrade() -> None:
    for table in ("daemon", "item_state", "message_attempt", "message_header", "event_log"):
        op.drop_table(table)
