"""Putting messages into a production from outside a host (the CLI, scripts, tests).

With tracing on (:mod:`engine.otel`) every send is a PRODUCER span whose context is stored
with the message(s).
"""
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
WAIT_POLL = SAFETY_POLL  # seconds between looks in real time, when no announcement came
MAX_WAIT = 1e9  # seconds: a wait without limit, as a date offset that cannot overflow


def send_message(store: SqlStore, production: ProductionConfig | ProductionOutline, target: str,
                 body: str | dict[str, Any] | Message, *, source: str = "cli",
                 now: datetime | None = None) -> int:
    """Validate ``body`` against the target's request class, enqueue it, return its id.

    Raises MessageError (and enqueues nothing) for an unknown target or a malformed body.
    """
    return accept_message(store, production, target, body, source=source, now=now).id


def accept_message(store: SqlStore, production: ProductionConfig | ProductionOutline,
                   target: str, body: str | dict[str, Any] | Message, *, source: str = "cli",
                   session_id: int | None = None, idempotency_key: str | None = None,
                   now: datetime | None = None, waited: bool = False,
                   durable: bool = True, same_body: bool = False) -> Accepted:
    """:func:`send_message` in a given session (None: the message starts its own) and, with
    an ``idempotency_key``, at most once per target, caller and key: when such a message
    exists, nothing is created and that one is returned (``Accepted.created`` False). The
    caller is the token holder of an ``api:<name>`` source, else the production itself.
    ``same_body``: that message must have this body (the same JSON value), else
    IdempotencyConflict. ``waited``: the caller will :func:`wait_for` it (pass
    ``marked=True`` there); ``durable``: see :meth:`SqlStore.accept`."""
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
    """``body`` checked as a request for ``target``: its body class, its JSON text and the
    target's search properties; MessageError (nothing accepted) if it does not fit."""
    intake = _intake_of(production, target)
    return (*intake.validated(body), intake.paths)


def check_replay(store: SqlStore, accepted: Accepted, body_class: str, text: str,
                 idempotency_key: str | None) -> None:
    """IdempotencyConflict if ``accepted``, the earlier message of a repeated key, has
    another body than this one (one read; never made for a first call)."""
    first = store.get_message(accepted.id)
    if first is not None and (first.body_class, _canonical(first.body)) != \
            (body_class, _canonical(text)):
        raise IdempotencyConflict(
            f"Idempotency-Key {idempotency_key!r} was used for message {accepted.id} "
            "with another body; use a new key for a new message")


class IdempotencyConflict(MessageError):
    """An idempotency key its caller used before with another body (HTTP 422); nothing was
    created."""


def _canonical(text: str | None) -> str | None:
    """JSON ``text`` with its objects' members in one order: two bodies are the same when
    they are the same JSON value (``1`` and ``1.0``, ``true`` and ``1`` stay different)."""
    return None if text is None else json.dumps(json.loads(text), sort_keys=True)


class DecodedString(str):
    """A body whose JSON is a string (``"{\\"a\\": 1}"``): the string itself, decoded once —
    data, never JSON text to decode again. :func:`_message` hands it to the message class
    as it is; every message class, :class:`~engine.message.JsonMessage` included, takes a
    JSON object, so it is refused ("body must be a JSON object, got str")."""


def decode_body(text: str, *, where: str) -> Any:
    """``text`` as JSON; MessageError naming ``where`` if it is not JSON, holds NaN or an
    infinity (JSON has neither; docs/settings.md, "Numbers") or nests so deep that the decoder
    gives up (the depth limit itself is checked with the message, :meth:`_Intake.validated`).
    A JSON string comes back as a :class:`DecodedString`, so that it is not taken for JSON
    text and decoded a second time. A lone UTF-16 surrogate (``"\\ud800"``) is refused: it
    is not text."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except ValueError as exc:
        raise MessageError(f"{where}: body is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise MessageError(f"{where}: body nests arrays and objects more than "
                           f"{MAX_BODY_DEPTH} levels deep") from exc
    # refused before the message class sees it, whose errors would repeat the text; only a
    # \u escape makes a surrogate (UTF-8 text has none)
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
    """Validate every body, then enqueue them all in one transaction; return their ids in
    order. Raises MessageError naming the first bad body (by its position, from 1) and
    enqueues nothing."""
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
    """What a target's intake checks a body against: the item (its request class, its
    class's :meth:`~engine.host.BusinessHost.check_request`) and its ``search_properties``
    (indexed at intake)."""

    item: ItemConfig
    request_class: type[Message]
    paths: tuple[str, ...]

    def validated(self, body: str | dict[str, Any] | Message) -> tuple[str, str]:
        """(body class, JSON text) of ``body`` as a request of the item: the one place every
        way in (the CLI, the API, services, processes, Python callers) checks a body.
        MessageError if it does not fit the class, cannot be JSON (NaN, an infinity, nesting
        deeper than :data:`~engine.message.MAX_BODY_DEPTH`) or is one the item's class
        refuses (an operation its WSDL does not have)."""
        message = _message(self.request_class, body)
        encoded = _encoded(message)
        self.item.cls.check_request(message, name=self.item.name, settings=self.item.settings)
        return encoded


def _intake_of(production: ProductionConfig | ProductionOutline, target: str) -> _Intake:
    """The target's intake (see :class:`_Intake`)."""
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
    elif isinstance(body, DecodedString):  # a decoded JSON string: data, not JSON text
        message = request_class.from_dict(str(body))
    elif isinstance(body, str):
        message = request_class.from_json(body)
    else:
        message = request_class.from_dict(body)
    return message


def _encoded(message: Message) -> tuple[str, str]:
    """(body class, JSON text) of ``message``; MessageError if it cannot be JSON."""
    text = encode_request(message)
    # ASCII, as encode_request writes it: a character past U+FFFF is a pair of \udXXX escapes
    if "\\ud" in text and _lone_surrogate(json.loads(text)):
        raise _surrogate_error()
    return type(message).class_name(), text


def _lone_surrogate(value: Any) -> bool:
    """True if a string in decoded JSON ``value`` (a key too) holds half of a UTF-16
    surrogate pair: not Unicode text, which no page, answer or database column can hold."""
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
    """Wait up to ``timeout`` seconds (``math.inf``: no limit) for ``message_id`` to finish;
    None if it did not, or if ``stop`` was set first.

    The wait is woken by the commit that ends the message, in this process or any other
    (:meth:`CompletionHub.wait <engine.store.completions.CompletionHub.wait>`); ``poll`` is
    only the safety net's period. ``marked``: the message was accepted ``waited`` (else this
    flags it, one write); ``fresh``: it was accepted ``waited`` just now, after
    ``store.completions`` was already hearing, so the hub knows whether it ended and the
    first look is skipped unless it did. On a virtual clock it looks every
    :data:`~engine.store.completions.VIRTUAL_POLL` virtual seconds instead, each sleep
    running the harness's deliveries."""
    return store.completions.wait(
        message_id, lambda: _ended(store.get_message(message_id)), timeout, fresh=fresh,
        mark=None if marked or fresh else lambda: store.mark_waited(message_id),
        poll=poll, stop=stop, clock=clock)


@dataclass(frozen=True)
class Kept:
    """A message that completed in this process, with its response as the hub kept it
    (``body`` None: no response)."""

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
    """Wait up to ``timeout`` seconds (``math.inf``: no limit) for ``message_id``, sent to
    ``target``, and return its response decoded (None: it completed without one).

    Raises CallFailed with the target's error text when the message ended ``Error``,
    ``Suspended``, ``Discarded`` or ``Aborted``, and CallTimedOut when it had not finished
    in time, or when ``stop`` was set first — the message goes on. A message that finished
    after the deadline counts as not finished (a virtual clock that lets the target work
    inside the wait may see it only then)."""
    clock = clock or SystemClock()
    deadline_at = clock.now() + timedelta(seconds=min(timeout, MAX_WAIT))
    found = store.completions.wait(
        message_id, lambda: _outcome_if_ended(store.get_outcome(message_id)), timeout,
        kept=lambda kept: Kept(*kept), fresh=fresh,
        mark=None if marked or fresh else lambda: store.mark_waited(message_id),
        poll=poll, stop=stop, clock=clock)
    if isinstance(found, Kept):  # completed here, before the deadline (it is not over)
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
