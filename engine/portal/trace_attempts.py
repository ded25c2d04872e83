"""What an attempt was, as both traces tell it: a call to a server only when the store names
one, else the item's own work; one *cut short* by its daemon's death has no duration."""
from __future__ import annotations

from engine.attempt import servers_of
from engine.errors import CRASH_TEXTS
from engine.store.rows import AttemptRow
from engine.store.statuses import Status

CUT_SHORT = "cut short: its daemon died during it (outcome unknown)"


def cut_short(attempt: AttemptRow, message_status: str) -> bool:
    """Whether ``attempt`` was cut short by its daemon's death; ``message_status``: its
    message's status now (an open attempt of a message still ``Delivered`` is in flight)."""
    if attempt.ended_at is None:
        return message_status != Status.DELIVERED.value
    return attempt.outcome != "ok" and attempt.error_text in CRASH_TEXTS


def server_label(attempt: AttemptRow) -> str | None:
    """The participant an attempt went to (``server <address>``): the last of its servers,
    where it ended after any failover; None: the item's own work (no server recorded)."""
    servers = servers_of(attempt.server)
    return f"server {servers[-1]}" if servers else None


def taken_back_after(attempt: AttemptRow) -> float | None:
    """Seconds from a cut-short attempt's start to when it was taken back (None: not yet)."""
    if attempt.ended_at is None:
        return None
    return (attempt.ended_at - attempt.started_at).total_seconds()
