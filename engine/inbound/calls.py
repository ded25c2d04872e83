"""From an accepted request to a message and back: what every inbound service shares.

An Idempotency-Key belongs to its caller (docs/security.md): the stored key is scoped by
the service and the principal, so another caller's same key is another message.
"""
from __future__ import annotations

import hashlib
import json
import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from engine.client import accept_message, check_replay, checked_body
from engine.clock import utcnow
from engine.config.production import ProductionConfig
from engine.inbound.auth import CallerAuth
from engine.inbound.refusals import RefusalLog
from engine.otel import producer_span
from engine.serving.batch_intake import BatchIntake
from engine.serving.intake import MAX_KEY_LENGTH, accept_and_wait, check_idempotency_key
from engine.serving.threads import to_thread
from engine.store.hotpath import Intake
from engine.store.inbound import InboundCall, record_calls
from engine.store.sql import Accepted, SqlStore

log = logging.getLogger(__name__)

KEY_PREFIX = "inbound:"
RECORD_INTERVAL = 0.2
RECORD_BATCH = 500


@dataclass
class InboundContext:
    """What the services of one inbound server share."""

    store: SqlStore
    production: ProductionConfig
    auth: CallerAuth
    refusals: RefusalLog
    recorder: CallRecorder
    intake: BatchIntake
    stopping: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class Caller:
    """The client's connection and ``principal`` (``user:NAME``, ``token:NAME`` or None)."""

    host: str
    port: int
    principal: str | None = None

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Ended:
    """A waited-for message's end: ``outcome`` as the intake API shows it, or None."""

    accepted: Accepted
    outcome: dict[str, Any] | None
    stopping: bool = False


def scoped_key(service: str, caller: Caller, header: str | None) -> str | None:
    """The stored key of ``header``: ``inbound:SERVICE:OWNER:KEY``, service and owner
    percent-escaped (no ``:``), digested when too long (an escaped owner never reads
    ``sha256``)."""
    key = check_idempotency_key(header)
    if key is None:
        return None
    owner = caller.principal or f"host:{caller.host}"
    escaped = quote(service, safe="")
    scoped = f"{KEY_PREFIX}{escaped}:{quote(owner, safe='')}:{key}"
    if len(scoped) <= MAX_KEY_LENGTH:
        return scoped
    digest = hashlib.sha256(json.dumps([service, owner, key]).encode()).hexdigest()
    return f"{KEY_PREFIX}{escaped[:80]}:sha256:{digest}"


async def submit(context: InboundContext, service: str, target: str, body: Any, *,
                 key: str | None, wait: float | None) -> Ended:
    """Commit ``body`` for ``target`` and, with ``wait`` seconds, wait for its end."""
    store = context.store
    if wait is None:  # as accept_message, the commit batched
        production = context.production
        body_class, text, paths = checked_body(production, target, body)
        with producer_span(production, target) as producer:
            accepted = await context.intake.accept(Intake(
                target, body_class, text, service, None, utcnow(), key, producer.context,
                search_paths=paths))
            if accepted.created:
                producer.sent([accepted.id])
        if not accepted.created:
            await to_thread(check_replay, store, accepted, body_class, text, key)
        return Ended(accepted, None)
    accepted, outcome = await accept_and_wait(
        store, lambda: accept_message(store, context.production, target, body, source=service,
                                      idempotency_key=key, waited=True, same_body=True),
        wait, stopping=context.stopping)
    return Ended(accepted, outcome, stopping=outcome is None and context.stopping.is_set())


class CallRecorder:
    """Writes :class:`InboundCall` rows in batches on a thread of its own."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self._queue: queue.SimpleQueue[InboundCall | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="inbound-recorder", daemon=True)
        self._started = False
        self._stopping = threading.Event()

    def start(self) -> None:
        self._thread.start()
        self._started = True

    def add(self, call: InboundCall) -> None:
        self._queue.put(call)

    def stop(self, timeout: float = 5.0) -> None:
        """Write what is left, then end the thread."""
        if self._started:
            self._queue.put(None)
            self._stopping.set()
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=RECORD_INTERVAL)
            except queue.Empty:
                continue
            batch: list[InboundCall] = []
            while item is not None:
                batch.append(item)
                if len(batch) >= RECORD_BATCH:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            self._write(batch)
            if item is None:
                return
            # a few transactions a second, never contending with intake for the write lock
            self._stopping.wait(RECORD_INTERVAL)

    def _write(self, batch: list[InboundCall]) -> None:
        try:
            record_calls(self.store, batch)
        except Exception as exc:
            log.warning("inbound: %d call record(s) not written: %s", len(batch), exc)


def call_record(message_id: int, service: str, caller: Caller, request: str,
                received_at: Any, answer: str) -> InboundCall:
    """The row of a call answered now."""
    return InboundCall(message_id=message_id, service=service, caller=caller.address,
                       principal=caller.principal, request=request, received_at=received_at,
                       answered_at=utcnow(), answer=answer)
