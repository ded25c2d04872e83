"""SqlStore: the message queue, attempts and claims, on SQLite or PostgreSQL.

Every method is one short transaction named after what it does. Claims are single
``UPDATE … RETURNING`` statements, so workers and daemons share a queue without taking a
message twice; a commit that queues work or ends a waited-for message announces it
(:mod:`engine.store.notify`).
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import Engine, func, select

from engine.clock import as_utc, utcnow
from engine.store import migrate
from engine.store.breaker import SqlBreakers
from engine.store.claims import StoreClaims
from engine.store.completions import CompletionHub
from engine.store.connector import Database, Transaction
from engine.store.daemons import StoreDaemons
from engine.store.database import create_db_engine
from engine.store.group import GroupCommit
from engine.store.hearing import StoreHearing
from engine.store.hotpath import Accepted, Claimed, Completion, Intake, Outcome, Taker
from engine.store.intake import StoreIntake
from engine.store.leases import SqlLeases
from engine.store.notify import QueueListener
from engine.store.ratelimit import SqlRateBuckets
from engine.store.rows import AttemptRow, MessageRow
from engine.store.transitions import StoreTransitions

__all__ = ["Accepted", "AttemptRow", "Claimed", "Completion", "MessageRow", "SqlStore"]


class SqlStore(StoreIntake, StoreClaims, StoreTransitions, StoreDaemons, StoreHearing):
    """The durable store of one production (``url``: an SQLAlchemy URL). Its methods live in
    mixins, one module each; this class holds what they share and the schema."""

    def __init__(self, url: str, *, engine: Engine | None = None) -> None:
        self.url = url
        self.db = Database(engine or create_db_engine(url))
        self.engine = self.db.engine
        self.events = self.db.events
        self.is_postgres = self.db.is_postgres
        self.leases = SqlLeases(self.db)
        self.breakers = SqlBreakers(self.db)
        self.rate_buckets = SqlRateBuckets(self.db)
        self.completions = CompletionHub(on_first_watch=self.hear_other_processes)
        self.db.hot.on_completed = self.completions.completed
        self.db.announcer.add_callback(self.completions.hear)
        # items of this process taking waited-for messages as accepted (docs/waiting.md)
        self.takers: dict[str, Taker] = {}
        self._listener: QueueListener | None = None
        self._reconnect_hooks: list[Callable[[], object]] = [self.completions.wake_all]
        self._hearing_lock = threading.Lock()
        self._hearers = 0
        # durable intakes that arrive together share one commit
        self.intake: GroupCommit[Intake, Accepted] = GroupCommit(
            self._accept_one, lambda intakes: self.db.hot.accept_many(intakes))

    def upgrade(self) -> None:
        """Create or upgrade every table (Alembic, to head); safe to run concurrently."""
        migrate.upgrade(self.engine)

    def check_schema(self) -> None:
        """Raise StoreError unless the database is at the revision this code knows."""
        migrate.check(self.engine)

    def db_now(self) -> datetime:
        """The database server's current time (aware UTC); this host's on SQLite."""
        if not self.is_postgres:
            return utcnow()
        with self.db.read() as conn:
            value: datetime = conn.execute(select(func.clock_timestamp())).scalar_one()
        return as_utc(value)

    def dispose(self) -> None:
        with self._hearing_lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()
        self.db.dispose()

    def get_message(self, message_id: int) -> MessageRow | None:
        return self.db.hot.message(message_id)

    def get_outcome(self, message_id: int) -> Outcome | None:
        """``message_id`` as it is now and its response's body, in one read."""
        return self.db.hot.outcome(message_id)

    def read(self) -> Transaction:
        """A read-only connection, for tables the store has no method for."""
        return self.db.read()
