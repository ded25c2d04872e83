"""Hostile XML and the SOAP contract (docs/security.md), on SQLite (dialect-free).

Inbound: an envelope of 60,000 attributes on one element (zeep alone: 15 s in one call
holding the interpreter, every thread of the daemon stalled) answers a Client fault naming
the limit within a few seconds, creates nothing, and other calls go on meanwhile; a
service's limits are its settings. A SOAPAction of another operation, two Body elements, a
``mustUnderstand`` header block, a hostile ``Host`` header: each as the WSDL says.

Outbound: a real loopback SOAP server answering such an envelope fails the attempt as
answered, naming the limit, within the response timeout; a non-idempotent item sends once.
"""
from __future__ import annotations

import threading
import time

import pytest
import requests
from lxml import etree

from adapters.base import AttemptContext
from adapters.soap import SoapAdapter
from engine.client import send_message, wait_for
from engine.config.production import parse_production
from engine.errors import AdapterNotReady, Delivery, ResponseRejected
from engine.runtime.daemon import Daemon
from engine.store import queries
from engine.store.sql import SqlStore
from tests.integration.inbound_support import (
    DATA,
    free_port,
    router,
    running,
    soap_operation,
    soap_service,
)
from tests.servers import (
    HttpTestServer,
    SoapTestServer,
    respond,
    soap_envelope,
    soap_wsdl,
    soap_xml,
)

pytestmark = pytest.mark.dialect_free

SOAP11 = "http://schemas.xmlsoap.org/soap/envelope/"
SOAP12 = "http://www.w3.org/2003/05/soap-envelope"
ECHO = "urn:encore:echo"  # the example WSDL's namespace
HOSTILE_ATTRIBUTES = 60_000  # attributes on one element: 650 KB, under max_body_bytes
BOUND = 5.0  # seconds: generous, for a loaded machine (zeep without the limits: 15 s or more)
PATIENT = 10.0  # seconds: the outbound tests' response timeout


def _attributes(count: int) -> str:
    return " ".join(f'a{i}="v"' for i in range(count))


def _envelope(body: str, *, header: str = "", version: str = SOAP11) -> str:
    head = f"<e:Header>{header}</e:Header>" if header else ""
    return (f'<e:Envelope xmlns:e="{version}" xmlns:x="{ECHO}">{head}<e:Body>{body}'
            "</e:Body></e:Envelope>")


def _echo(text: str = "hi", attributes: str = "") -> str:
    return f"<x:echo {attributes}><x:text>{text}</x:text></x:echo>"


def _post(port: int, envelope: str, **headers: str) -> requests.Response:
    headers = {"Content-Type": "text/xml; charset=utf-8", **headers}
    return requests.post(f"http://127.0.0.1:{port}/soap/echo", data=envelope.encode(),
                         headers=headers, timeout=60)


def _fault(response: requests.Response) -> tuple[str, str]:
    """(code without its prefix, text) of a SOAP 1.1 or 1.2 fault."""
    root = etree.fromstring(response.content)
    codes = root.xpath("//faultcode/text() | //*[local-name()='Value']/text()")
    texts = root.xpath("//faultstring/text() | //*[local-name()='Text']/text()")
    return str(codes[0]).split(":")[-1], str(texts[0])


@pytest.fixture
def backend() -> SoapTestServer:
    with SoapTestServer("B") as server:
        yield server


def _production(backend: SoapTestServer, extra: str = "") -> str:
    return (soap_service(extra=extra) + router()
            + soap_operation("Backend", backend.wsdl))


def _created(store: SqlStore) -> int:
    return len(queries.messages(store))


# -- inbound: the XML limits ------------------------------------------------------------------

def test_an_envelope_of_60000_attributes_is_refused_quickly_while_other_calls_go_on(
        store: SqlStore, backend: SoapTestServer) -> None:
    port = free_port()
    hostile = _envelope(_echo(attributes=_attributes(HOSTILE_ATTRIBUTES)))
    answers: list[tuple[float, requests.Response]] = []

    def attack() -> None:
        for _ in range(3):
            began = time.monotonic()
            reply = _post(port, hostile)
            answers.append((time.monotonic() - began, reply))

    with running(store, _production(backend), port):
        assert _post(port, _envelope(_echo("warm"))).status_code == 200
        before = per_call = _created(store)  # a call's request, its hops and their responses
        attacker = threading.Thread(target=attack)
        attacker.start()
        calls = []
        while attacker.is_alive() or not calls:
            began = time.monotonic()
            reply = _post(port, _envelope(_echo("meanwhile")))
            calls.append(time.monotonic() - began)
            assert reply.status_code == 200, reply.text
        attacker.join()
        created = _created(store) - before
    assert len(answers) == 3
    for took, reply in answers:
        assert reply.status_code == 500
        code, text = _fault(reply)
        assert code == "Client"
        assert f"{HOSTILE_ATTRIBUTES} attributes" in text and "xml_max_attributes 256" in text
        assert took < BOUND
    assert max(calls) < BOUND  # the other calls were never held for a hostile one
    assert created == per_call * len(calls)  # the good calls' messages, no other


@pytest.mark.parametrize(("settings", "envelope", "limit"), [
    # a service's own, lower limits refuse what the defaults let through
    ("xml_max_attributes = 2", _envelope(_echo(attributes='p="1" q="2" r="3"')),
     "xml_max_attributes 2"),
    ("xml_max_depth = 3", _envelope(_echo()), "xml_max_depth 3"),  # Envelope/Body/echo/text: 4
    ("xml_max_elements = 3", _envelope(_echo()), "xml_max_elements 3"),
    # the Envelope's two children: a Header and the Body
    ("xml_max_children = 1", _envelope(_echo(), header="<x:h/>"), "xml_max_children 1"),
    ("xml_max_text_chars = 5", _envelope(_echo("longer")), "xml_max_text_chars 5"),
])
def test_a_service_s_xml_limits_are_its_settings(store: SqlStore, backend: SoapTestServer,
                                                 settings: str, envelope: str,
                                                 limit: str) -> None:
    port = free_port()
    with running(store, _production(backend, settings), port):
        reply = _post(port, envelope)
        assert _created(store) == 0
    assert reply.status_code == 500
    code, text = _fault(reply)
    assert code == "Client" and limit in text


def test_a_soap_12_request_past_a_limit_answers_a_sender_fault(
        store: SqlStore, backend: SoapTestServer) -> None:
    port = free_port()
    envelope = _envelope(_echo(attributes=_attributes(300)), version=SOAP12)
    with running(store, _production(backend), port):
        reply = _post(port, envelope, **{"Content-Type": "application/soap+xml"})
    assert reply.status_code == 400
    assert _fault(reply)[0] == "Sender" and "xml_max_attributes" in _fault(reply)[1]


# -- inbound: the SOAP contract -----------------------------------------------------------

@pytest.mark.parametrize(("headers", "envelope", "status", "code", "text"), [
    # a body for echo sent as another operation's action: refused, naming both
    ({"SOAPAction": '"fail"'}, _envelope(_echo()), 500, "Client",
     "'fail' names operation fail, but the Body holds the request element of operation echo"),
    # an action that is no operation's
    ({"SOAPAction": "deleteEverything"}, _envelope(_echo()), 500, "Client",
     "'deleteEverything' names no operation of the WSDL"),
    # SOAP 1.2: the action parameter of the Content-Type
    ({"Content-Type": 'application/soap+xml; charset=utf-8; action="refuse"'},
     _envelope(_echo(), version=SOAP12), 400, "Sender", "names operation refuse"),
    # a second Body element is not silently dropped
    ({}, _envelope(_echo() + "<x:fail><x:text>boom</x:text></x:fail>"), 500, "Client",
     "the Body holds 2 elements"),
    # a header block addressed to this node that it must understand
    ({}, _envelope(_echo(), header='<s:Security xmlns:s="urn:sec" e:mustUnderstand="1"/>'),
     500, "MustUnderstand", "{urn:sec}Security is marked mustUnderstand"),
    # SOAP 1.2: mustUnderstand="true", no role (the ultimate receiver)
    ({"Content-Type": "application/soap+xml"},
     _envelope(_echo(), header='<s:T xmlns:s="urn:sec" e:mustUnderstand="true"/>',
               version=SOAP12), 500, "MustUnderstand", "{urn:sec}T is marked mustUnderstand"),
])
def test_a_request_against_the_soap_contract_is_refused_and_creates_nothing(
        store: SqlStore, backend: SoapTestServer, headers: dict[str, str], envelope: str,
        status: int, code: str, text: str) -> None:
    port = free_port()
    with running(store, _production(backend), port):
        reply = _post(port, envelope, **headers)
        assert _created(store) == 0
    assert reply.status_code == status, reply.text
    assert _fault(reply)[0] == code
    assert text in _fault(reply)[1]


@pytest.mark.parametrize(("headers", "envelope"), [
    ({"SOAPAction": '"echo"'}, _envelope(_echo())),  # the declared action, quoted
    ({"SOAPAction": '""'}, _envelope(_echo())),  # an empty action: the URL says it
    ({}, _envelope(_echo())),  # none at all
    ({"Content-Type": 'application/soap+xml; action="echo"'},
     _envelope(_echo(), version=SOAP12)),  # SOAP 1.2, the declared action
    # mustUnderstand="0", and a block for another node: not this service's to understand
    ({}, _envelope(_echo(), header='<s:A xmlns:s="urn:sec" e:mustUnderstand="0"/>'
                                   '<s:B xmlns:s="urn:sec" e:mustUnderstand="1" '
                                   'e:actor="urn:some-other-node"/>')),
])
def test_a_request_as_the_wsdl_says_is_answered(store: SqlStore, backend: SoapTestServer,
                                                headers: dict[str, str], envelope: str) -> None:
    port = free_port()
    with running(store, _production(backend), port):
        reply = _post(port, envelope, **headers)
    assert reply.status_code == 200, reply.text
    assert b"B:hi" in reply.content


@pytest.mark.parametrize(("extra", "expected"), [
    ("", "http://127.0.0.1:{port}/soap/echo"),  # the address the server is bound to
    ('public_url = "https://soap.example.com/orders"', "https://soap.example.com/orders"),
])
def test_the_served_wsdl_never_takes_its_address_from_the_host_header(
        store: SqlStore, backend: SoapTestServer, extra: str, expected: str) -> None:
    port = free_port()
    items = (soap_service(wsdl=DATA / "imported" / "orders.wsdl", extra=extra) + router()
             + soap_operation("Backend", backend.wsdl))
    with running(store, items, port):
        served = [requests.get(f"http://127.0.0.1:{port}/soap/echo?{query}", timeout=10,
                               headers={"Host": "evil.example.net"})
                  for query in ("wsdl", "xsd=schemas/echo.xsd")]
    address = expected.format(port=port)
    assert [s.status_code for s in served] == [200, 200]
    assert not any("evil.example.net" in s.text for s in served)
    assert f'location="{address}"' in served[0].text  # the SOAP address
    assert f'"{address}?xsd=schemas/echo.xsd"' in served[0].text  # a schema's location
    assert f'"{address}?xsd=schemas/common/result.xsd"' in served[1].text


# -- outbound ---------------------------------------------------------------------------------

HOSTILE_RESPONSE = soap_envelope(f'<echoResponse xmlns="urn:encore:test" '
                                 f'{_attributes(HOSTILE_ATTRIBUTES)}>'
                                 "<echoResult>x</echoResult></echoResponse>")


def _hostile_server() -> HttpTestServer:
    return HttpTestServer({"GET /soap": soap_wsdl("/soap"),
                           "POST /soap": soap_xml(200, HOSTILE_RESPONSE)})


def test_a_response_of_60000_attributes_fails_the_attempt_as_answered_naming_the_limit() -> None:
    with _hostile_server() as server:
        adapter = SoapAdapter({"wsdl": server.url + "/soap?wsdl", "response_timeout": 3},
                              item_name="Payments")
        adapter.start()
        adapter.begin_attempt(AttemptContext(deadline=time.monotonic() + 3,
                                             idempotency_key="m-1"))
        began = time.monotonic()
        with pytest.raises(ResponseRejected) as caught:
            adapter.invoke("echo", {"text": "x"})
        took = time.monotonic() - began
    assert caught.value.delivery == Delivery.ANSWERED and not caught.value.retryable
    assert "<{urn:encore:test}echoResponse> with 60001 attributes" in str(caught.value)
    assert "xml_max_attributes 256" in str(caught.value)
    assert took < BOUND  # zeep alone: 15 s, far past response_timeout = 3


def test_an_item_may_raise_its_xml_limits() -> None:
    reply = soap_envelope('<echoResponse xmlns="urn:encore:test" ' + _attributes(300)
                          + "><echoResult>wide</echoResult></echoResponse>")
    with HttpTestServer({"GET /soap": soap_wsdl("/soap"),
                         "POST /soap": soap_xml(200, reply)}) as server:
        adapter = SoapAdapter({"wsdl": server.url + "/soap?wsdl", "xml_max_attributes": 400},
                              item_name="Payments")
        adapter.start()
        adapter.begin_attempt(AttemptContext(deadline=time.monotonic() + PATIENT,
                                             idempotency_key="m-1"))
        assert adapter.invoke("echo", {"text": "x"}) == "wide"


def test_a_wsdl_past_the_xml_limits_leaves_the_adapter_not_ready_naming_the_limit() -> None:
    wsdl = ('<definitions xmlns="http://schemas.xmlsoap.org/wsdl/" '
            + _attributes(HOSTILE_ATTRIBUTES) + "/>")
    with HttpTestServer({"GET /soap": respond(200, wsdl, content_type="text/xml")}) as server:
        adapter = SoapAdapter({"wsdl": server.url + "/soap?wsdl"}, item_name="Payments")
        began = time.monotonic()
        with pytest.raises(AdapterNotReady, match="xml_max_attributes 256"):
            adapter.start()
    assert time.monotonic() - began < BOUND


@pytest.mark.parametrize("idempotent", [False, True])
def test_a_hostile_response_is_never_sent_again(store: SqlStore, idempotent: bool) -> None:
    with _hostile_server() as server:
        items = (f'[production]\npoll_interval = 0.05\n[[items]]\nname = "Payments"\n'
                 f'class = "operations.soap:SoapOperation"\n[items.settings]\n'
                 f'wsdl = "{server.url}/soap?wsdl"\nresponse_timeout = 3\n'
                 f"idempotent = {str(idempotent).lower()}\nretry_interval = 0\n"
                 "failure_timeout = 4\n")
        production = parse_production(items, env={})
        daemon = Daemon(production, store=store, env={})
        daemon.start()
        try:
            mid = send_message(store, production, "Payments",
                               {"operation": "echo", "args": {"text": "pay"}})
            row = wait_for(store, mid, timeout=30)
        finally:
            daemon.stop()
        posts = [r for r in server.requests if r.method == "POST"]
    assert row is not None and row.status == "Error"
    attempts = store.attempts(mid)
    assert len(attempts) == 1 and len(posts) == 1
    assert "xml_max_attributes" in (attempts[0].error_text or "")
