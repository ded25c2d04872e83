"""OpenTelemetry tracing (docs/tracing.md), optional: ``pip install 'encore-engine[otel]'``.

Tracing is on when the production file says ``otel = true`` or when one of the standard
variables that configure an OpenTelemetry SDK is set (``OTEL_SERVICE_NAME``,
``OTEL_TRACES_EXPORTER`` other than ``none``, ``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); ``OTEL_SDK_DISABLED=true`` turns it off whatever
else says. Then:

- every send (:mod:`engine.client`) is a PRODUCER span ``send {target}`` whose context is
  stored with the message (``message_header.trace_context``), so it outlives the daemon;
- every delivery of a message is a CONSUMER span ``process {target}``, a child of that
  context and linked to it (:mod:`engine.otel.spans`);
- every attempt is a CLIENT span following the HTTP client conventions, whose context goes
  out as the W3C ``traceparent`` header of the attempt's requests
  (:class:`engine.otel.spans.ItemTracing`, delivery middleware that the runtime gives
  each item).

This module only decides and hands out; it never imports ``opentelemetry``, so with tracing
off, or the extra absent, Encore runs exactly as without it. It reads one thing of a
production: whether tracing is on (:class:`TracingSwitch`).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

from engine.otel.base import NO_DELIVERY, NO_PRODUCER, Delivery, Producer

if TYPE_CHECKING:
    from engine.otel.spans import Tracing

__all__ = ["ENABLING_VARIABLES", "NO_DELIVERY", "NO_PRODUCER", "Delivery", "Producer",
           "TracingSwitch", "producer_span", "tracing_for", "tracing_wanted"]

log = logging.getLogger(__name__)

# Standard SDK variables whose presence means "this process is meant to be traced".
ENABLING_VARIABLES = ("OTEL_SERVICE_NAME", "OTEL_TRACES_EXPORTER",
                      "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def tracing_wanted(setting: bool, env: Mapping[str, str]) -> bool:
    """True when tracing is on: the production file's ``otel`` ``setting``, or one of
    :data:`ENABLING_VARIABLES` in ``env`` — unless ``OTEL_SDK_DISABLED`` is ``true``."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if setting:
        return True
    for name in ENABLING_VARIABLES:
        value = env.get(name, "").strip().lower()
        if value and not (name == "OTEL_TRACES_EXPORTER" and value == "none"):
            return True
    return False


class TracingSwitch(Protocol):
    """What tracing reads of a production: ``otel``, whether it is on (the file's setting
    or the ``OTEL_*`` variables, :func:`tracing_wanted`) — a
    :class:`~engine.config.production.ProductionConfig` or ``ProductionOutline``."""

    @property
    def otel(self) -> bool: ...


_lock = threading.Lock()
_decided: list[Tracing | None] = []  # the process's tracing, once decided


def tracing_for(production: TracingSwitch) -> Tracing | None:
    """The process's :class:`~engine.otel.spans.Tracing` when ``production.otel`` is on and
    the extra is installed; None otherwise (and then nothing imports ``opentelemetry``).

    The first call sets up the tracer provider: one the application installed already
    (``opentelemetry-instrument``, a test) is used as it is; otherwise an SDK provider is
    built from the ``OTEL_*`` variables (:mod:`engine.otel.provider`)."""
    if not production.otel:
        return None
    with _lock:
        if not _decided:
            _decided.append(_start())
        return _decided[0]


def _start() -> Tracing | None:
    try:
        from engine.otel.provider import process_provider
        from engine.otel.spans import Tracing
    except ImportError as exc:
        log.warning("tracing is on (otel = true or OTEL_* variables) but OpenTelemetry is not "
                    "installed (%s): pip install 'encore-engine[otel]'. Running without "
                    "tracing.", exc)
        return None
    provider = process_provider()
    return None if provider is None else Tracing(provider)


@contextmanager
def producer_span(production: TracingSwitch, target: str,
                  batch: int | None = None) -> Iterator[Producer]:
    """The PRODUCER span of a send to ``target`` (``batch``: the number of messages of a
    batch send), or :data:`NO_PRODUCER` with tracing off. Store ``.context`` with the
    message(s) and report their ids with ``.sent(ids)``."""
    tracing = tracing_for(production)
    if tracing is None:
        yield NO_PRODUCER
        return
    with tracing.producer(target, batch) as producer:
        yield producer
