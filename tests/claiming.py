"""Claiming in a test as a daemon's dispatcher does (engine.delivery.dispatch): claims whose
lease expired taken back, then the due message claimed by the hot path's step
(``complete_and_claim``, here with no success to commit)."""
from __future__ import annotations

from datetime import datetime

from engine.store.rows import MessageRow
from engine.store.sql import SqlStore


def claim_one(store: SqlStore, target: str, *, owner: str, now: datetime,
              lease_seconds: float, fifo: bool = False) -> MessageRow | None:
    """The oldest due message of ``target``, claimed by ``owner`` until ``now +
    lease_seconds`` (FIFO: only the head of the queue); None if there is none."""
    store.release_expired_claims(target, now=now)
    _, claimed = store.complete_and_claim([], now=now, target=target, owner=owner,
                                          lease_seconds=lease_seconds, limit=1, fifo=fifo,
                                          begin=False, enabled=True)
    return claimed[0].row if claimed else None
