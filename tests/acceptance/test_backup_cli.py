"""``encore db backup PATH`` while a daemon delivers: the copy is one consistent snapshot
(its integrity check passes, every message enqueued before it is there, every completed
request has its response), a daemon runs on the restored copy and finishes its queue; on
PostgreSQL the command names pg_dump and exits 1."""
from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest
from sqlalchemy import make_url

from engine.store.sql import SqlStore
from tests.acceptance.daemon import RunningDaemon, encore
from tests.conftest import postgres_url
from tests.unit.sample_ops import EchoOperation, Ping
from tests.waiting import wait_until

pytestmark = pytest.mark.cli_in_process  # the daemon is a process; the commands need not be

PRODUCTION = """
[production]
name = "Backup"
database = "{url}"
poll_interval = 0.05

[[items]]
name = "Echo"
class = "tests.acceptance.test_backup_cli:SlowEchoOperation"
pool_size = 2
"""
MESSAGES = 1000  # with SLOW, ten seconds of work: the daemon delivers while the copy is made
SLOW = 0.02  # seconds each message takes
DONE = 120  # seconds a daemon may take to deliver them all on a loaded machine
FINISHED = {"Completed", "Error"}  # a message in flight in the copy is outcome unknown


class SlowEchoOperation(EchoOperation):
    """Echo, taking :data:`SLOW` seconds a message."""

    def on_message(self, request: Ping) -> Ping:
        time.sleep(SLOW)
        return super().on_message(request)


def statuses(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as conn:
        return dict(conn.execute("SELECT status, count(*) FROM message_header "
                                 "WHERE kind = 'request' GROUP BY status").fetchall())


def test_a_backup_taken_while_the_daemon_delivers_is_consistent_and_runs(
        tmp_path: Path) -> None:
    live, copy = tmp_path / "live" / "e.db", tmp_path / "copy" / "e.db"
    live.parent.mkdir()
    copy.parent.mkdir()
    (live.parent / "production.toml").write_text(PRODUCTION.format(url="sqlite:///e.db"))
    encore("db", "upgrade", cwd=live.parent)
    lines = "".join(json.dumps({"text": f"m{i}"}) + "\n" for i in range(MESSAGES))
    encore("send", "Echo", "--many", "-", cwd=live.parent, stdin=lines)
    store = SqlStore(f"sqlite:///{live}")
    try:
        with RunningDaemon(live.parent) as daemon:
            wait_until(lambda: store.get_message(1).status == "Completed", 60, "delivery")
            taken = encore("db", "backup", str(copy), cwd=live.parent)
            after = statuses(live)
            assert daemon.terminate() == 0
    finally:
        store.dispose()
    assert taken.stdout.startswith(f"backup of sqlite:///{live} written to {copy} (")
    assert taken.stdout.rstrip().endswith("integrity check ok)")
    assert after.get("Queued", 0) < MESSAGES  # the daemon was at work while it ran

    with sqlite3.connect(copy) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        (requests,) = conn.execute("SELECT count(*) FROM message_header WHERE kind = 'request'"
                                   ).fetchone()
        (orphans,) = conn.execute(
            "SELECT count(*) FROM message_header r WHERE r.kind = 'request' AND r.status = "
            "'Completed' AND NOT EXISTS (SELECT 1 FROM message_header s WHERE "
            "s.id = r.corresponding_id)").fetchone()
    assert requests == MESSAGES and orphans == 0  # every transaction whole or not at all
    snapshot = statuses(copy)
    assert sum(snapshot.values()) == MESSAGES
    assert snapshot.get("Completed") and snapshot.get("Queued"), snapshot  # taken mid-way

    # restore: a daemon on the copy (its own production file) finishes what it holds
    (copy.parent / "production.toml").write_text(PRODUCTION.format(url="sqlite:///e.db"))
    assert "already at the latest schema" in encore("db", "upgrade", cwd=copy.parent).stdout
    with RunningDaemon(copy.parent) as restored:
        wait_until(lambda: set(statuses(copy)) <= FINISHED, DONE,
                   "the restored copy's queue to be delivered")
        assert restored.terminate() == 0
    final = statuses(copy)
    assert final["Completed"] >= snapshot["Completed"] + snapshot["Queued"], (snapshot, final)


def test_a_backup_refuses_an_existing_path_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "production.toml").write_text(PRODUCTION.format(url="sqlite:///e.db"))
    encore("db", "upgrade", cwd=tmp_path)
    there = tmp_path / "there.db"
    there.write_text("not a database")
    result = encore("db", "backup", str(there), cwd=tmp_path, check=False)
    assert result.returncode == 1
    assert f"error: {there} exists; give the backup a new path" in result.stderr
    assert there.read_text() == "not a database"
    assert sorted(p.name for p in tmp_path.iterdir() if "partial" in p.name) == []


def test_a_postgresql_backup_names_pg_dump_and_exits_1(tmp_path: Path) -> None:
    url = make_url(postgres_url()).set(password="s3cret")
    (tmp_path / "production.toml").write_text(
        PRODUCTION.format(url=url.render_as_string(hide_password=False)))
    result = encore("db", "backup", "encore.dump", cwd=tmp_path, check=False)
    assert result.returncode == 1 and result.stdout == ""
    assert "pg_dump --format=custom --file=encore.dump 'postgresql://" in result.stderr
    assert "s3cret" not in result.stderr
    assert not (tmp_path / "encore.dump").exists()
