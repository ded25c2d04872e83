"""Business processes: hosts that call other items of the production (docs/processes.md).

A call's idempotency key is the process's message, the *run* of its attempt and the call's
position. A run is an attempt plus those that follow it only because the daemon stopped in
the middle: they share keys, so calls re-attach instead of sending twice. Requests are
committed without waiting for the disk: one lost in a crash goes with the process's own
attempt, which is then outcome unknown and sends it again.
"""
from __future__ import annotations

import dataclasses
import math
import threading
from abc import abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from engine import client
from engine.clock import Clock
from engine.errors import CRASH_TEXTS, CallTimedOut, Interrupted, ProcessError
from engine.eventsink import EventSink
from engine.host import HOST_SETTINGS, BusinessOperation
from engine.message import JsonMessage, Message
from engine.retry.policy import FOREVER
from engine.settings import Setting

if TYPE_CHECKING:
    from adapters.base import OutboundAdapter
    from engine.config.production import ProductionConfig
    from engine.store.sql import Accepted, SqlStore

SYNC_POLL = client.WAIT_POLL
KEY_PREFIX = "encore-process:"  # idempotency keys of process calls: prefix, message, run, call


def _process_settings() -> tuple[Setting, ...]:
    """The host settings, with FailureTimeout -1 (an attempt lasts as long as its calls)."""
    return tuple(dataclasses.replace(s, default=FOREVER) if s.name == "failure_timeout" else s
                 for s in HOST_SETTINGS)


PROCESS_SETTINGS: tuple[Setting, ...] = _process_settings()


@dataclass(frozen=True, kw_only=True)
class ProcessContext:
    """What a process needs of its daemon; ``production`` is read at each call (reloads)."""

    store: SqlStore
    production: Callable[[], ProductionConfig]
    clock: Clock
    stop: threading.Event = field(default_factory=threading.Event)
    poll: float = SYNC_POLL


class BusinessProcess(BusinessOperation):
    """A host that orchestrates other items (docs/processes.md). Implement
    :meth:`on_request`; its return value is the response to the process's caller."""

    SETTINGS = PROCESS_SETTINGS
    request_class = JsonMessage

    def __init__(self, name: str, settings: Mapping[str, Any], *,
                 events: EventSink | None = None, adapter: OutboundAdapter | None = None,
                 context: ProcessContext | None = None) -> None:
        super().__init__(name, settings, events=events, adapter=adapter)
        self.context = context
        self._run = 1
        self._calls = 0

    def bind(self, context: ProcessContext) -> None:
        """Give the process its daemon's store, production, clock and stop event."""
        self.context = context

    @abstractmethod
    def on_request(self, request: Any) -> Any:
        """Handle one request; return the response (a Message, a JSON-able value, or None)."""

    def on_message(self, request: Any) -> Any:
        """Run :meth:`on_request` for this attempt (not to be overridden)."""
        self._calls = 0
        self._run = self._run_of_attempt()
        return self.on_request(request)

    def send_request_async(self, target: str, message: Message | Mapping[str, Any] | str
                           ) -> int:
        """Enqueue ``message`` for ``target`` in this session; return its id."""
        return self._send(target, message, waited=False).id

    def _send(self, target: str, message: Message | Mapping[str, Any] | str, *,
              waited: bool) -> Accepted:
        context = self._context()
        key = f"{KEY_PREFIX}{self.message_id}:{self._run}:{self._calls + 1}"
        self._calls += 1
        body = _body(message)
        accepted = self._accept(context, target, body, key, waited)
        if not accepted.created and not self._ours(context, accepted.id):
            # never re-attach to a message this process did not send
            self.log_warning(f"message {accepted.id} for {target} holds this call's key "
                             f"{key!r} but was not sent by {self.name}; sending afresh")
            accepted = self._accept(context, target, body, None, waited)
        if not accepted.created:
            self.log_info(f"re-attached to message {accepted.id} for {target}, sent before "
                          "this attempt was interrupted")
        elif self.operation_settings.trace:
            self.log_trace(f"sent message {accepted.id} to {target}")
        return accepted

    def send_request_sync(self, target: str, message: Message | Mapping[str, Any] | str,
                          timeout: float | timedelta | None = None) -> Any:
        """Send ``message`` to ``target``, wait and return its decoded response. Raises
        CallTimedOut after ``timeout`` (None: no limit) and CallFailed if it fails."""
        seconds = _seconds(timeout)
        if target == self.name:
            raise ProcessError(f"{self.name} cannot wait for a message to itself: its "
                               "worker would wait for its own queue")
        context = self._context()
        started = context.clock.monotonic()
        heard = context.store.completions.hearing  # before the accept: see wait_for's fresh
        accepted = self._send(target, message, waited=True)
        message_id = accepted.id
        try:
            response = client.wait_for_response(context.store, message_id, target, seconds,
                                                clock=context.clock, poll=context.poll,
                                                stop=context.stop, marked=True,
                                                fresh=heard and accepted.created)
        except CallTimedOut:
            if context.stop.is_set():
                raise Interrupted(f"{self.name}: the daemon is stopping while it waits for "
                                  f"message {message_id} to {target!r}") from None
            raise
        if self.operation_settings.trace:
            self.log_trace(f"{target} answered message {message_id} in "
                           f"{context.clock.monotonic() - started:.3f} s")
        return response

    def _accept(self, context: ProcessContext, target: str,
                body: Message | dict[str, Any] | str, key: str | None,
                waited: bool) -> Accepted:
        return client.accept_message(context.store, context.production(), target, body,
                                     source=self.name, session_id=self.session_id,
                                     idempotency_key=key, now=context.clock.now(),
                                     waited=waited, durable=False)

    def _ours(self, context: ProcessContext, message_id: int) -> bool:
        row = context.store.get_message(message_id)
        return row is not None and (row.source, row.session_id) == (self.name,
                                                                     self.session_id)

    def _context(self) -> ProcessContext:
        if self.context is None:
            raise ProcessError(f"process {self.name} is not bound to a production: run it "
                               "in a daemon, or bind() a ProcessContext in tests")
        return self.context

    def _run_of_attempt(self) -> int:
        """The first attempt of the chain of interrupted attempts ending with this one."""
        run = self.retry_count
        if run <= 1 or self.context is None or self.message_id is None:
            return max(run, 1)
        for attempt in reversed(self.context.store.attempts(self.message_id)):
            if attempt.attempt >= self.retry_count:
                continue
            if attempt.error_text not in CRASH_TEXTS:
                break
            run = attempt.attempt
        return run


def _body(message: Message | Mapping[str, Any] | str) -> Message | dict[str, Any] | str:
    """``message`` to validate, a JsonMessage as its data."""
    if isinstance(message, JsonMessage):
        return message.to_dict()
    return message if isinstance(message, (Message, str)) else dict(message)


def _seconds(timeout: float | timedelta | None) -> float:
    if timeout is None:
        return math.inf
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(f"timeout must be None or ≥ 0 seconds, got {timeout!r}")
    return seconds
