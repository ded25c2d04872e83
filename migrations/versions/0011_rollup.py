"""The operator's console (docs/portal.md): ``item_minute``, the per-item, per-minute rollup
that each daemon writes from counters it keeps in memory (attempts by outcome, completions,
give-ups, retries, failed attempts and a histogram of attempt times), so that an item's page
reads at most 1,440 small rows per daemon for a day instead of scanning ``message_header``;
and ``daemon.item_states``, what each daemon reports of the items it runs (ready or not,
last attempt's outcome, refused by its last reload), as JSON.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_Time = sa.DateTime(timezone=True)
COUNTS = ("ok", "timeout", "connect_error", "reset", "http_status", "fault", "error",
          "completed", "give_ups", "retries")


def upgrade() -> None:
    op.create_table(
        "item_minute",
        sa.Column("config_name", sa.String(200), nullable=False),
        sa.Column("minute", _Time, nullable=False),
        sa.Column("daemon_id", sa.String(100), nullable=False),
        *(sa.Column(name, sa.Integer(), nullable=False, server_default="0") for name in COUNTS),
        sa.Column("attempt_ms_total", sa.Float(), nullable=False, server_default="0"),
        sa.Column("histogram", sa.Text()),
        sa.PrimaryKeyConstraint("config_name", "minute", "daemon_id"),
    )
    op.create_index("ix_item_minute_minute", "item_minute", ["minute"])
    op.add_column("daemon", sa.Column("item_states", sa.Text()))


def downgrade() -> None:
    with op.batch_alter_table("daemon") as batch:
        batch.drop_column("item_states")
    op.drop_index("ix_item_minute_minute", table_name="item_minute")
    op.drop_table("item_minute")
