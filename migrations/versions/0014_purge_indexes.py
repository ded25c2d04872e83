"""Two indexes of ``message_header`` for the purge (docs/operating.md, "Purging"), so that
each batch is a handful of index lookups whatever the size of the table:

- ``ix_message_header_completed``: finished requests by the time they ended (partial: requests
  only), which the purge walks in (time_completed, id) order from where its last batch
  stopped;
- ``ix_message_header_corresponding``: a message by the one it answers (partial: rows that
  answer one), how a batch finds the responses of its requests. Without it every batch read
  the whole table: a purge of 200,000 requests took 100 s on PostgreSQL.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-10
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# name → (columns, condition)
_INDEXES = {
    "ix_message_header_completed": (["time_completed", "id"], "kind = 'request'"),
    "ix_message_header_corresponding": (["corresponding_id"], "corresponding_id IS NOT NULL"),
}


def upgrade() -> None:
    for name, (columns, condition) in _INDEXES.items():
        op.create_index(name, "message_header", columns,
                        postgresql_where=sa.text(condition), sqlite_where=sa.text(condition))


def downgrade() -> None:
    for name in _INDEXES:
        op.drop_index(name, table_name="message_header")
