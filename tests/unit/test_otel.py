"""Tracing's pieces without network: when it is on, the stored context, the attributes of a
CLIENT span, the exporters the OTEL_* variables name, and spans whose attempt never ended."""
from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from engine.attempt import AttemptReport, HttpExchange
from engine.config.production import parse_production
from engine.errors import ClaimLost, ConfigurationError, ResponseTimeout
from engine.otel import NO_PRODUCER, producer_span, tracing_wanted
from engine.store.sql import SqlStore
from tests.claiming import claim_one

ITEM = '[[items]]\nname = "Item"\nclass = "tests.unit.sample_ops:StubOperation"\n'


@pytest.mark.parametrize(("setting", "env", "wanted"), [
    (False, {}, False),  # nothing asks for it
    (True, {}, True),  # otel = true
    (False, {"OTEL_SERVICE_NAME": "payments"}, True),  # an SDK variable
    (False, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
    (False, {"OTEL_TRACES_EXPORTER": "none"}, False),  # "export nothing" asks for nothing
    (True, {"OTEL_TRACES_EXPORTER": "none"}, True),  # spans and traceparent, no export
    (True, {"OTEL_SDK_DISABLED": "true"}, False),  # the standard off switch wins
    (False, {"OTEL_SERVICE_NAME": "", "OTEL_PYTHON_LOG_LEVEL": "debug"}, False),  # empty
])
def test_tracing_is_on_by_the_production_file_or_the_otel_variables(
        setting: bool, env: dict[str, str], wanted: bool) -> None:
    assert tracing_wanted(setting, env) is wanted


def test_the_otel_setting_is_validated_and_read_with_the_environment() -> None:
    assert parse_production(f"[production]\notel = true\n{ITEM}", env={}).otel is True
    assert parse_production(ITEM, env={}).otel is False
    assert parse_production(ITEM, env={"OTEL_SERVICE_NAME": "x"}).otel is True
    with pytest.raises(ConfigurationError, match="'otel'"):
        parse_production(f'[production]\notel = "yes"\n{ITEM}', env={})


def test_with_tracing_off_a_send_has_no_context_to_store() -> None:
    production = parse_production(ITEM, env={})
    with producer_span(production, "Item") as producer:
        assert producer is NO_PRODUCER and producer.context is None


# -- with the extra --------------------------------------------------------------------------

@pytest.fixture
def exporter() -> Any:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    return InMemorySpanExporter()


@pytest.fixture
def tracing(exporter: Any) -> Any:
    """Encore's tracing on a provider of its own (the global one is left alone)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from engine.otel.spans import Tracing
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(provider)


def test_the_stored_context_reads_back_with_its_tracestate(tracing: Any) -> None:
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
    from opentelemetry.trace.span import TraceState

    from engine.otel.context import from_text, to_text
    context = SpanContext(0xABC, 0xDEF, is_remote=False, trace_flags=TraceFlags(1),
                          trace_state=TraceState([("vendor", "v1")]))
    text = to_text(NonRecordingSpan(context))
    assert text == f"00-{0xABC:032x}-{0xDEF:016x}-01\nvendor=v1"
    back = from_text(text)
    assert back is not None and (back.trace_id, back.span_id) == (0xABC, 0xDEF)
    assert back.trace_state == context.trace_state
    assert from_text("not a traceparent") is None and from_text(None) is None


def test_a_message_without_context_gets_the_same_stand_in_every_time() -> None:
    pytest.importorskip("opentelemetry")
    from engine.otel.context import derived_context
    first, again, other = derived_context("k1"), derived_context("k1"), derived_context("k2")
    assert (first.trace_id, first.span_id) == (again.trace_id, again.span_id)
    assert first.trace_id != other.trace_id and first.is_valid


@pytest.mark.parametrize(("report", "expected"), [
    # a success sets no error.type
    (AttemptReport(number=1, outcome="ok", seconds=0.1,
                   exchange=HttpExchange("POST", "http://h/x", 200)), None),
    # an HTTP error response: its status code
    (AttemptReport(number=1, outcome="http_status", seconds=0.1, status_code=503), "503"),
    # a SOAP fault comes with HTTP 500
    (AttemptReport(number=1, outcome="fault", seconds=0.1,
                   exchange=HttpExchange("POST", "http://h/x", 500)), "500"),
    # no response: the error's qualified class name
    (AttemptReport(number=2, outcome="timeout", seconds=7, error=ResponseTimeout("late")),
     "engine.errors.ResponseTimeout"),
    # the operation asked for a retry without an error
    (AttemptReport(number=1, outcome="error", seconds=0.1), "_OTHER"),
])
def test_error_type_follows_the_http_conventions(report: AttemptReport,
                                                 expected: str | None) -> None:
    pytest.importorskip("opentelemetry")
    from engine.otel.semconv import error_type
    assert error_type(report) == expected


def test_http_attributes_redact_credentials_and_name_the_port() -> None:
    pytest.importorskip("opentelemetry")
    from engine.otel.semconv import client_span_name, http_attributes
    exchange = HttpExchange("PURGE", "https://user:secret@api.example:8443/p?q=1", None)
    assert http_attributes(exchange, 429) == {
        "http.request.method": "_OTHER", "http.request.method_original": "PURGE",
        "url.full": "https://REDACTED:REDACTED@api.example:8443/p?q=1",
        "server.address": "api.example", "server.port": 8443,
        "http.response.status_code": 429}
    assert http_attributes(HttpExchange("GET", "https://api.example/"), None)[
        "server.port"] == 443
    assert client_span_name(exchange, "Item") == "HTTP"
    assert client_span_name(None, "Item") == "attempt Item"


@pytest.mark.parametrize(("names", "expected"), [
    ("none", []),  # spans are made, nothing is exported
    ("console", ["ConsoleSpanExporter"]),  # comes with the SDK
    ("console,none", ["ConsoleSpanExporter"]),  # a list
    ("no_such_exporter", []),  # warned about, skipped
])
def test_otel_traces_exporter_names_installed_exporters(
        names: str, expected: list[str], caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from engine.otel.provider import exporters
    with caplog.at_level(logging.WARNING):
        found = [type(e).__name__ for e in exporters({"OTEL_TRACES_EXPORTER": names})]
    assert found == expected
    assert ("no such span exporter" in caplog.text) is ("no_such" in names)


def test_the_default_exporter_is_otlp_over_http() -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from engine.otel.provider import exporters
    assert [type(e).__name__ for e in exporters({})] == ["OTLPSpanExporter"]


@pytest.fixture
def row(store: SqlStore) -> Iterator[Any]:
    from engine.clock import SystemClock
    store.enqueue(target="Item", body_class=None, body="{}")
    yield claim_one(store, "Item", owner="t", now=SystemClock().now(), lease_seconds=60)


def test_an_attempt_cut_short_still_ends_its_span_as_an_error(
        tracing: Any, exporter: Any, row: Any) -> None:
    from opentelemetry.trace import SpanKind, StatusCode
    item = tracing.item("Item")
    with pytest.raises(ClaimLost), item.delivery(row):
        headers = item.before_attempt(row, 1)
        assert set(headers) == {"traceparent"}
        raise ClaimLost("taken over")  # as begin_attempt raises before the request
    spans = {s.kind: s for s in exporter.get_finished_spans()}
    client, consumer = spans[SpanKind.CLIENT], spans[SpanKind.CONSUMER]
    assert client.attributes["error.type"] == "engine.errors.ClaimLost"
    assert client.status.status_code is StatusCode.ERROR
    assert consumer.status.status_code is StatusCode.ERROR and not consumer.links
    assert client.parent.span_id == consumer.context.span_id
    assert headers["traceparent"].split("-")[2] == f"{client.context.span_id:016x}"
