"""Idempotency keys belong to their caller; logins counted in the database; sessions that
end at logout (docs/security.md).

- ``message_header.idempotency_caller``: who sent the key — an API token's holder
  (``api:<name>``, the message's source) or ``''`` for the production itself (the command
  line, services, business processes). The unique index on (target, key) becomes
  (target, caller, key): the same key from another caller is another message.
- ``login_guess``: login attempts per user name and per client address in the current window,
  counted before the password is checked, so that the limit holds for racing attempts on any
  number of portals.
- ``portal_user.session_generation``: grows by one at each logout; a session cookie names the
  generation it was issued in and is refused once it has grown.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_INDEX = "ix_message_header_idempotency"
_WHERE = {"postgresql_where": sa.text("idempotency_key IS NOT NULL"),
          "sqlite_where": sa.text("idempotency_key IS NOT NULL")}


def upgrade() -> None:
    op.add_column("message_header", sa.Column("idempotency_caller", sa.String(200),
                                              nullable=False, server_default=""))
    # the keys API callers sent so far are theirs (the old index kept them unique already)
    op.execute("UPDATE message_header SET idempotency_caller = source "
               "WHERE idempotency_key IS NOT NULL AND substr(source, 1, 4) = 'api:'")
    op.drop_index(_INDEX, table_name="message_header")
    op.create_index(_INDEX, "message_header",
                    ["target", "idempotency_caller", "idempotency_key"], unique=True, **_WHERE)
    op.create_table(
        "login_guess",
        sa.Column("key", sa.String(300), primary_key=True),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("guesses", sa.Integer, nullable=False),
    )
    op.add_column("portal_user", sa.Column("session_generation", sa.Integer(), nullable=False,
                                           server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("portal_user") as batch:
        batch.drop_column("session_generation")
    op.drop_table("login_guess")
    op.drop_index(_INDEX, table_name="message_header")
    # one key per target again: the oldest message keeps it
    op.execute("UPDATE message_header SET idempotency_key = NULL "
               "WHERE idempotency_key IS NOT NULL AND id NOT IN ("
               "SELECT min(id) FROM message_header WHERE idempotency_key IS NOT NULL "
               "GROUP BY target, idempotency_key)")
    op.create_index(_INDEX, "message_header", ["target", "idempotency_key"], unique=True,
                    **_WHERE)
    with op.batch_alter_table("message_header") as batch:
        batch.drop_column("idempotency_caller")
