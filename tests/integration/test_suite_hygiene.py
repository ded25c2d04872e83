"""The suite leaves nothing behind: each worker drops its PostgreSQL database at the end of
its run (tests/conftest.py), and the doorbells' temporary directories go with their last
listener (tests/unit/test_announcements.py)."""
from __future__ import annotations

from sqlalchemy import create_engine, make_url, text

from tests.conftest import drop_database, postgres_url


def database_names(admin_url: str) -> set[str]:
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        names = set(conn.execute(text("SELECT datname FROM pg_database")).scalars())
    admin.dispose()
    return names


def test_a_worker_database_is_dropped_even_with_a_connection_left_open() -> None:
    url = make_url(postgres_url())
    probe = url.set(database=f"{url.database}_probe")  # a database of our own to drop
    admin_url = url.set(database="postgres").render_as_string(False)
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{probe.database}"'))
        conn.execute(text(f'CREATE DATABASE "{probe.database}"'))
    admin.dispose()
    holder = create_engine(probe)  # a connection left open, as by a killed daemon
    held = holder.connect()
    try:
        assert probe.database in database_names(admin_url)
        drop_database(probe.render_as_string(False))
        names = database_names(admin_url)
        assert probe.database not in names and url.database in names  # the run's own stays
    finally:
        held.invalidate()  # its server side went with the database
        holder.dispose()
