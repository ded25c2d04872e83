"""Alembic environment: the engine comes from ``config.attributes`` (see engine.store.migrate)."""
from __future__ import annotations

from alembic import context

from engine.store.models import metadata

config = context.config


def run_migrations_online() -> None:
    engine = config.attributes["engine"]
    with engine.begin() as connection:
        context.configure(connection=connection, target_metadata=metadata,
                          render_as_batch=engine.dialect.name == "sqlite")
        context.run_migrations()


run_migrations_online()
