"""Alembic environment and revisions for Encore's tables (run with ``encore db upgrade``)."""
from __future__ import annotations

# The newest revision in versions/. The schema check of every command compares the database
# with it without importing Alembic (engine/store/migrate.py); when they differ Alembic
# decides. Bump it with each new revision: tests/integration/test_migrations.py checks it.
HEAD = "0017"
