"""Fencing and daemon identity: ``message_header.claim_token``, ``daemon.pid_namespace``.

``claim_token`` grows by one with every claim of a message; every write a worker makes about
a claimed message is conditional on the token it claimed with, so a daemon that lost its claim
(frozen past its lease) can write nothing more about it (docs/architecture.md, fencing).
``pid_namespace`` tells whether a daemon registered from this host name runs in this process
namespace, the only case in which its PID can be checked.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("message_header") as batch:
        batch.add_column(sa.Column("claim_token", sa.BigInteger().with_variant(sa.Integer(),
                                                                               "sqlite"),
                                   nullable=False, server_default="0"))
    with op.batch_alter_table("daemon") as batch:
        batch.add_column(sa.Column("pid_namespace", sa.String(200)))


def downgrade() -> None:
    with op.batch_alter_table("daemon") as batch:
        batch.drop_column("pid_namespace")
    with op.batch_alter_table("message_header") as batch:
        batch.drop_column("claim_token")
