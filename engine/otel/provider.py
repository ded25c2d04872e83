"""The process's tracer provider: the application's own, or one built from ``OTEL_*``."""
from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from importlib.metadata import entry_points
from typing import Any

from opentelemetry import trace

__all__ = ["DEFAULT_SERVICE_NAME", "exporters", "process_provider"]

log = logging.getLogger(__name__)

DEFAULT_SERVICE_NAME = "encore"
EXPORTER_GROUP = "opentelemetry_traces_exporter"


def process_provider(env: Mapping[str, str] | None = None) -> trace.TracerProvider | None:
    """The global tracer provider, set up from ``env`` if unset; None without the SDK."""
    current = trace.get_tracer_provider()
    if not isinstance(current, trace.ProxyTracerProvider):
        return current  # the application's (opentelemetry-instrument, a test)
    env = os.environ if env is None else env
    try:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        log.warning("tracing is on but opentelemetry-sdk is not installed (%s): pip install "
                    "'encore-engine[otel]'. Running without tracing.", exc)
        return None
    named = env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get(
        "OTEL_RESOURCE_ATTRIBUTES", "")
    provider = TracerProvider(resource=Resource.create(
        {} if named else {SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    for exporter in exporters(env):
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return trace.get_tracer_provider()


def exporters(env: Mapping[str, str]) -> Iterator[Any]:
    """The installed span exporters ``OTEL_TRACES_EXPORTER`` names (warns of missing ones)."""
    names = env.get("OTEL_TRACES_EXPORTER", "") or "otlp"
    for name in (n.strip().lower() for n in names.split(",")):
        if not name or name == "none":
            continue
        entry = _entry_point(_otlp_flavour(env) if name == "otlp" else name)
        if entry is None:
            log.warning("OTEL_TRACES_EXPORTER names %r, but no such span exporter is installed "
                        "(pip install 'encore-engine[otel]' brings otlp over HTTP); its spans "
                        "are not exported", name)
            continue
        yield entry.load()()


def _otlp_flavour(env: Mapping[str, str]) -> str:
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf")
    return "otlp_proto_grpc" if protocol.strip().lower() == "grpc" else "otlp_proto_http"


def _entry_point(name: str) -> Any:
    found = entry_points(group=EXPORTER_GROUP, name=name)
    return next(iter(found), None)
