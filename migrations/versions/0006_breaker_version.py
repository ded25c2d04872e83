"""``item_breaker.version``: one more with every transition, so that a daemon merging what
several of its workers learnt keeps the latest state by the order the database applied the
transitions in (their clock times may come in another order).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("item_breaker") as batch:
        batch.add_column(sa.Column("version", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("item_breaker") as batch:
        batch.drop_column("version")
