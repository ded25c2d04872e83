"""The W3C trace context stored with a message, and an attempt's ``traceparent`` header."""
from __future__ import annotations

import hashlib

from opentelemetry.context import Context
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    TraceFlags,
    get_current_span,
    set_span_in_context,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = ["context_of", "derived_context", "from_text", "headers_of", "to_text"]

# always W3C, whatever OTEL_PROPAGATORS says: the stored text is part of the interface
_W3C = TraceContextTextMapPropagator()


def headers_of(span: Span) -> dict[str, str]:
    """``traceparent`` (and ``tracestate`` when there is one) naming ``span``."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=set_span_in_context(span))
    return carrier


def to_text(span: Span) -> str | None:
    """``span``'s context as stored with a message; None for an invalid span."""
    carrier = headers_of(span)
    traceparent = carrier.get("traceparent")
    if not traceparent:
        return None
    tracestate = carrier.get("tracestate")
    return f"{traceparent}\n{tracestate}" if tracestate else traceparent


def from_text(text: str | None) -> SpanContext | None:
    """The span context stored as ``text``; None when there is none or it does not parse."""
    if not text:
        return None
    traceparent, _, tracestate = text.partition("\n")
    carrier = {"traceparent": traceparent.strip()}
    if tracestate.strip():
        carrier["tracestate"] = tracestate.strip()
    span_context = get_current_span(_W3C.extract(carrier)).get_span_context()
    return span_context if span_context.is_valid else None


def derived_context(key: str) -> SpanContext:
    """A stand-in producer context derived from ``key``, the message's idempotency key."""
    digest = hashlib.sha256(f"encore-trace:{key}".encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return SpanContext(trace_id, span_id, is_remote=True,
                       trace_flags=TraceFlags(TraceFlags.SAMPLED))


def context_of(span_context: SpanContext) -> Context:
    """A context whose current span is ``span_context`` (to start a child of it)."""
    return set_span_in_context(NonRecordingSpan(span_context))
