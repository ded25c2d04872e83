"""A pool's workers commit their own chunks' successes on a server database (OwnCommits).

On PostgreSQL each worker of a ``pool_size > 1`` item commits the successes of a chunk of
several messages itself, on a connection of its own, side by side with the other workers'
commits and the dispatcher's claims; on SQLite, one writer at a time, the dispatcher's
group commit keeps them all. Real daemons in this process, real databases; the store's
``complete_many`` is watched (not replaced) to see which thread committed what.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from engine import BusinessOperation
from engine.client import send_messages
from engine.clock import VirtualClock, utcnow
from engine.config.production import parse_production
from engine.delivery.commits import FLUSH_WINDOW, OwnCommits
from engine.delivery.dispatch import Dispatcher, DispatchSettings
from engine.errors import StoreError
from engine.runtime.daemon import Daemon
from engine.store.hotpath import Completion
from engine.store.sql import SqlStore
from tests.conftest import postgres_url
from tests.waiting import wait_until

COUNT = 600  # messages drained
PATIENCE = 60.0  # seconds a drain may take at most


class QuickOperation(BusinessOperation):
    """Answers at once: a fast item, whose chunks hold many messages."""

    def on_message(self, request: Any) -> Any:
        return {"ok": True}


def statuses(store: SqlStore) -> dict[str, int]:
    with store.engine.connect() as conn:
        return dict(conn.execute(text(
            "SELECT status, count(*) FROM message_header WHERE target = 'Quick' "
            "AND kind = 'request' GROUP BY status")).all())


def attempts_not_ok(store: SqlStore) -> int:
    """Attempts still open, or ended otherwise than ok."""
    with store.engine.connect() as conn:
        return int(conn.execute(text(
            "SELECT count(*) FROM message_attempt WHERE ended_at IS NULL "
            "OR outcome IS NULL OR outcome <> 'ok'")).scalar_one())


class SteadyOperation(BusinessOperation):
    """Answers after a millisecond: chunks of a few messages, a drain that lasts."""

    def on_message(self, request: Any) -> Any:
        time.sleep(0.001)
        return {"ok": True}


class HeldOperation(BusinessOperation):
    """Answers at once, but message ``n = HELD`` waits for ``release``: far slower than
    the item's usual, in the middle of a chunk of many."""

    entered = threading.Event()
    release = threading.Event()

    def on_message(self, request: Any) -> Any:
        if request.to_dict()["n"] == HELD:
            self.entered.set()
            self.release.wait(PATIENCE)
        return {"ok": True}


HELD = 300


def production(url: str, pool_size: int, cls: str = "QuickOperation") -> Any:
    return parse_production(
        f'[production]\nname = "Own"\ndatabase = "{url}"\npoll_interval = 0.05\n'
        f'shutdown_timeout = {PATIENCE}\n'
        f'[[items]]\nname = "Quick"\nclass = "{__name__}:{cls}"\n'
        f'pool_size = {pool_size}\n', env={})


@contextmanager
def watched_commits(store: SqlStore, fail_first: type[Exception] | None = None
                    ) -> Iterator[list[tuple[str, int]]]:
    """(thread name, successes) of every ``complete_many`` of the store; ``fail_first``:
    the first one made on a worker's thread raises that instead."""
    seen: list[tuple[str, int]] = []
    real = store.complete_many
    failed: list[bool] = []

    def complete_many(completions: list[Completion], **kw: Any) -> list[int]:
        name = threading.current_thread().name
        if fail_first and not failed and not name.endswith("-dispatcher"):
            failed.append(True)
            raise fail_first("the database went away for a moment")
        seen.append((name, len(completions)))
        return real(completions, **kw)
    store.complete_many = complete_many  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        del store.complete_many


def drain(store: SqlStore, url: str, pool_size: int, *,
          fail_first: type[Exception] | None = None) -> list[tuple[str, int]]:
    """Queue COUNT messages with the item off, then let a daemon drain them."""
    store.set_item_enabled("Quick", False, reason="fill first", now=utcnow())
    prod = production(url, pool_size)
    send_messages(store, prod, "Quick", [{"n": n} for n in range(COUNT)])
    with watched_commits(store, fail_first) as seen:
        daemon = Daemon(prod, store=store, env={})
        daemon.start()
        try:
            store.set_item_enabled("Quick", True, reason=None, now=utcnow())
            wait_until(lambda: statuses(store).get("Completed", 0) == COUNT,
                       PATIENCE, "every message Completed")
        finally:
            daemon.stop()
    return seen


def by_workers(seen: list[tuple[str, int]]) -> list[int]:
    return [n for name, n in seen if name.startswith("Quick-") and name != "Quick-dispatcher"]


def test_a_pools_workers_commit_their_chunks_on_postgresql_and_not_on_sqlite(
        store: SqlStore, database_url: str) -> None:
    seen = drain(store, database_url, 4)
    workers = by_workers(seen)
    if database_url.startswith("postgresql"):
        # not the first ones, claimed before the item's speed was known (in chunks of one
        # message each, whose successes the group commit gathers: on a loaded machine, where
        # deliveries look slow for longer, a third of them or more)
        assert sum(workers) >= COUNT // 3
        assert max(workers) > 10  # a chunk's successes in one transaction
    else:
        assert workers == []  # the dispatcher's group commit, with its claims
    assert statuses(store) == {"Completed": COUNT}


def test_a_fifo_item_commits_each_success_before_its_next_message_is_sent(
        store: SqlStore, database_url: str) -> None:
    """A pool of one with blocking retries is FIFO: a success left for the group commit and
    lost with its daemon would be sent again after the message behind it, so its worker
    commits each one itself, at once (on PostgreSQL durably), before it sends the next."""
    seen = drain(store, database_url, 1)
    assert by_workers(seen) == [1] * COUNT
    assert statuses(store) == {"Completed": COUNT}


@pytest.mark.postgres
@pytest.mark.parametrize("error", [StoreError, RuntimeError])
def test_a_workers_failed_commit_leaves_its_successes_to_the_group_commit(
        pg_store: SqlStore, caplog: pytest.LogCaptureFixture, error: type[Exception]) -> None:
    """A database error, or any other (the worker must not die of it, nor leave a stop
    waiting for successes nobody will commit)."""
    drain(pg_store, postgres_url(), 4, fail_first=error)  # waits for all Completed
    assert "are recorded with the next group commit" in caplog.text
    assert "the database went away" in caplog.text
    assert statuses(pg_store) == {"Completed": COUNT}
    assert attempts_not_ok(pg_store) == 0  # each attempt ended once, ok


@pytest.mark.postgres
def test_a_stop_commits_every_success_its_workers_kept(pg_store: SqlStore) -> None:
    """A graceful stop in the middle of a drain: each message is Completed, its attempt
    ended ok, or back in its queue with no attempt counted — none is left Delivered with
    its success uncommitted."""
    url = postgres_url()
    pg_store.set_item_enabled("Quick", False, reason="fill first", now=utcnow())
    prod = production(url, 4, "SteadyOperation")
    send_messages(pg_store, prod, "Quick", [{"n": n} for n in range(COUNT * 5)])
    with watched_commits(pg_store) as seen:
        daemon = Daemon(prod, store=pg_store, env={})
        daemon.start()
        try:
            pg_store.set_item_enabled("Quick", True, reason=None, now=utcnow())
            wait_until(lambda: statuses(pg_store).get("Completed", 0) >= COUNT // 2,
                       PATIENCE, "a few hundred messages Completed")
        finally:
            daemon.stop()
    assert by_workers(seen)  # the workers kept successes of their own
    left = statuses(pg_store)
    assert set(left) == {"Completed", "Queued"}, left
    assert attempts_not_ok(pg_store) == 0


def test_a_slow_message_at_the_stop_leaves_the_rest_of_its_chunk_put_back(
        store: SqlStore, database_url: str) -> None:
    """The rest of a chunk behind a slow message goes to the other workers — unless the
    stop came meanwhile: its last word to the workers is queued already, and they would
    never see it (the stop waited for those messages until its timeout, their attempts then
    left open). The worker puts them back itself, and the stop ends at once."""
    HeldOperation.entered.clear()
    HeldOperation.release.clear()
    store.set_item_enabled("Quick", False, reason="fill first", now=utcnow())
    prod = production(database_url, 2, "HeldOperation")
    send_messages(store, prod, "Quick", [{"n": n} for n in range(COUNT)])
    daemon = Daemon(prod, store=store, env={})
    daemon.start()
    stopped = threading.Event()
    try:
        store.set_item_enabled("Quick", True, reason=None, now=utcnow())
        assert HeldOperation.entered.wait(PATIENCE)
        threading.Thread(target=lambda: (daemon.stop(), stopped.set()), daemon=True).start()
        # the stop is under way: the workers were given their last word
        dispatcher = daemon.runners["Quick"].dispatcher
        wait_until(lambda: dispatcher._closed, PATIENCE, "the workers told to stop")
    finally:
        HeldOperation.release.set()
    assert stopped.wait(PATIENCE / 3), "the stop waits for messages no worker will see"
    assert set(statuses(store)) <= {"Completed", "Queued"}
    assert attempts_not_ok(store) == 0


def test_a_kept_success_waits_no_longer_than_the_flush_window(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'encore.db'}")  # nothing is committed here
    store.upgrade()
    clock = VirtualClock()
    dispatcher = Dispatcher(DispatchSettings(target="Quick", owner="d1", pool_size=4,
                                             fifo=False, begin=True, enabled=True,
                                             lease_seconds=60, poll_interval=5),
                            store=store, clock=clock, ready=lambda: True,
                            stop=threading.Event())
    own = OwnCommits(dispatcher)
    own.chunk = 10
    success = Completion(message_id=1, token=1, attempt_id=1, started_at=clock.now(),
                         ended_at=clock.now(), server=None, response_class=None,
                         response_body=None)
    assert not own.due()  # nothing kept
    own.defer(success)
    assert not own.due()
    clock.advance(FLUSH_WINDOW / 2)
    assert not own.due()
    clock.advance(FLUSH_WINDOW / 2)
    assert own.due()
    # a chunk of one message goes to the group commit
    own.chunk = 1
    own.defer(success)
    assert len(dispatcher.commits._pending) == 1
    store.dispose()
