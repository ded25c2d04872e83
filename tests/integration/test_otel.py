"""OpenTelemetry tracing (docs/tracing.md) against real loopback HTTP and SOAP servers and real
databases: a PRODUCER span at send whose context is stored with the message, a CONSUMER span
per delivery, a CLIENT span per attempt whose ``traceparent`` the server receives.

The spans go to an in-memory exporter behind the process's global tracer provider, which
these tests install (Encore uses a provider the application has set as it is).
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind

from adapters.http import HttpAdapter
from engine.client import send_message, send_messages, wait_for
from engine.clock import SystemClock
from engine.config.production import ProductionConfig, parse_production
from engine.delivery.worker import MessageWorker, Result
from engine.otel.context import from_text
from engine.otel.spans import Tracing
from engine.runtime.daemon import Daemon
from engine.store.sql import SqlStore
from tests.claiming import claim_one
from tests.servers import HttpTestServer, SoapTestServer, respond, sequence
from tests.waiting import wait_until

pytestmark = pytest.mark.dialect_free

RETRY = 0.05  # seconds between attempts where the test does not stop in between
WAIT = 20.0  # seconds a test waits for a message at most

_exporter = InMemorySpanExporter()
_lock = threading.Lock()
_installed: list[TracerProvider] = []


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans ended during the test. The global provider is set once per process: ours,
    or the SDK provider something set before, to which the exporter is added."""
    with _lock:
        if not _installed:
            if not isinstance(trace.get_tracer_provider(), TracerProvider):
                trace.set_tracer_provider(TracerProvider())
            provider = trace.get_tracer_provider()
            assert isinstance(provider, TracerProvider)
            provider.add_span_processor(SimpleSpanProcessor(_exporter))
            _installed.append(provider)
    _exporter.clear()
    yield _exporter
    _exporter.clear()


def production(item: str, *, otel: bool = True) -> ProductionConfig:
    text = (f"[production]\npoll_interval = 0.05\notel = {str(otel).lower()}\n"
            "shutdown_timeout = 5\n" + item)
    return parse_production(text, env={})


def http_item(url: str, **settings: Any) -> str:
    extra = "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in settings.items())
    return (f'[[items]]\nname = "Orders"\nclass = "operations.http:HttpOperation"\n'
            f'[items.settings]\nurl = "{url}"\n{extra}')


@contextmanager
def running(store: SqlStore, prod: ProductionConfig) -> Iterator[Daemon]:
    daemon = Daemon(prod, store=store, env={})
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


def of_kind(exporter: InMemorySpanExporter, kind: SpanKind) -> list[ReadableSpan]:
    return sorted((s for s in exporter.get_finished_spans() if s.kind == kind),
                  key=lambda s: s.start_time or 0)


def traceparents(requests: list[Any], header: str = "traceparent") -> list[tuple[str, str]]:
    """(trace id, parent span id) of each request's traceparent, in hex."""
    found = []
    for request in requests:
        value = {k.lower(): v for k, v in request.headers.items()}[header]
        _version, trace_id, span_id, _flags = value.split("-")
        found.append((trace_id, span_id))
    return found


def ids(context: SpanContext | None) -> tuple[int, int] | None:
    """(trace id, span id): a context read back is remote, the span's own is not."""
    return None if context is None else (context.trace_id, context.span_id)


def hex_ids(span: ReadableSpan) -> tuple[str, str]:
    context = span.get_span_context()
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def test_a_message_retried_three_times_is_one_trace_of_three_client_spans(
        store: SqlStore, spans: InMemorySpanExporter) -> None:
    route = sequence(respond(503), respond(503), respond(200, "ok"))
    with HttpTestServer({"/orders": route}) as server:
        prod = production(http_item(server.url, retry_interval=RETRY, failure_timeout=10))
        item = prod.item("Orders")
        adapter = HttpAdapter(item.settings, item_name="Orders", clock=SystemClock())
        adapter.start()
        host = item.cls("Orders", item.settings, events=store.events, adapter=adapter)
        worker = MessageWorker.from_settings(host, item.settings, store=store,
                                             clock=SystemClock(),
                                             observers=[Tracing().item("Orders")])
        mid = send_message(store, prod, "Orders", {"method": "POST", "path": "/orders"})
        row = claim_one(store, "Orders", owner="test", now=SystemClock().now(),
                               lease_seconds=60)
        assert row is not None and worker.deliver(row) is Result.COMPLETED
        adapter.stop()
    [producer] = of_kind(spans, SpanKind.PRODUCER)
    clients = of_kind(spans, SpanKind.CLIENT)
    assert producer.name == "send Orders"
    assert producer.attributes["messaging.message.id"] == str(mid)
    assert [c.name for c in clients] == ["POST"] * 3
    assert [c.attributes["http.request.resend_count"] for c in clients] == [0, 1, 2]
    assert [c.attributes["http.response.status_code"] for c in clients] == [503, 503, 200]
    assert [c.attributes.get("error.type") for c in clients] == ["503", "503", None]
    for client in clients:
        assert client.attributes["http.request.method"] == "POST"
        assert client.attributes["url.full"] == server.url + "/orders"
        assert client.attributes["server.address"] == "127.0.0.1"
        assert client.attributes["server.port"] == server.port
        assert client.parent is not None
        assert client.parent.span_id == producer.get_span_context().span_id
    # one trace, the producer's; the server saw each attempt's own span id
    assert {hex_ids(c)[0] for c in clients} == {hex_ids(producer)[0]}
    assert traceparents(server.requests) == [hex_ids(c) for c in clients]


def test_every_soap_attempt_sends_the_same_trace_id_and_a_new_span_id(
        store: SqlStore, spans: InMemorySpanExporter) -> None:
    with SoapTestServer("S") as soap:
        item = ('[[items]]\nname = "Ledger"\nclass = "operations.soap:SoapOperation"\n'
                f'[items.settings]\nwsdl = "{soap.wsdl}"\nreply_code_actions = "E=R"\n'
                f"retry_interval = {RETRY}\nmax_attempts = 3\nfailure_timeout = 10\n")
        prod = production(item)
        with running(store, prod):
            mid = send_message(store, prod, "Ledger", {"operation": "fail",
                                                        "args": {"text": "x"}})
            row = wait_for(store, mid, timeout=WAIT)
        posts = soap.posts
    assert row is not None and row.status == "Error"
    [producer] = of_kind(spans, SpanKind.PRODUCER)
    [consumer] = of_kind(spans, SpanKind.CONSUMER)
    clients = of_kind(spans, SpanKind.CLIENT)
    assert len(posts) == len(clients) == 3
    sent = traceparents(posts)
    assert {trace_id for trace_id, _ in sent} == {hex_ids(producer)[0]}
    assert len({span_id for _, span_id in sent}) == 3
    assert sent == [hex_ids(c) for c in clients]
    assert [c.attributes["http.request.resend_count"] for c in clients] == [0, 1, 2]
    for client in clients:
        assert client.parent is not None
        assert client.parent.span_id == consumer.get_span_context().span_id
        assert client.attributes["http.request.method"] == "POST"
        assert client.attributes["http.response.status_code"] == 500
        assert client.attributes["error.type"] == "500"
        assert client.attributes["url.full"].startswith(soap.url)
    assert consumer.name == "process Ledger"
    assert consumer.attributes["encore.delivery.result"] == "Error"
    assert consumer.attributes["error.type"] == "500"


def test_the_consumer_is_a_child_of_the_producer_sent_while_no_daemon_ran(
        store: SqlStore, spans: InMemorySpanExporter) -> None:
    with HttpTestServer({"/orders": respond(200, "ok")}) as server:
        prod = production(http_item(server.url))
        with running(store, prod):
            pass  # a daemon ran and stopped before the message was sent
        mid = send_message(store, prod, "Orders", {"method": "POST", "path": "/orders"})
        stored = store.get_message(mid)
        with running(store, prod):  # a new daemon delivers it
            row = wait_for(store, mid, timeout=WAIT)
        sent = traceparents(server.requests)
    assert row is not None and row.status == "Completed"
    [producer] = of_kind(spans, SpanKind.PRODUCER)
    [consumer] = of_kind(spans, SpanKind.CONSUMER)
    [client] = of_kind(spans, SpanKind.CLIENT)
    assert stored is not None and ids(from_text(stored.trace_context)) == ids(producer.context)
    assert consumer.parent is not None
    assert consumer.parent.span_id == producer.get_span_context().span_id
    assert [ids(link.context) for link in consumer.links] == [ids(producer.context)]
    assert consumer.attributes["messaging.message.id"] == str(mid)
    assert consumer.attributes["messaging.operation.type"] == "process"
    assert client.parent is not None
    assert client.parent.span_id == consumer.get_span_context().span_id
    assert sent == [hex_ids(client)]


def test_a_daemon_restart_between_two_attempts_keeps_the_trace(
        store: SqlStore, spans: InMemorySpanExporter) -> None:
    route = sequence(respond(503), respond(200, "ok"))
    with HttpTestServer({"/orders": route}) as server:
        prod = production(http_item(server.url, retry_interval=1.5, failure_timeout=30))
        with running(store, prod):
            mid = send_message(store, prod, "Orders", {"method": "POST", "path": "/orders"})
            wait_until(lambda: any(a.ended_at for a in store.attempts(mid)), WAIT,
                       "the attempt to end")
        assert store.get_message(mid).status == "Queued"  # released, retry pending
        with running(store, prod):
            row = wait_for(store, mid, timeout=WAIT)
        sent = traceparents(server.requests)
    assert row is not None and row.status == "Completed"
    [producer] = of_kind(spans, SpanKind.PRODUCER)
    consumers = of_kind(spans, SpanKind.CONSUMER)
    clients = of_kind(spans, SpanKind.CLIENT)
    trace_id = hex_ids(producer)[0]
    assert [c.attributes["encore.delivery.result"] for c in consumers] == ["Released",
                                                                           "Completed"]
    assert {hex_ids(s)[0] for s in consumers + clients} == {trace_id}
    assert all(c.parent is not None and c.parent.span_id == producer.context.span_id
               for c in consumers)
    assert [c.attributes["http.request.resend_count"] for c in clients] == [0, 1]
    assert sent == [hex_ids(c) for c in clients]


def test_a_batch_send_is_one_producer_span_stored_with_every_message(
        store: SqlStore, spans: InMemorySpanExporter) -> None:
    prod = production(http_item("http://127.0.0.1:9"))
    sent = send_messages(store, prod, "Orders", [{"method": "POST"}, {"method": "PUT"}])
    [producer] = of_kind(spans, SpanKind.PRODUCER)
    assert producer.attributes["messaging.batch.message_count"] == 2
    for message_id in sent:
        row = store.get_message(message_id)
        assert row is not None and ids(from_text(row.trace_context)) == ids(producer.context)


def test_with_tracing_off_nothing_is_traced_and_no_header_is_sent(
        store: SqlStore, spans: InMemorySpanExporter) -> None:
    with HttpTestServer({"/orders": respond(200, "ok")}) as server:
        prod = production(http_item(server.url), otel=False)
        with running(store, prod):
            mid = send_message(store, prod, "Orders", {"method": "POST", "path": "/orders"})
            row = wait_for(store, mid, timeout=WAIT)
    assert row is not None and row.status == "Completed" and row.trace_context is None
    assert "traceparent" not in {k.lower() for k in server.requests[0].headers}
    assert spans.get_finished_spans() == ()

