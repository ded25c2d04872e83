"""SQLite specifics of the hot path: one-statement intake from several processes at once, a
claim that begins attempts committed without a flush of the write-ahead log, and connections
that switch one new file to WAL at the same moment."""
from __future__ import annotations

import multiprocessing
import sqlite3
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from engine.clock import utcnow
from engine.store.database import _sqlite_pragma
from engine.store.sql import SqlStore

PER_PROCESS = 150
_opened: list[str] = []
_watching = False


def _audit(event: str, args: tuple) -> None:
    if _watching and event == "open" and isinstance(args[0], str):
        _opened.append(args[0])


sys.addaudithook(_audit)  # inert unless a test sets _watching


def _accept_many(url: str) -> list[int]:
    store = SqlStore(url)
    try:
        return [store.accept(target="A", body_class=None, body=f'{{"n": {i}}}').id
                for i in range(PER_PROCESS)]
    finally:
        store.dispose()


def test_processes_accepting_at_once_get_distinct_ids_and_lose_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'intake.db'}"
    store = SqlStore(url)
    store.upgrade()
    spawn = multiprocessing.get_context("spawn")
    with spawn.Pool(3) as pool:
        pending = pool.map_async(_accept_many, [url] * 3)
        mine = _accept_many(url)  # and this process meanwhile
        theirs = [i for ids in pending.get(timeout=120) for i in ids]
    every = mine + theirs
    assert len(set(every)) == len(every) == 4 * PER_PROCESS
    for mid in every:
        row = store.get_message(mid)
        assert row is not None and row.session_id == mid and row.status == "Queued"
    store.dispose()


def test_a_claim_that_begins_attempts_commits_without_waiting_for_the_disk(
        tmp_path: Path) -> None:
    """docs/architecture.md makes durable an accepted message and the start of a non-idempotent
    attempt; attempts begun with a batch claim are an idempotent item's, and a claim lost in a
    machine's crash goes with them (the message is delivered afresh). So the log is flushed
    by neither kind of claim — that would add a disk flush to every synchronous call."""
    global _watching
    db = tmp_path / "claims.db"
    store = SqlStore(f"sqlite:///{db}")
    store.upgrade()
    for _ in range(4):
        store.enqueue(target="A", body_class=None, body="{}")
    now = utcnow()
    _opened.clear()
    _watching = True
    try:
        plain = store.claim("A", owner="d", now=now, lease_seconds=30, limit=2, begin=False)
        flushed_plain = [p for p in _opened if p == f"{db}-wal"]
        begun = store.claim("A", owner="d", now=now, lease_seconds=30, limit=2, begin=True)
        flushed_begun = [p for p in _opened if p == f"{db}-wal"]
    finally:
        _watching = False
    assert [c.begun for c in plain] == [None, None] and flushed_plain == []
    assert all(c.begun is not None for c in begun) and flushed_begun == []
    # what the claim committed is there for every connection
    for c in begun:
        (attempt,) = store.attempts(c.row.id)
        assert attempt.id == c.begun and attempt.ended_at is None
    assert store.claim("A", owner="d", now=now + timedelta(seconds=1), lease_seconds=30,
                       limit=2, begin=True) == []
    store.dispose()


def _locked_file(path: Path) -> sqlite3.Connection:
    """A connection holding ``path``'s exclusive lock: another connection's switch to WAL is
    answered "database is locked" (at once, on a connection without a busy timeout, as
    SQLite answers the loser of two connections that switch a new file together)."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    return holder


def test_a_switch_to_wal_answered_locked_is_tried_again_until_the_lock_goes(
        tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    holder = _locked_file(db)
    other = sqlite3.connect(db, timeout=0, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        other.execute("PRAGMA journal_mode=WAL")  # what a connection met without a retry
    release = threading.Timer(0.3, lambda: holder.execute("COMMIT"))
    release.start()
    began = time.monotonic()
    _sqlite_pragma(other.cursor(), "journal_mode=WAL", wait=30)
    assert time.monotonic() - began >= 0.25  # it waited for the lock, and then switched
    assert other.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    release.join()
    other.close()
    holder.close()


def test_a_switch_to_wal_gives_up_after_its_wait(tmp_path: Path) -> None:
    db = tmp_path / "held.db"
    holder = _locked_file(db)
    other = sqlite3.connect(db, timeout=0, isolation_level=None)
    began = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        _sqlite_pragma(other.cursor(), "journal_mode=WAL", wait=0.2)
    assert 0.1 <= time.monotonic() - began < 5
    other.close()
    holder.execute("ROLLBACK")
    holder.close()
