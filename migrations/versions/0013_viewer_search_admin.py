"""The operator's console, Message Viewer and administration (docs/portal.md, issue 23):

- ``message_property``: the search properties of a message (an item's ``search_properties``,
  dotted paths into its JSON body), written in the transaction that accepts it; indexed by
  (name, value_text) and (name, value_num) so that ``prop.PATH=V`` and ranges are index
  lookups among millions of messages, and by message for the purge.
- ``saved_search``: a user's named Message Viewer queries (name → query string).
- ``portal_user.time_zone``: how the user reads times, ``UTC`` or ``local`` (the browser's).

Revision ID: 0013
Revises: 0010 (0011 and 0012 are other changes of the same issue; whoever merges them sets
this to the last of them: the tables here depend on none of theirs)
Create Date: 2026-12-04
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_Time = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "message_property",
        sa.Column("id", _Id, primary_key=True, autoincrement=True),
        sa.Column("message_id", _Id, sa.ForeignKey("message_header.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("value_text", sa.String(200), nullable=False),
        sa.Column("value_num", sa.Float()),
    )
    op.create_index("ix_message_property_text", "message_property",
                    ["name", "value_text", "message_id"])
    op.create_index("ix_message_property_num", "message_property",
                    ["name", "value_num", "message_id"])
    op.create_index("ix_message_property_message", "message_property", ["message_id"])
    op.create_table(
        "saved_search",
        sa.Column("id", _Id, primary_key=True, autoincrement=True),
        sa.Column("user_name", sa.String(200), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("created_at", _Time, nullable=False),
    )
    op.create_index("ix_saved_search_user_name", "saved_search", ["user_name", "name"],
                    unique=True)
    op.add_column("portal_user", sa.Column("time_zone", sa.String(10), nullable=False,
                                           server_default="UTC"))


def downgrade() -> None:
    with op.batch_alter_table("portal_user") as batch:
        batch.drop_column("time_zone")
    op.drop_table("saved_search")
    op.drop_table("message_property")
