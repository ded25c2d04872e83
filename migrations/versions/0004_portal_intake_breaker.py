"""Portal users and API tokens, idempotent intake, trace context, breaker and rate state.

- ``portal_user`` and ``api_token``: who may use the management portal and the JSON API
  (docs/portal.md); passwords and tokens are stored hashed.
- ``message_header.idempotency_key``: the client's ``Idempotency-Key`` (docs/processes.md); one
  message per (target, key), enforced by a unique index, not by a check-then-insert.
- ``message_header.trace_context``: the W3C trace context of the producer (docs/tracing.md).
- ``item_breaker`` and ``item_rate``: an item's circuit breaker and rate-limit bucket, shared
  by every daemon on the database (docs/guards.md).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_Time = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "portal_user",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("password_hash", sa.Text, nullable=False),
        sa.Column("created_at", _Time, nullable=False),
    )
    op.create_table(
        "api_token",
        sa.Column("id", _Id, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("token_hash", sa.String(200), nullable=False),
        sa.Column("created_at", _Time, nullable=False),
        sa.Column("last_used_at", _Time),
    )
    op.create_index("ix_api_token_hash", "api_token", ["token_hash"], unique=True)
    with op.batch_alter_table("message_header") as batch:
        batch.add_column(sa.Column("idempotency_key", sa.String(200)))
        batch.add_column(sa.Column("trace_context", sa.Text))
    op.create_index("ix_message_header_idempotency", "message_header",
                    ["target", "idempotency_key"], unique=True)
    op.create_table(
        "item_breaker",
        sa.Column("config_name", sa.String(200), primary_key=True),
        sa.Column("state", sa.String(10), nullable=False),
        sa.Column("failures", sa.Integer, nullable=False),
        sa.Column("open_until", _Time),
        sa.Column("probe_owner", sa.String(100)),
        sa.Column("updated_at", _Time, nullable=False),
    )
    op.create_table(
        "item_rate",
        sa.Column("config_name", sa.String(200), primary_key=True),
        sa.Column("tokens", sa.Float, nullable=False),
        sa.Column("refilled_at", _Time, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("item_rate")
    op.drop_table("item_breaker")
    op.drop_index("ix_message_header_idempotency", table_name="message_header")
    with op.batch_alter_table("message_header") as batch:
        batch.drop_column("trace_context")
        batch.drop_column("idempotency_key")
    op.drop_index("ix_api_token_hash", table_name="api_token")
    op.drop_table("api_token")
    op.drop_table("portal_user")
