"""Encore's spans: PRODUCER at send, CONSUMER per delivery, CLIENT per attempt (docs/tracing.md).

A CONSUMER span is a child of, and linked to, the message's stored (or derived) producer context.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from engine.attempt import AttemptObserver, AttemptReport, error_text, idempotency_key
from engine.otel import semconv as sc
from engine.otel.base import Delivery, Producer
from engine.otel.context import context_of, derived_context, from_text, headers_of, to_text
from engine.store.rows import MessageRow
from engine.store.statuses import Status as MessageStatus

__all__ = ["ItemTracing", "Tracing"]

log = logging.getLogger(__name__)

FAILED_RESULTS = frozenset({MessageStatus.ERROR, MessageStatus.SUSPENDED})


def _version() -> str:
    try:
        return version("encore-engine")
    except PackageNotFoundError:
        return "0"


class Tracing:
    """Makes Encore's spans with one tracer provider (None: the global one)."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self.provider = tracer_provider
        self.tracer = trace.get_tracer("encore", _version(), tracer_provider=tracer_provider)

    @contextmanager
    def producer(self, target: str, batch: int | None = None) -> Iterator[Producer]:
        """The PRODUCER span ``send {target}`` around one send of ``batch`` messages."""
        attributes: dict[str, Any] = {
            sc.MESSAGING_SYSTEM: sc.SYSTEM, sc.MESSAGING_OPERATION_NAME: "send",
            sc.MESSAGING_OPERATION_TYPE: "send", sc.MESSAGING_DESTINATION: target}
        if batch is not None:
            attributes[sc.MESSAGING_BATCH_COUNT] = batch
        # No exception events: a chained driver error could carry SQL and message bodies.
        with self.tracer.start_as_current_span(f"send {target}", kind=SpanKind.PRODUCER,
                                               attributes=attributes,
                                               record_exception=False) as span:
            yield ProducerSpan(span)

    def item(self, name: str) -> ItemTracing:
        """The CONSUMER and CLIENT spans of item ``name``."""
        return ItemTracing(self.tracer, name)

    def flush(self, timeout_seconds: float = 5.0) -> None:
        """Export the spans ended so far (at a daemon's stop)."""
        provider = self.provider or trace.get_tracer_provider()
        flush = getattr(provider, "force_flush", None)
        if flush is not None:
            flush(int(timeout_seconds * 1000))


class ProducerSpan(Producer):
    """A send's PRODUCER span: its context is stored with the message(s)."""

    def __init__(self, span: Span) -> None:
        self.span = span
        self.context = to_text(span)

    def sent(self, message_ids: Sequence[int]) -> None:
        if len(message_ids) == 1:
            self.span.set_attribute(sc.MESSAGING_MESSAGE_ID, str(message_ids[0]))


class ConsumerSpan(Delivery):
    """A delivery's CONSUMER span."""

    def __init__(self, span: Span, item: ItemTracing) -> None:
        self.span, self.item = span, item

    def ended(self, result: str) -> None:
        self.span.set_attribute(sc.ENCORE_RESULT, result)
        if result in FAILED_RESULTS:
            self.span.set_attribute(sc.ERROR_TYPE, self.item.last_error_type() or sc.OTHER)
            self.span.set_status(Status(StatusCode.ERROR, f"the message ended {result}"))


class ItemTracing(AttemptObserver):
    """One item's CONSUMER and CLIENT spans, as delivery middleware shared by its workers."""

    def __init__(self, tracer: trace.Tracer, target: str) -> None:
        self.tracer = tracer
        self.target = target
        self._local = threading.local()

    @contextmanager
    def delivery(self, row: MessageRow) -> Iterator[Delivery]:
        """The CONSUMER span ``process {target}`` around one delivery of ``row``."""
        producer = from_text(row.trace_context)
        parent = producer or derived_context(idempotency_key(row))
        attributes: dict[str, Any] = {
            sc.MESSAGING_SYSTEM: sc.SYSTEM, sc.MESSAGING_OPERATION_NAME: "process",
            sc.MESSAGING_OPERATION_TYPE: "process", sc.MESSAGING_DESTINATION: self.target,
            sc.MESSAGING_MESSAGE_ID: str(row.id)}
        if row.session_id is not None:
            attributes[sc.MESSAGING_CONVERSATION_ID] = str(row.session_id)
        links = [Link(producer)] if producer is not None else []
        self._local.last_error_type = None
        with self.tracer.start_as_current_span(
                f"process {self.target}", context=context_of(parent), kind=SpanKind.CONSUMER,
                links=links, attributes=attributes, record_exception=False) as span:
            self._local.delivery = span
            try:
                yield ConsumerSpan(span, self)
            except BaseException as exc:
                self._end_open(sc.qualified_name(type(exc)))
                raise
            finally:
                self._end_open(sc.OTHER)
                self._local.delivery = None

    def last_error_type(self) -> str | None:
        """``error.type`` of this thread's last failed attempt, if any."""
        return getattr(self._local, "last_error_type", None)

    def before_attempt(self, row: MessageRow, number: int) -> Mapping[str, str] | None:
        """Start attempt ``number``'s CLIENT span and return its ``traceparent``; never raises."""
        try:
            self._end_open(sc.OTHER)  # one whose attempt never ran (its claim was lost)
            span = self.tracer.start_span(
                f"attempt {self.target}", context=self._parent(row), kind=SpanKind.CLIENT,
                attributes={sc.HTTP_RESEND_COUNT: number - 1, sc.ENCORE_ITEM: self.target,
                            sc.ENCORE_MESSAGE_ID: row.id})
            self._local.attempt = span
            return headers_of(span)
        except Exception:
            log.exception("item %s: could not start the span of an attempt", self.target)
            return None

    def after_attempt(self, row: MessageRow, report: AttemptReport) -> None:
        """End the attempt's CLIENT span with the HTTP attributes of its last request."""
        span = getattr(self._local, "attempt", None)
        self._local.attempt = None
        if span is None:
            return
        span.update_name(sc.client_span_name(report.exchange, self.target))
        span.set_attributes(sc.http_attributes(report.exchange, report.status_code))
        span.set_attribute(sc.ENCORE_OUTCOME, report.outcome)
        kind = sc.error_type(report)
        if kind is not None:
            self._local.last_error_type = kind
            span.set_attribute(sc.ERROR_TYPE, kind)
            span.set_status(Status(StatusCode.ERROR, error_text(report.error)))
        span.end()

    def _parent(self, row: MessageRow) -> Any:
        """The delivery's CONSUMER span, else the message's stored context."""
        delivery = getattr(self._local, "delivery", None)
        if delivery is not None:
            return trace.set_span_in_context(delivery)
        return context_of(from_text(row.trace_context)
                          or derived_context(idempotency_key(row)))

    def _end_open(self, kind: str) -> None:
        """End a CLIENT span whose attempt did not run to its end."""
        span = getattr(self._local, "attempt", None)
        self._local.attempt = None
        if span is not None:
            span.set_attribute(sc.ERROR_TYPE, kind)
            span.set_status(Status(StatusCode.ERROR, "the attempt did not run"))
            span.end()
