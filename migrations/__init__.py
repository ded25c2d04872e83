"""Alembic environment and revisions for Encore's tables (run with ``encore db upgrade``)."""
