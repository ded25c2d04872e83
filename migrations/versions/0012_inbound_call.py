"""``inbound_call``: what an inbound service was asked and answered (docs/inbound.md) — the
caller's address, the user or token it authenticated as, when the request came and when
the answer went — so that the Visual Trace shows the caller as the session's first
participant and the answer as its last arrow.

Revision ID: 0012
Revises: 0010 (0011 is another helper's: when both are merged, this one revises 0011)
Create Date: 2026-12-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "inbound_call",
        sa.Column("id", _Id, primary_key=True, autoincrement=True),
        sa.Column("message_id", _Id, nullable=False),
        sa.Column("service", sa.String(200), nullable=False),
        sa.Column("caller", sa.String(200), nullable=False),
        sa.Column("principal", sa.String(200)),
        sa.Column("request", sa.String(200), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("answered_at", sa.DateTime(timezone=True)),
        sa.Column("answer", sa.String(200)),
    )
    op.create_index("ix_inbound_call_message", "inbound_call", ["message_id"])


def downgrade() -> None:
    op.drop_index("ix_inbound_call_message", table_name="inbound_call")
    op.drop_table("inbound_call")
