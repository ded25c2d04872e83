"""HttpAdapter against real loopback servers: the deadline, classification, failover,
idempotency header, size limit and TLS. Times are scaled down; bounds are generous."""
from __future__ import annotations

import base64
import gzip
import json
import random
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import pytest

from adapters.base import AttemptContext
from adapters.http import HttpAdapter, HttpResponse
from engine.errors import (
    AdapterNotReady,
    ConfigurationError,
    ConnectFailed,
    ConnectionReset,
    Delivery,
    HttpStatusError,
    MessageError,
    ResponseRejected,
    ResponseTimeout,
)
from engine.settings import validate_settings
from operations.http import HttpOperation, HttpReply, HttpRequest
from tests.servers import (
    HttpTestServer,
    TlsFiles,
    make_tls,
    reset_after_request,
    respond,
    sequence,
    trickle,
)

TIMEOUT = 1.0  # seconds: the response timeout of most tests
TRICKLE_SECONDS = 5.0  # what the trickling route would take in full (25 bytes × 0.2 s)
SLOW = 0.5  # seconds: the response timeout the "/slow" route outlasts (by 2 × MARGIN)
MARGIN = 2.0  # seconds past a deadline a cut call may take on a loaded machine
HELD = 2.0  # seconds each of two calls in parallel is held (one after the other: twice that)


def closed_port() -> int:
    """A loopback port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def started(settings: dict, **kwargs) -> HttpAdapter:
    adapter = HttpAdapter(settings, item_name="Payments", **kwargs)
    adapter.start()
    return adapter


def attempt(adapter: HttpAdapter, key: str = "msg-1", timeout: float = TIMEOUT) -> None:
    adapter.begin_attempt(AttemptContext(deadline=time.monotonic() + timeout,
                                         idempotency_key=key))


@pytest.fixture
def server() -> Iterator[HttpTestServer]:
    with HttpTestServer({
        "/ok": respond(200, '{"paid": true}', content_type="application/json"),
        "/trickle": trickle(),
        "/trickle-headers": trickle(headers_too=True),
        "/slow": respond(200, "late", delay=SLOW + MARGIN * 2),
        "/reset": reset_after_request(),
        "/missing": respond(404, "no such thing"),
    }) as srv:
        yield srv


# -- the deadline -------------------------------------------------------------------------

@pytest.mark.parametrize("path", [
    "/trickle",  # headers at once, then one byte every 0.2 s
    "/trickle-headers",  # the status line and headers trickle too
])
def test_a_trickling_server_is_cut_at_the_deadline(server, path):
    adapter = started({"url": server.url, "response_timeout": TIMEOUT})
    attempt(adapter)
    began = time.monotonic()
    with pytest.raises(ResponseTimeout) as caught:
        adapter.send("GET", path)
    elapsed = time.monotonic() - began
    assert TIMEOUT * 0.9 <= elapsed < TIMEOUT + MARGIN < TRICKLE_SECONDS
    assert caught.value.delivery is Delivery.UNKNOWN
    assert caught.value.server == server.url
    assert adapter.end_attempt() == server.url


def test_a_response_after_the_deadline_is_never_returned(server):
    adapter = started({"url": server.url, "response_timeout": SLOW})
    attempt(adapter, timeout=SLOW)
    began = time.monotonic()
    with pytest.raises(ResponseTimeout, match="response timeout of 0.5 seconds"):
        adapter.send("POST", "/slow", json={"amount": 10})
    assert time.monotonic() - began < SLOW + MARGIN < SLOW + MARGIN * 2  # before the answer


def test_the_connection_is_reused_after_a_complete_response(server):
    adapter = started({"url": server.url})
    for _ in range(3):
        attempt(adapter)
        assert adapter.send("GET", "/ok").status == 200
    assert len(server.requests) == 3 and server.connections == 1


# -- classification -----------------------------------------------------------------------

def test_a_reset_after_the_request_is_a_connection_reset_with_unknown_outcome(server):
    adapter = started({"url": server.url})
    attempt(adapter)
    with pytest.raises(ConnectionReset) as caught:
        adapter.send("POST", "/reset", json={"amount": 10})
    assert caught.value.delivery is Delivery.UNKNOWN and caught.value.retryable
    assert caught.value.outcome == "reset"
    assert len(server.requests) == 1


def test_a_refused_port_is_a_connect_failure_and_surely_not_sent():
    url = f"http://127.0.0.1:{closed_port()}/pay"
    adapter = started({"url": url})
    attempt(adapter)
    with pytest.raises(ConnectFailed, match="refused") as caught:
        adapter.send("POST", "", json={})
    assert caught.value.delivery is Delivery.NOT_SENT
    assert caught.value.server == url and caught.value.outcome == "connect_error"


def test_an_unresolvable_host_is_a_connect_failure():
    adapter = started({"url": "http://encore-no-such-host.invalid/pay"})
    attempt(adapter)
    with pytest.raises(ConnectFailed):
        adapter.send("GET")


@pytest.mark.parametrize("retry_after", [
    "7",  # delay in seconds
    format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True),  # date
], ids=["seconds", "http-date"])  # stable ids: the date differs between collections
def test_a_429_carries_its_retry_after_header_and_asks_for_a_retry(retry_after):
    with HttpTestServer({"/pay": respond(429, "slow down",
                                         headers={"Retry-After": retry_after})}) as srv:
        adapter = started({"url": srv.url})
        attempt(adapter)
        with pytest.raises(HttpStatusError) as caught:
            adapter.send("POST", "/pay", json={})
    err = caught.value
    assert err.headers["Retry-After"] == retry_after
    assert (err.status_code, err.code, err.retryable) == (429, "429", True)
    assert err.delivery is Delivery.ANSWERED and err.server == srv.url


def test_a_status_outside_retry_on_status_is_not_retryable(server):
    adapter = started({"url": server.url, "retry_on_status": [503]})
    attempt(adapter)
    with pytest.raises(HttpStatusError, match="404") as caught:
        adapter.send("GET", "/missing")
    assert not caught.value.retryable


def test_a_success_returns_status_headers_and_body(server):
    adapter = started({"url": server.url})
    attempt(adapter)
    reply = adapter.send("GET", "/ok")
    assert reply == HttpResponse(status=200, headers=reply.headers, content=b'{"paid": true}')
    assert reply.text == reply.body == reply.exact_text == '{"paid": true}'
    assert reply.headers["Content-Type"] == "application/json"


def test_a_cookie_the_server_sets_is_sent_back_with_the_session_headers():
    """The item's session keeps what the server asks it to (a load balancer's stickiness, a
    login session) and sends requests' usual headers, beside the caller's own."""
    login = respond(200, "in", headers={"Set-Cookie": "session=s1; Path=/"})
    with HttpTestServer({"/login": login, "/ok": respond(200, "ok")}) as srv:
        adapter = started({"url": srv.url})
        attempt(adapter)
        adapter.send("GET", "/login")
        adapter.send("GET", "/ok", headers={"X-Trace": "t1", "Accept": "text/plain"})
    first, second = srv.requests
    assert "Cookie" not in first.headers
    assert second.headers["Cookie"] == "session=s1"
    assert second.headers["X-Trace"] == "t1" and second.headers["Accept"] == "text/plain"
    assert second.headers["User-Agent"].startswith("python-requests/")


# -- bodies: text and binary --------------------------------------------------------------

BINARY = bytes(random.Random(13).randrange(256) for _ in range(1000))  # not valid UTF-8


def operation(adapter: HttpAdapter) -> HttpOperation:
    return HttpOperation("Files", {}, adapter=adapter)


def test_a_binary_body_keeps_its_exact_bytes():
    with HttpTestServer({"/blob": respond(200, BINARY,
                                          content_type="application/octet-stream")}) as srv:
        adapter = started({"url": srv.url})
        attempt(adapter)
        reply = adapter.send("GET", "/blob")
    assert reply.content == BINARY and reply.exact_text is None
    assert "\ufffd" in reply.text  # the lossy reading a custom operation may also use


def test_the_http_operation_answers_a_binary_body_in_base64_that_round_trips():
    with HttpTestServer({"/blob": respond(200, BINARY,
                                          content_type="application/octet-stream")}) as srv:
        adapter = started({"url": srv.url})
        attempt(adapter)
        reply = operation(adapter).on_message(HttpRequest(method="GET", path="/blob"))
    stored = json.loads(reply.to_json())
    assert set(stored) == {"status", "headers", "body_base64"}
    assert base64.b64decode(stored["body_base64"]) == BINARY
    assert HttpReply.from_json(reply.to_json()).body_base64 == stored["body_base64"]


@pytest.mark.parametrize(("content", "content_type", "text"), [
    (b'{"a": "\xc3\xa9"}', "application/json", '{"a": "\u00e9"}'),  # JSON: UTF-8
    ("caf\u00e9".encode("latin-1"), "text/plain; charset=ISO-8859-1", "caf\u00e9"),  # charset
    (b"<a/>", "application/soap+xml", "<a/>"),  # an XML type
    ("\u00e9t\u00e9".encode(), "application/x-custom; charset=utf-8", "\u00e9t\u00e9"),  # charset
    (b"", "application/octet-stream", ""),  # no body at all
])
def test_the_http_operation_answers_a_text_body_as_text(content, content_type, text):
    with HttpTestServer({"/t": respond(200, content, content_type=content_type)}) as srv:
        adapter = started({"url": srv.url})
        attempt(adapter)
        reply = operation(adapter).on_message(HttpRequest(method="GET", path="/t"))
    stored = json.loads(reply.to_json())
    assert set(stored) == {"status", "headers", "body"} and stored["body"] == text


@pytest.mark.parametrize(("content", "content_type"), [
    (b"plain ascii", "application/octet-stream"),  # a binary type, even if it would decode
    (b"caf\xe9", "text/plain"),  # text that is not UTF-8 and declares no charset
    (b"caf\xe9", "text/plain; charset=utf-8"),  # text that is not in its declared charset
    (b"abc", "text/plain; charset=no-such-charset"),  # a charset Python does not know
])
def test_a_body_that_is_not_exactly_text_is_answered_in_base64(content, content_type):
    with HttpTestServer({"/b": respond(200, content, content_type=content_type)}) as srv:
        adapter = started({"url": srv.url})
        attempt(adapter)
        reply = operation(adapter).on_message(HttpRequest(method="GET", path="/b"))
    assert reply.body is None and base64.b64decode(reply.body_base64 or "") == content


def test_a_request_body_in_base64_is_sent_as_its_exact_bytes():
    with HttpTestServer({"/up": respond(204)}) as srv:
        adapter = started({"url": srv.url})
        attempt(adapter)
        request = HttpRequest.from_dict({"method": "PUT", "path": "/up", "body_base64":
                                         base64.b64encode(BINARY).decode()})
        operation(adapter).on_message(request)
    assert srv.requests[0].body == BINARY


@pytest.mark.parametrize(("body", "expected"), [
    ({"body_base64": "not base64!"}, "body_base64 is not valid base64"),  # bad alphabet
    ({"body": "x", "body_base64": "eA=="}, "not body and body_base64"),  # two bodies
    ({"json": {}, "body": "x"}, "not json and body"),  # two bodies
])
def test_a_malformed_request_body_is_refused_when_it_is_sent(body, expected):
    with pytest.raises(MessageError, match=expected):
        HttpRequest.from_dict({"method": "POST", **body})


# -- failover -----------------------------------------------------------------------------

def test_a_not_sent_failure_moves_to_the_next_server_within_the_same_attempt(server):
    dead = f"http://127.0.0.1:{closed_port()}"
    adapter = started({"servers": [dead, server.url], "bad_server_cooldown": 60})
    attempt(adapter)
    assert adapter.send("GET", "/ok").status == 200
    assert adapter.end_attempt() == f"{dead} → {server.url}"  # each server it went to
    attempt(adapter)  # the dead server is now skipped at once
    adapter.send("GET", "/ok")
    assert adapter.end_attempt() == server.url


def test_a_failover_records_the_next_server_before_its_request_leaves(server):
    dead = f"http://127.0.0.1:{closed_port()}"
    adapter = started({"servers": [dead, server.url], "bad_server_cooldown": 60})
    recorded: list[tuple[str, int]] = []  # (what the store was told, requests seen then)
    def record(text: str) -> None:
        recorded.append((text, len(server.requests)))
    first = adapter.next_server()
    assert first == dead  # what the worker records with the attempt's start
    adapter.begin_attempt(AttemptContext(deadline=time.monotonic() + TIMEOUT,
                                         idempotency_key="k", server=first,
                                         record_server=record))
    assert adapter.send("GET", "/ok").status == 200
    assert recorded == [(f"{dead} → {server.url}", 0)]  # before the request reached it
    assert adapter.end_attempt() == f"{dead} → {server.url}"
    recorded.clear()
    second = adapter.next_server()
    assert second == server.url  # the dead one is bad now
    adapter.begin_attempt(AttemptContext(deadline=time.monotonic() + TIMEOUT,
                                         idempotency_key="k", server=second,
                                         record_server=record))
    adapter.send("GET", "/ok")
    assert recorded == []  # its start named it already: no write of its own
    assert adapter.end_attempt() == server.url


def test_an_outcome_unknown_failure_ends_the_attempt_without_trying_another_server(server):
    with HttpTestServer({"/reset": respond(200, "second")}) as other:
        adapter = started({"servers": [server.url, other.url]})
        attempt(adapter)
        with pytest.raises(ConnectionReset):
            adapter.send("POST", "/reset")
        assert adapter.end_attempt() == server.url
        assert other.requests == []
        attempt(adapter)  # the next attempt goes to the healthy server
        assert adapter.send("POST", "/reset").body == "second"


def test_servers_replace_the_origin_of_url_and_keep_its_path():
    with HttpTestServer({"/api/pay": respond(200, "b")}) as b:
        adapter = started({"url": "http://127.0.0.1:9/api/pay", "servers": [b.url]})
        attempt(adapter)
        assert adapter.send("POST", "/").body == "b"


# -- idempotency, size, pool ---------------------------------------------------------------

def test_the_idempotency_header_carries_the_same_key_on_every_attempt():
    with HttpTestServer({"/pay": sequence(respond(503), respond(503), respond(200, "ok"))}) as srv:
        adapter = started({"url": srv.url, "idempotency_header": "Idempotency-Key"})
        for _ in range(2):
            attempt(adapter, key="msg-42")
            with pytest.raises(HttpStatusError):
                adapter.send("POST", "/pay", json={"amount": 10})
        attempt(adapter, key="msg-42")
        assert adapter.send("POST", "/pay", json={"amount": 10}).body == "ok"
    assert [r.headers.get("Idempotency-Key") for r in srv.requests] == ["msg-42"] * 3


def test_a_body_larger_than_max_response_bytes_is_refused():
    with HttpTestServer({"/big": respond(200, b"x" * 5000)}) as srv:
        adapter = started({"url": srv.url, "max_response_bytes": 1000})
        attempt(adapter)
        with pytest.raises(ResponseRejected, match="Content-Length 5000 exceeds"):
            adapter.send("GET", "/big")


def test_a_compressed_body_is_measured_as_it_expands():
    bomb = gzip.compress(b"0" * 200_000)
    with HttpTestServer({"/zip": respond(200, bomb, headers={"Content-Encoding": "gzip"})}) as srv:
        adapter = started({"url": srv.url, "max_response_bytes": 10_000})
        attempt(adapter)
        with pytest.raises(ResponseRejected, match="body exceeds max_response_bytes 10000"):
            adapter.send("GET", "/zip")


def test_too_many_content_codings_are_an_answered_refusal_not_a_reset():
    body = b"ok"
    for _ in range(6):
        body = gzip.compress(body)
    codings = {"Content-Encoding": ", ".join(["gzip"] * 6)}
    with HttpTestServer({"/layers": respond(200, body, headers=codings)}) as srv:
        adapter = started({"url": srv.url})
        attempt(adapter)
        with pytest.raises(ResponseRejected, match="6 content codings") as refused:
            adapter.send("GET", "/layers")
    assert refused.value.delivery is Delivery.ANSWERED and refused.value.outcome == "error"


def test_slow_calls_hold_one_connection_each_and_do_not_queue():
    with HttpTestServer({"/slow": respond(200, "ok", delay=HELD)}) as srv:
        adapter = started({"url": srv.url}, pool_size=2)
        results: list[int] = []

        def worker() -> None:
            attempt(adapter, timeout=HELD * 3)
            results.append(adapter.send("GET", "/slow").status)

        began = time.monotonic()
        threads = [threading.Thread(target=worker) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [200, 200]
        assert time.monotonic() - began < HELD * 1.9  # in parallel, not one after the other


# -- TLS ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> TlsFiles:
    return make_tls(tmp_path_factory.mktemp("tls"))


def test_https_is_trusted_through_ca_bundle(tls):
    with HttpTestServer({"/ok": respond(200, "secure")}, tls=tls.server_context()) as srv:
        adapter = started({"url": srv.url, "ca_bundle": str(tls.ca)})
        attempt(adapter)
        assert adapter.send("GET", "/ok").body == "secure"


def test_https_with_an_unknown_ca_is_refused_as_not_sent(tls):
    with HttpTestServer({"/ok": respond(200, "secure")}, tls=tls.server_context()) as srv:
        adapter = started({"url": srv.url})
        attempt(adapter)
        with pytest.raises(ConnectFailed, match="certificate verify failed") as caught:
            adapter.send("POST", "/ok", json={})
        assert srv.requests == [] and caught.value.delivery is Delivery.NOT_SENT


def test_turning_verification_off_is_reported_at_start_and_works(tls):
    with HttpTestServer({"/ok": respond(200, "anyway")}, tls=tls.server_context()) as srv:
        adapter = HttpAdapter({"url": srv.url, "ssl_verify": False}, item_name="Payments")
        warnings = adapter.start()
        attempt(adapter)
        assert adapter.send("GET", "/ok").body == "anyway"  # and no InsecureRequestWarning
    assert len(warnings) == 1
    assert "TLS certificate verification is off" in warnings[0] and "Payments" in warnings[0]


def test_a_client_certificate_is_presented(tls):
    context = tls.server_context(require_client_cert=True)
    with HttpTestServer({"/ok": respond(200, "mutual")}, tls=context) as srv:
        adapter = started({"url": srv.url, "ca_bundle": str(tls.ca),
                           "client_cert": str(tls.client_cert), "client_key": str(tls.client_key)})
        attempt(adapter)
        assert adapter.send("GET", "/ok").body == "mutual"


def test_a_missing_ca_bundle_file_keeps_the_adapter_not_ready(tmp_path: Path):
    adapter = HttpAdapter({"url": "https://127.0.0.1:9", "ca_bundle": str(tmp_path / "no.pem")})
    with pytest.raises(AdapterNotReady, match="ca_bundle"):
        adapter.start()


# -- settings -----------------------------------------------------------------------------

@pytest.mark.parametrize("settings, allowed", [
    ({"url": "ftp://x"}, "http:// or https:// URL"),  # wrong scheme
    ({"servers": []}, "needs url"),  # no server at all
    ({"servers": ["https://a", 3]}, "list of http:// or https:// base URLs"),  # not a URL
    ({"url": "http://x", "on_unknown_outcome": "retry"}, "'error', 'suspend'"),  # bad choice
    ({"url": "http://x", "retry_on_status": [429, 700]}, "100–599"),  # not a status
    ({"url": "http://x", "idempotency_header": "Idem Key"}, "HTTP header name"),  # a space
    ({"url": "http://x", "ResponseTimeout": "7"}, "number"),  # CamelCase alias, wrong type
    ({}, "needs url"),  # nothing to call
])
def test_a_wrong_setting_is_refused_naming_what_is_allowed(settings, allowed):
    with pytest.raises(ConfigurationError) as caught:
        HttpAdapter(settings, item_name="Payments")
    assert allowed in str(caught.value) and "Payments" in str(caught.value)


def test_settings_already_validated_by_the_loader_are_accepted_as_they_are():
    declared = HttpAdapter.SETTINGS
    loaded = validate_settings("Payments", {"url": "http://x", "ResponseTimeout": 7}, declared)
    assert loaded["credentials"] is None and loaded["servers"] == ()
    assert HttpAdapter(loaded, item_name="Payments").settings == loaded


def test_host_settings_beside_adapter_settings_are_left_to_the_host():
    adapter = HttpAdapter({"url": "http://x", "RetryInterval": 3, "ResponseTimeout": 7})
    assert adapter.response_timeout == 7.0 and "RetryInterval" not in adapter.settings
    assert adapter.retry_on_status == (429, 502, 503, 504) and adapter.idempotent
