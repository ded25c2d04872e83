"""Optional OpenTelemetry tracing (docs/tracing.md); never imports ``opentelemetry`` itself."""
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

ENABLING_VARIABLES = ("OTEL_SERVICE_NAME", "OTEL_TRACES_EXPORTER",
                      "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def tracing_wanted(setting: bool, env: Mapping[str, str]) -> bool:
    """True when ``setting`` or :data:`ENABLING_VARIABLES` say so, unless ``OTEL_SDK_DISABLED``."""
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
    """What tracing reads of a production: ``otel``."""

    @property
    def otel(self) -> bool: ...


_lock = threading.Lock()
_decided: list[Tracing | None] = []


def tracing_for(production: TracingSwitch) -> Tracing | None:
    """The process's :class:`~engine.otel.spans.Tracing` when tracing is on and installed, else
    None."""
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
    """The PRODUCER span of a send to ``target``, or :data:`NO_PRODUCER` with tracing off."""
    tracing = tracing_for(production)
    if tracing is None:
        yield NO_PRODUCER
        return
    with tracing.producer(target, batch) as producer:
        yield producer
