"""Putting messages into a production from outside a host (the CLI, scripts, tests)."""
from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from engine.clock import Clock, SystemClock
from engine.errors import ConfigurationError, MessageError
from engine.message import Message
from engine.production import ProductionConfig, ProductionOutline
from engine.store.models import FINAL_STATUSES
from engine.store.sql import MessageRow, SqlStore

TERMINAL = (*FINAL_STATUSES, "Suspended")


def send_message(store: SqlStore, production: ProductionConfig | ProductionOutline, target: str,
                 body: str | dict[str, Any] | Message, *, source: str = "cli",
                 now: datetime | None = None) -> int:
    """Validate ``body`` against the target's request class, enqueue it, return its id.

    Raises MessageError (and enqueues nothing) for an unknown target or a malformed body.
    """
    request_class = _request_class(production, target)
    message = _validated(request_class, body)
    return store.enqueue(target=target, body_class=type(message).class_name(),
                         body=message.to_json(), source=source, now=now)


def send_messages(store: SqlStore, production: ProductionConfig | ProductionOutline, target: str,
                  bodies: Iterable[str | dict[str, Any] | Message], *, source: str = "cli",
                  now: datetime | None = None) -> list[int]:
    """Validate every body, then enqueue them all in one transaction; return their ids in
    order. Raises MessageError naming the first bad body (by its position, from 1) and
    enqueues nothing."""
    request_class = _request_class(production, target)
    encoded = []
    for position, body in enumerate(bodies, start=1):
        try:
            message = _validated(request_class, body)
        except MessageError as exc:
            raise MessageError(f"message {position}: {exc}") from exc
        encoded.append((type(message).class_name(), message.to_json()))
    return store.enqueue_many(target=target, bodies=encoded, source=source, now=now)


def _request_class(production: ProductionConfig | ProductionOutline, target: str
                   ) -> type[Message]:
    try:
        item = production.item(target)
    except ConfigurationError as exc:
        raise MessageError(f"unknown target {target!r}: {exc}") from exc
    request_class = getattr(item.cls, "request_class", None)
    if request_class is None:
        raise MessageError(f"item {target!r} does not take messages")
    return request_class


def _validated(request_class: type[Message], body: str | dict[str, Any] | Message) -> Message:
    if isinstance(body, Message):
        return body
    if isinstance(body, str):
        return request_class.from_json(body)
    return request_class.from_dict(body)


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
