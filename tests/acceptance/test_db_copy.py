"""``encore db copy``: a production outgrows SQLite. Its whole database — completed, queued,
retrying and suspended messages, attempts, events, users, tokens, saved searches, counters —
goes to PostgreSQL with its ids and times, every table's rows counted on both sides; a daemon
on PostgreSQL carries on (the queued delivered, the retrying one still bound by its first
attempt's failure timeout, new messages given new ids); and back to SQLite. A copy is refused
while a daemon is alive on the source, and into a database that holds rows."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

import migrations
from engine.clock import as_utc, utcnow
from engine.store import migrate, searches
from engine.store.copy import row_counts, tables
from engine.store.models import message_attempt, message_header
from engine.store.sql import SqlStore
from tests.acceptance.daemon import RunningDaemon, encore
from tests.conftest import postgres_url, reset_postgres
from tests.portal_support import PASSWORD
from tests.servers import HttpTestServer, respond
from tests.waiting import wait_until

pytestmark = pytest.mark.cli_in_process

FAILURE_TIMEOUT = 20  # seconds the retrying message may retry from its first attempt
PRODUCTION = f"""
[production]
name = "Shop"
database = "sqlite:///shop.db"
poll_interval = 0.05

[[items]]
name = "Orders"
class = "operations.http:HttpOperation"
[items.settings]
url = "{{url}}"

[[items]]
name = "Flaky"
class = "operations.http:HttpOperation"
[items.settings]
url = "{{url}}"
retry_mode = "requeue"
retry_interval = 1
failure_timeout = {FAILURE_TIMEOUT}
"""
OK = json.dumps({"method": "POST", "path": "/ok"})
DOWN = json.dumps({"method": "POST", "path": "/down"})


def _send(cwd: Path, target: str, body: str, env: dict[str, str] | None = None) -> int:
    return int(encore("send", target, "--body", body, cwd=cwd, env=env).stdout)


def _status(store: SqlStore, message_id: int) -> str | None:
    row = store.get_message(message_id)
    return row.status if row is not None else None


def _messages(store: SqlStore) -> list[dict[str, Any]]:
    """Every message as stored, its times as aware UTC."""
    with store.engine.connect() as conn:
        rows = conn.execute(select(message_header).order_by(message_header.c.id)).all()
    return [{k: as_utc(v) if hasattr(v, "tzinfo") else v for k, v in r._mapping.items()}
            for r in rows]


def _attempts(store: SqlStore, message_id: int) -> list[int]:
    with store.engine.connect() as conn:
        return list(conn.execute(select(message_attempt.c.attempt).where(
            message_attempt.c.message_id == message_id).order_by(message_attempt.c.id)
        ).scalars())


def _seed(tmp_path: Path, server: HttpTestServer) -> tuple[SqlStore, dict[str, int]]:
    """A SQLite production with completed, retrying, queued and suspended messages, a user,
    a token and a saved search; its daemon stopped."""
    (tmp_path / "production.toml").write_text(PRODUCTION.format(url=server.url))
    encore("db", "upgrade", cwd=tmp_path)
    encore("user", "add", "ops", "--role", "operator", "--password-stdin", cwd=tmp_path,
           stdin=PASSWORD + "\n")
    encore("token", "create", "bot", "--role", "sender", cwd=tmp_path)
    store = SqlStore(f"sqlite:///{tmp_path / 'shop.db'}")
    searches.save_search(store, "ops", "errors", "status=Error", now=utcnow())
    done = [_send(tmp_path, "Orders", OK) for _ in range(3)]
    ids = {"retrying": _send(tmp_path, "Flaky", DOWN)}
    with RunningDaemon(tmp_path) as daemon:
        for message_id in done:
            wait_until(lambda m=message_id: _status(store, m) == "Completed", 30, "Orders")
        wait_until(lambda: len(_attempts(store, ids["retrying"])) >= 2, 30, "two failures")
        refused = encore("db", "copy", "--to", f"sqlite:///{tmp_path / 'never.db'}",
                         cwd=tmp_path, check=False)
        assert refused.returncode == 1, refused.stdout
        assert "daemons are running on" in refused.stderr and "stop them" in refused.stderr
        assert not (tmp_path / "never.db").exists()  # refused before the target was opened
        assert daemon.terminate() == 0
    ids["queued"] = _send(tmp_path, "Orders", OK)
    ids["queued2"] = _send(tmp_path, "Orders", OK)
    ids["suspended"] = _send(tmp_path, "Orders", OK)
    encore("suspend", str(ids["suspended"]), cwd=tmp_path)
    return store, ids


def _same_rows(source: SqlStore, target: SqlStore) -> None:
    counts = row_counts(source.engine)
    assert counts == row_counts(target.engine)
    for table in ("message_header", "message_attempt", "event_log", "portal_user",
                  "api_token", "saved_search", "item_minute"):
        assert counts[table] > 0, f"{table} has no rows to copy"
    assert _messages(source) == _messages(target)


@pytest.mark.timeout(360)  # a dozen commands and two daemons, on a loaded machine
def test_a_production_moves_to_postgresql_and_back_and_carries_on(tmp_path: Path) -> None:
    pg = postgres_url()
    reset_postgres(pg)
    routes = {"POST /ok": respond(200, "{}", content_type="application/json"),
              "POST /down": respond(503, "down")}
    with HttpTestServer(routes) as server:
        sqlite, ids = _seed(tmp_path, server)
        before = {m["id"]: m for m in _messages(sqlite)}
        assert [before[ids[k]]["status"] for k in ("retrying", "queued", "suspended")] == [
            "Queued", "Queued", "Suspended"]
        retried = _attempts(sqlite, ids["retrying"])

        copied = encore("db", "copy", "--to", pg, "--batch", "2", cwd=tmp_path)
        for table in tables():
            n = row_counts(sqlite.engine)[table.name]
            assert f"{table.name}: {n} rows, {n} on the target" in copied.stdout
        assert "rows" in copied.stderr  # the progress bar
        postgres = SqlStore(pg)
        assert migrate.current_revision(postgres.engine) == migrations.HEAD  # upgraded first
        _same_rows(sqlite, postgres)

        again = encore("db", "copy", "--to", pg, cwd=tmp_path, check=False)
        assert again.returncode == 1 and "already holds rows: " in again.stderr
        assert row_counts(postgres.engine) == row_counts(sqlite.engine)

        on_pg = {"ENCORE_DATABASE_URL": pg}
        with RunningDaemon(tmp_path, env=on_pg) as daemon:
            for key in ("queued", "queued2"):
                wait_until(lambda k=key: _status(postgres, ids[k]) == "Completed", 60,
                           f"the {key} message to be delivered on PostgreSQL")
            new = _send(tmp_path, "Orders", OK, env=on_pg)
            assert new > max(before)
            wait_until(lambda: _status(postgres, ids["retrying"]) == "Error",
                       FAILURE_TIMEOUT + 60, "the retrying message to run out of time")
            assert daemon.terminate() == 0
        retrying = postgres.get_message(ids["retrying"])
        assert retrying is not None and retrying.first_attempt_at is not None
        assert as_utc(retrying.first_attempt_at) == before[ids["retrying"]]["first_attempt_at"]
        attempts = _attempts(postgres, ids["retrying"])
        assert attempts[:len(retried)] == retried and attempts == sorted(attempts)
        assert _status(postgres, ids["suspended"]) == "Suspended"

        back = f"sqlite:///{tmp_path / 'back.db'}"
        encore("db", "copy", "--to", back, cwd=tmp_path, env=on_pg)
        returned = SqlStore(back)
        _same_rows(postgres, returned)
        newest = _send(tmp_path, "Orders", OK, env={"ENCORE_DATABASE_URL": back})
        assert newest > new
        for store in (sqlite, postgres, returned):
            store.dispose()


@pytest.mark.parametrize("where", ["sqlite", "postgresql"])
def test_a_copy_into_a_database_with_rows_is_refused_and_changes_nothing(
        tmp_path: Path, where: str) -> None:
    target = f"sqlite:///{tmp_path / 'target.db'}" if where == "sqlite" else postgres_url()
    if where == "postgresql":
        reset_postgres(target)
    (tmp_path / "production.toml").write_text(PRODUCTION.format(url="http://127.0.0.1:9"))
    encore("db", "upgrade", cwd=tmp_path)
    _send(tmp_path, "Orders", OK)
    env = {"ENCORE_DATABASE_URL": target}
    encore("db", "upgrade", cwd=tmp_path, env=env)
    encore("user", "add", "x", "--role", "viewer", "--password-stdin", cwd=tmp_path, env=env,
           stdin=PASSWORD + "\n")
    refused = encore("db", "copy", "--to", target, cwd=tmp_path, check=False)
    assert refused.returncode == 1
    assert "the target database already holds rows: portal_user (1)" in refused.stderr
    store = SqlStore(target)
    assert row_counts(store.engine)["message_header"] == 0
    store.dispose()
