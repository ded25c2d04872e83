"""The SQLite file watched (issue 36): a real daemon whose database file is deleted, moved
or replaced under it stops at its next heartbeat with a clear message and a non-zero exit,
rather than write on into a file nobody reads; its Error event goes into the file it still
has open (read there once the moved file is put back). ``encore status`` and ``db upgrade`` say
when a process still holds a file that was deleted or replaced at the path."""
from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.acceptance.daemon import RunningDaemon, encore
from tests.waiting import wait_until

PRODUCTION = """
[production]
name = "Watched"
database = "sqlite:///encore.db"
poll_interval = 0.05
lease_seconds = {lease}

[[items]]
name = "Echo"
class = "tests.unit.sample_ops:EchoOperation"
"""
BEAT_LEASE = 1.5  # seconds: a heartbeat every 0.5 s
QUIET_LEASE = 600  # seconds: a heartbeat every 200 s, not during the test
STOP_BOUND = 60.0  # seconds to notice and stop: generous, for a loaded machine


def _started(tmp_path: Path, lease: float) -> RunningDaemon:
    (tmp_path / "production.toml").write_text(PRODUCTION.format(lease=lease))
    encore("db", "upgrade", cwd=tmp_path)
    daemon = RunningDaemon(tmp_path)
    wait_until(lambda: "started" in daemon.output, STOP_BOUND, "the daemon's start")
    return daemon


def _exit_code(daemon: RunningDaemon) -> int:
    wait_until(lambda: daemon.proc.poll() is not None, STOP_BOUND, "the daemon's stop")
    return daemon.wait(5)


def test_a_daemon_whose_file_is_moved_stops_with_an_error_event_in_that_file(
        tmp_path: Path) -> None:
    with _started(tmp_path, BEAT_LEASE) as daemon:
        os.rename(tmp_path / "encore.db", tmp_path / "moved.db")
        assert _exit_code(daemon) != 0
    said = daemon.output
    assert "error: the SQLite database file " in said and "was deleted or moved while " \
        "this daemon ran; it stopped rather than write on" in said, said
    assert not (tmp_path / "encore.db").exists()  # no new file made at the path
    # Put back, as the message says, the file is whole again with its write-ahead log (which
    # stayed at the path's name) and holds the event.
    os.rename(tmp_path / "moved.db", tmp_path / "encore.db")
    with sqlite3.connect(tmp_path / "encore.db") as conn:
        events = conn.execute("SELECT text FROM event_log WHERE source_class = 'Daemon' AND "
                              "type = 'Error'").fetchall()
    assert len(events) == 1 and "was deleted or moved" in events[0][0], said


@pytest.mark.parametrize("how", [
    "deleted",  # rm encore.db
    "replaced",  # another database renamed over it (a restore, a second db upgrade)
])
def test_a_daemon_whose_file_is_deleted_or_replaced_stops_non_zero(
        tmp_path: Path, how: str) -> None:
    with _started(tmp_path, BEAT_LEASE) as daemon:
        if how == "deleted":
            (tmp_path / "encore.db").unlink()
        else:
            shutil.copy(tmp_path / "encore.db", tmp_path / "other.db")
            os.rename(tmp_path / "other.db", tmp_path / "encore.db")
        assert _exit_code(daemon) != 0
    wanted = "deleted or moved" if how == "deleted" else "replaced by another file"
    assert f"was {wanted} while this daemon ran" in daemon.output, daemon.output
    assert (tmp_path / "encore.db").exists() == (how == "replaced")


def test_status_and_db_upgrade_say_a_daemon_runs_on_a_file_no_longer_at_its_path(
        tmp_path: Path) -> None:
    with _started(tmp_path, QUIET_LEASE) as daemon:
        (tmp_path / "encore.db").unlink()
        upgrade = encore("db", "upgrade", cwd=tmp_path)
        expected = (f"warning: process {daemon.proc.pid} still has open a database file that "
                    f"was at {(tmp_path / 'encore.db').resolve()} and has been deleted or "
                    "replaced")
        assert upgrade.stderr.startswith(expected), upgrade.stderr
        status = encore("status", cwd=tmp_path)
        assert status.stderr.startswith(expected), status.stderr
        daemon.terminate()  # its exit status is the other tests' matter
    quiet = encore("status", cwd=tmp_path)
    assert "warning" not in quiet.stderr
