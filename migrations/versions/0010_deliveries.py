"""``message_header.deliveries``: the deliveries of a message that began and did not end
(docs/architecture.md, "Poison messages"). Every claim counts one; a delivery that ends normally and
puts the message back in its queue (a graceful stop, a requeue-mode retry, a held attempt)
takes its own back. A message back in its queue with a count above 0 had deliveries that
never ended — its daemon died, froze past its lease or was killed during it — and after
``max_deliveries`` of those it is ``Suspended``.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("message_header", sa.Column("deliveries", sa.Integer(), nullable=False,
                                              server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("message_header") as batch:
        batch.drop_column("deliveries")
