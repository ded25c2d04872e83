"""The SQLite database and its WAL and shared-memory files are created readable by their
owner only (docs/security.md): they hold message bodies and event texts."""
from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.daemon import RunningDaemon, encore
from tests.waiting import wait_until

PRODUCTION = """
[production]
name = "Modes"
database = "sqlite:///{path}"
poll_interval = 0.05

[[items]]
name = "Echo"
class = "tests.unit.sample_ops:EchoOperation"
"""


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that lets every file be read and written by anyone (inherited by the
    commands the test runs): the database's mode must not depend on the umask."""
    previous = os.umask(0)
    yield
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_database_and_its_wal_files_are_created_owner_only(tmp_path: Path,
                                                               open_umask: None) -> None:
    db = tmp_path / "e.db"
    (tmp_path / "production.toml").write_text(PRODUCTION.format(path=db))
    encore("db", "upgrade", cwd=tmp_path)
    assert oct(mode(db)) == oct(0o600)
    with RunningDaemon(tmp_path) as daemon:
        reply = encore("send", "Echo", "--body", '{"text": "hi"}', "--wait", "20", cwd=tmp_path)
        assert '"HI"' in reply.stdout
        wal, shm = Path(f"{db}-wal"), Path(f"{db}-shm")
        wait_until(lambda: wal.exists() and shm.exists(), 10, "the daemon's WAL files")
        assert [oct(mode(p)) for p in (db, wal, shm)] == [oct(0o600)] * 3
        assert daemon.terminate() == 0


def test_an_existing_database_keeps_the_mode_its_owner_gave_it(tmp_path: Path,
                                                              open_umask: None) -> None:
    db = tmp_path / "e.db"
    (tmp_path / "production.toml").write_text(PRODUCTION.format(path=db))
    db.touch(mode=0o640)  # e.g. readable by a backup group, on purpose
    db.chmod(0o640)
    encore("db", "upgrade", cwd=tmp_path)
    assert oct(mode(db)) == oct(0o640)
