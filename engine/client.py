"""Putting messages into a production from outside a host (the CLI, scripts, tests)."""
from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from engine.clock import Clock, SystemClock
from engine.config.production import ItemConfig, ProductionConfig, ProductionOutline
from engine.errors import CallFailed, CallTimedOut, ConfigurationError, MessageError
from engine.message import MAX_BODY_DEPTH, Message, decode_message, encode_request
from engine.otel import producer_span
from engine.store.completions import SAFETY_POLL
from engine.store.statuses import ENDED_STATUSES, Status

if TYPE_CHECKING:
    from engine.store.hotpath import Accepted, Outcome
    from engine.store.rows import MessageRow
    from engine.store.sql import SqlStore

TERMINAL = ENDED_STATUSES
WAIT_POLL = SAFETY_POLL
MAX_WAIT = 1e9  # seconds: a wait without limit, as a date offset that cannot overflow


def send_message(store: SqlStore, production: ProductionConfig | ProductionOutline, target: str,
                 body: str | dict[str, Any] | Message, *, source: str = "cli",
                 now: datetime | None = None) -> int:
    """Validate ``body``, enqueue it, return its id (MessageError if it does not fit)."""
    return accept_message(store, production, target, body, source=source, now=now).id


def accept_message(store: SqlStore, production: ProductionConfig | ProductionOutline,
                   target: str, body: str | dict[str, Any] | Message, *, source: str = "cli",
                   session_id: int | None = None, idempotency_key: str | None = None,
                   now: datetime | None = None, waited: bool = False,
                   durable: bool = True, same_body: bool = False) -> Accepted:
    """:func:`send_message` in a session, at most once per target, caller and
    ``idempotency_key`` (the earlier message is returned). ``same_body``: a repeat with
    another body raises IdempotencyConflict."""
    body_class, text, paths = checked_body(production, target, body)
    with producer_span(production, target) as producer:
        accepted = store.accept(target=target, body_class=body_class,
                                body=text, source=source, session_id=session_id,
                                idempotency_key=idempotency_key, now=now,
                                trace_context=producer.context, waited=waited,
                                durable=durable, search_paths=paths)
        if accepted.created:
            producer.sent([accepted.id])
    if same_body and not accepted.created:
        check_replay(store, accepted, body_class, text, idempotency_key)
    return accepted


def checked_body(production: ProductionConfig | ProductionOutline, target: str,
                 body: str | dict[str, Any] | Message) -> tuple[str, str, tuple[str, ...]]:
    """(body class, JSON text, search properties) of ``body`` for ``target``."""
    intake = _intake_of(production, target)
    return (*intake.validated(body), intake.paths)


def check_replay(store: SqlStore, accepted: Accepted, body_class: str, text: str,
                 idempotency_key: str | None) -> None:
    """IdempotencyConflict if the earlier message of a repeated key has another body."""
    first = store.get_message(accepted.id)
    if first is not None and (first.body_class, _canonical(first.body)) != \
            (body_class, _canonical(text)):
        raise IdempotencyConflict(
            f"Idempotency-Key {idempotency_key!r} was used for message {accepted.id} "
            "with another body; use a new key for a new message")


class IdempotencyConflict(MessageError):
    """An idempotency key used before with another body (HTTP 422)."""


def _canonical(text: str | None) -> str | None:
    """JSON ``text`` with its objects' members sorted."""
    return None if text is None else json.dumps(json.loads(text), sort_keys=True)


class DecodedString(str):
    """A body whose JSON is a string: data, never JSON text to decode again."""


def decode_body(text: str, *, where: str) -> Any:
    """``text`` as JSON (a string as a :class:`DecodedString`); MessageError naming ``where``
    for invalid JSON, NaN, infinities, too deep nesting or a lone surrogate."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except ValueError as exc:
        raise MessageError(f"{where}: body is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise MessageError(f"{where}: body nests arrays and objects more than "
                           f"{MAX_BODY_DEPTH} levels deep") from exc
    # only a \u escape makes a surrogate
    if "\\u" in text and _lone_surrogate(value):
        raise _surrogate_error(f"{where}: ")
    return DecodedString(value) if isinstance(value, str) else value


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large for a finite number")
    return value


def send_messages(store: SqlStore, production: ProductionConfig | ProductionOutline, target: str,
                  bodies: Iterable[str | dict[str, Any] | Message], *, source: str = "cli",
                  now: datetime | None = None) -> list[int]:
    """Validate every body, enqueue all in one transaction, return their ids."""
    intake = _intake_of(production, target)
    encoded: list[tuple[str | None, str]] = []
    for position, body in enumerate(bodies, start=1):
        try:
            encoded.append(intake.validated(body))
        except MessageError as exc:
            raise MessageError(f"message {position}: {exc}") from exc
    with producer_span(production, target, batch=len(encoded)) as producer:
        ids = store.enqueue_many(target=target, bodies=encoded, source=source, now=now,
                                 trace_context=producer.context, search_paths=intake.paths)
        producer.sent(ids)
    return ids


@dataclass(frozen=True)
class _Intake:
    """What a target's intake checks a body against."""

    item: ItemConfig
    request_class: type[Message]
    paths: tuple[str, ...]

    def validated(self, body: str | dict[str, Any] | Message) -> tuple[str, str]:
        """(body class, JSON text) of ``body``: the one check every way in goes through."""
        message = _message(self.request_class, body)
        encoded = _encoded(message)
        self.item.cls.check_request(message, name=self.item.name, settings=self.item.settings)
        return encoded


def _intake_of(production: ProductionConfig | ProductionOutline, target: str) -> _Intake:
    """The target's intake."""
    try:
        item = production.item(target)
    except ConfigurationError as exc:
        raise MessageError(f"unknown target {target!r}: {exc}") from exc
    request_class = getattr(item.cls, "request_class", None)
    if request_class is None:
        raise MessageError(f"item {target!r} does not take messages")
    return _Intake(item, request_class, tuple(item.settings.get("search_properties") or ()))


def _message(request_class: type[Message], body: str | dict[str, Any] | Message) -> Message:
    """``body`` as a request of ``request_class``; MessageError if it does not fit."""
    if isinstance(body, Message):
        message = body
    elif isinstance(body, DecodedString):
        message = request_class.from_dict(str(body))
    elif isinstance(body, str):
        message = request_class.from_json(body)
    else:
        message = request_class.from_dict(body)
    return message


def _encoded(message: Message) -> tuple[str, str]:
    """(body class, JSON text) of ``message``; MessageError if it cannot be JSON."""
    text = encode_request(message)
    if "\\ud" in text and _lone_surrogate(json.loads(text)):
        raise _surrogate_error()
    return type(message).class_name(), text


def _lone_surrogate(value: Any) -> bool:
    """True if a string in ``value`` (a key too) holds a lone UTF-16 surrogate."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _surrogate_error(where: str = "") -> MessageError:
    return MessageError(f"{where}body holds a lone UTF-16 surrogate (a \\ud800-\\udfff "
                        "escape without its pair), which is not Unicode text")


def wait_for(store: SqlStore, message_id: int, timeout: float, *,
             clock: Clock | None = None, poll: float = WAIT_POLL,
             stop: threading.Event | None = None, marked: bool = False,
             fresh: bool = False) -> MessageRow | None:
    """Wait up to ``timeout`` seconds (``math.inf``: no limit) for ``message_id`` to end;
    its row, or None. ``marked``/``fresh``: see :meth:`CompletionHub.wait`."""
    return store.completions.wait(
        message_id, lambda: _ended(store.get_message(message_id)), timeout, fresh=fresh,
        mark=None if marked or fresh else lambda: store.mark_waited(message_id),
        poll=poll, stop=stop, clock=clock)


@dataclass(frozen=True)
class Kept:
    """A message that completed in this process, with its response."""

    response_class: str | None
    body: str | None


def _ended(row: MessageRow | None) -> MessageRow | None:
    """``row`` if its message has ended, else None."""
    return row if row is not None and row.status in TERMINAL else None


def _outcome_if_ended(found: Outcome | None) -> Outcome | None:
    """``found`` (a row with its response) if its message has ended, else None."""
    return found if found is not None and _ended(found.row) is not None else None


def wait_for_response(store: SqlStore, message_id: int, target: str, timeout: float, *,
                      clock: Clock | None = None, poll: float = WAIT_POLL,
                      stop: threading.Event | None = None, marked: bool = False,
                      fresh: bool = False) -> Any:
    """Wait for ``message_id`` as :func:`wait_for`, return its decoded response. Raises
    CallFailed if it failed, CallTimedOut if it ended after the deadline or not at all."""
    clock = clock or SystemClock()
    deadline_at = clock.now() + timedelta(seconds=min(timeout, MAX_WAIT))
    found = store.completions.wait(
        message_id, lambda: _outcome_if_ended(store.get_outcome(message_id)), timeout,
        kept=lambda kept: Kept(*kept), fresh=fresh,
        mark=None if marked or fresh else lambda: store.mark_waited(message_id),
        poll=poll, stop=stop, clock=clock)
    if isinstance(found, Kept):
        return None if found.body is None else decode_message(found.response_class,
                                                              found.body)
    row = found.row if found is not None else None
    if row is None or (row.time_completed is not None and row.time_completed > deadline_at):
        current = row or store.get_message(message_id)
        raise CallTimedOut(f"message {message_id} to {target!r} not finished after "
                           f"{timeout:g} s", message_id=message_id, target=target,
                           status=current.status if current else None)
    if row.status != Status.COMPLETED:
        raise CallFailed(f"message {message_id} to {target!r} ended {row.status}: "
                         f"{row.error_text or 'no error text'}", message_id=message_id,
                         status=row.status, target=target, error_text=row.error_text)
    assert found is not None
    if not found.response:  # none, or purged meanwhile
        return None
    return decode_message(found.response_class, found.response_body)
