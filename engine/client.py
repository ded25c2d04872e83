"""Putting messages into a production from outside a host (the CLI, scripts, tests)."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from engine.clock import Clock, SystemClock
from engine.errors import ConfigurationError, MessageError
from engine.message import Message
from engine.production import ProductionConfig
from engine.store.models import FINAL_STATUSES
from engine.store.sql import MessageRow, SqlStore

TERMINAL = (*FINAL_STATUSES, "Suspended")


def send_message(store: SqlStore, production: ProductionConfig, target: str,
                 body: str | dict[str, Any] | Message, *, source: str = "cli",
                 now: datetime | None = None) -> int:
    """Validate ``body`` against the target's request class, enqueue it, return its id.

    Raises MessageError (and enqueues nothing) for an unknown target or a malformed body.
    """
    try:
        item = production.item(target)
    except ConfigurationError as exc:
        raise MessageError(f"unknown target {target!r}: {exc}") from exc
    request_class = getattr(item.cls, "request_class", None)
    if request_class is None:
        raise MessageError(f"item {target!r} does not take messages")
    if isinstance(body, Message):
        message = body
    elif isinstance(body, str):
        message = request_class.from_json(body)
    else:
        message = request_class.from_dict(body)
    return store.enqueue(target=target, body_class=type(message).class_name(),
                         body=message.to_json(), source=source, now=now)


def wait_for(store: SqlStore, message_id: int, timeout: float, *,
             clock: Clock | None = None, poll: float = 0.05) -> MessageRow | None:
    """Wait up to ``timeout`` seconds for ``message_id`` to finish; None if it did not."""
    clock = clock or SystemClock()
    deadline = clock.monotonic() + timeout
    while True:
        row = store.get_message(message_id)
        if row is not None and row.status in TERMINAL:
            return row
        if clock.monotonic() >= deadline:
            return None
        clock.sleep(min(poll, deadline - clock.monotonic()))
