"""Three indexes of ``message_header`` made partial, so that the rows they cannot find are
not in them: claims by daemon (``claimed_by IS NOT NULL``), parked messages by due time
(``next_attempt_at IS NOT NULL``) and idempotency keys (``idempotency_key IS NOT NULL``).
A row updated out of their reach — a completion clears the claim and the due time, most
messages carry no key — then costs no entry in them: on PostgreSQL every update of a claim
or a completion writes a new entry into each index whose condition the new row meets.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# name → (columns, condition, unique)
_INDEXES = {
    "ix_message_header_claim": (["claimed_by"], "claimed_by IS NOT NULL", False),
    "ix_message_header_due": (["target", "status", "next_attempt_at"],
                              "next_attempt_at IS NOT NULL", False),
    "ix_message_header_idempotency": (["target", "idempotency_key"],
                                      "idempotency_key IS NOT NULL", True),
}


def _create(name: str, partial: bool) -> None:
    columns, condition, unique = _INDEXES[name]
    where = {"postgresql_where": sa.text(condition), "sqlite_where": sa.text(condition)}
    op.create_index(name, "message_header", columns, unique=unique, **(where if partial else {}))


def upgrade() -> None:
    for name in _INDEXES:
        op.drop_index(name, table_name="message_header")
        _create(name, partial=True)


def downgrade() -> None:
    for name in _INDEXES:
        op.drop_index(name, table_name="message_header")
        _create(name, partial=False)
