"""The claim book of one item: the messages this process holds claimed, with their tokens.

The heartbeat renews exactly these claims. Before sending, a worker checks the claim locally
(:meth:`ClaimBook.surely_held`) or by a fenced write (:func:`confirm_claim`). Claims a failed
delivery left are released at the next delivery or at the stop.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from engine.clock import Clock
from engine.errors import ClaimLost, EncoreError

if TYPE_CHECKING:
    from engine.store.hotpath import Claimed, Completion
    from engine.store.rows import MessageRow
    from engine.store.sql import SqlStore

__all__ = ["LEASE_MARGIN", "ClaimBook", "confirm_claim"]

# fraction of lease_seconds given up early: stop relying on a lease before another may take it
LEASE_MARGIN = 0.1

log = logging.getLogger(__name__)


def confirm_claim(store: SqlStore, row: MessageRow, *, owner: str, lease_seconds: float,
                  clock: Clock, why: str = "") -> None:
    """Renew the claim on ``row`` if its token is still ``owner``'s, else raise ClaimLost."""
    if not store.renew_leases(owner, now=clock.now(), lease_seconds=lease_seconds,
                              claims=[(row.id, row.claim_token)]):
        during = f" {why}," if why else ""
        raise ClaimLost(f"message {row.id}: its claim (token {row.claim_token}) expired"
                        f"{during} and another daemon has taken it over")


class ClaimBook:
    """The claims item ``target`` holds in this process (``owner``), with their tokens."""

    def __init__(self, store: SqlStore, clock: Clock, *, target: str, owner: str,
                 lease_seconds: float) -> None:
        self.store = store
        self.clock = clock
        self.target = target
        self.owner = owner
        self.lease_seconds = lease_seconds
        self._lock = threading.Lock()
        self._held: dict[int, int] = {}  # message id → claim token, handed out or pending
        self._claimed_at: dict[int, float] = {}  # message id → monotonic time of its claim
        self._renewed = float("-inf")
        self._abandoned: dict[int, int] = {}  # id → token: messages a failed delivery left
        self._abandoned_batch = 0  # FIFO: the last claim made before a delivery was cut short

    def took(self, claimed: Iterable[Claimed], at: float) -> None:
        """The claim begun at monotonic ``at`` took ``claimed``."""
        with self._lock:
            for c in claimed:
                self._held[c.row.id] = c.row.claim_token
                self._claimed_at[c.row.id] = at

    def ids(self) -> list[int]:
        """The ids of the messages held (a FIFO claim takes none behind them)."""
        with self._lock:
            return list(self._held)

    def held(self) -> list[tuple[int, int]]:
        """(message id, token) of every claim held."""
        with self._lock:
            return list(self._held.items())

    def let_go(self, message_id: int, *, pending: bool) -> None:
        """A worker is done with ``message_id``; ``pending``: held until the group commit."""
        with self._lock:
            if not pending:
                self._held.pop(message_id, None)
            self._claimed_at.pop(message_id, None)

    def committed(self, completions: Iterable[Completion]) -> None:
        """The group commit of ``completions`` ended: their claims are held no more."""
        with self._lock:
            for c in completions:
                if self._held.get(c.message_id) == c.token:
                    del self._held[c.message_id]

    def renewed(self, started: float) -> None:
        """The heartbeat that began at monotonic ``started`` renewed the held claims."""
        with self._lock:
            self._renewed = max(self._renewed, started)

    def surely_held(self, message_id: int) -> bool:
        """True while the claim on ``message_id`` cannot have expired."""
        lease = self.lease_seconds * (1 - LEASE_MARGIN)
        with self._lock:
            since = max(self._claimed_at.get(message_id, float("-inf")), self._renewed)
        return self.clock.monotonic() < since + lease

    def confirm(self, row: MessageRow) -> None:
        """Raise ClaimLost unless the claim on ``row`` is still this one."""
        if not self.surely_held(row.id):
            confirm_claim(self.store, row, owner=self.owner, lease_seconds=self.lease_seconds,
                          clock=self.clock)

    def abandon(self, row: MessageRow, batch: int) -> None:
        """A delivery of ``row`` (claim number ``batch``) was cut short."""
        with self._lock:
            self._held.pop(row.id, None)
            self._abandoned[row.id] = row.claim_token
            self._abandoned_batch = batch

    def behind_abandoned(self, batch: int) -> bool:
        """True if claim number ``batch`` was made before a delivery was cut short."""
        with self._lock:
            return batch <= self._abandoned_batch

    def release_abandoned(self) -> None:
        """Put messages of deliveries cut short by a database error back in the queue."""
        with self._lock:
            abandoned = sorted(self._abandoned.items())
        for message_id, token in abandoned:
            if self.store.release_claim(message_id, self.owner, token=token):
                log.warning("item %s: message %d is back in its queue after a failed delivery",
                            self.target, message_id)
            with self._lock:
                self._abandoned.pop(message_id, None)

    def release_abandoned_at_stop(self) -> None:
        """At a stop, release what failed deliveries left claimed."""
        try:
            self.release_abandoned()
        except EncoreError as exc:
            log.warning("item %s: messages of failed deliveries stay claimed until their "
                        "leases expire: %s", self.target, exc)
