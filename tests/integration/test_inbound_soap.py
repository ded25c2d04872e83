"""SoapService end to end, on SQLite (dialect-free; docs/inbound.md): a real zeep client
generated from the WSDL the service serves, and raw POSTs of envelopes from files, through a
Router to SoapOperations calling real spyne services — the answer, a backend fault, a
timeout (the message goes on), SOAP 1.2, malformed and hostile requests (Client faults,
nothing created), the caller in the trace and refusals logged once."""
from __future__ import annotations

import pytest
import requests
import zeep
import zeep.exceptions
from lxml import etree

from engine.client import wait_for
from engine.portal.trace_view import session_trace
from engine.store import queries
from engine.store.inbound import calls_of
from engine.store.sql import SqlStore
from tests.integration.inbound_support import (
    DATA,
    free_port,
    router,
    running,
    soap_operation,
    soap_service,
)
from tests.servers import SoapTestServer
from tests.waiting import wait_until

pytestmark = pytest.mark.dialect_free

WAIT = 30  # seconds a test waits for a message at most
SOAP11 = "http://schemas.xmlsoap.org/soap/envelope/"
SOAP12 = "http://www.w3.org/2003/05/soap-envelope"


def _messages(store: SqlStore) -> list[dict]:
    return queries.messages(store)


def _fault_text(response: requests.Response) -> str:
    root = etree.fromstring(response.content)
    texts = root.xpath("//faultstring/text() | //*[local-name()='Text']/text()")
    return str(texts[0]) if texts else ""


def _fault_code(response: requests.Response) -> str:
    root = etree.fromstring(response.content)
    codes = root.xpath("//faultcode/text() | //*[local-name()='Value']/text()")
    return str(codes[0]).split(":")[-1] if codes else ""


@pytest.fixture
def backends() -> tuple[SoapTestServer, SoapTestServer]:
    with SoapTestServer("B") as fast, SoapTestServer("S", delay=3.0) as slow:
        yield fast, slow


def _production(fast: SoapTestServer, slow: SoapTestServer, timeout: float = 10) -> str:
    return (soap_service(timeout=timeout) + router(slow_target="Slow")
            + soap_operation("Backend", fast.wsdl) + soap_operation("Slow", slow.wsdl))


def test_a_zeep_client_from_the_served_wsdl_calls_through_the_router(
        store: SqlStore, backends: tuple[SoapTestServer, SoapTestServer]) -> None:
    fast, slow = backends
    port = free_port()
    with running(store, _production(fast, slow), port):
        base = f"http://127.0.0.1:{port}/soap/echo"
        served = requests.get(base + "?wsdl", timeout=10)
        assert served.status_code == 200
        assert f'location="{base}"' in served.text  # the address is where Encore listens
        client = zeep.Client(base + "?wsdl")
        assert client.service.echo(text="hello") == "B:hello"
        with pytest.raises(zeep.exceptions.Fault) as fault:
            client.service.fail(text="boom")
        assert "Server" in str(fault.value.code)
        assert "failed: boom" in fault.value.message  # the backend's own fault text
        assert "ended Error" in fault.value.message
    first = next(m for m in _messages(store) if m["target"] == "EchoSoap" or
                 m["source"] == "EchoSoap")
    assert first["source"] == "EchoSoap" and first["target"] == "Router"
    assert first["session_id"] == first["id"]  # a new session
    assert [p.method for p in fast.posts].count("POST") == 2


def test_a_raw_soap_11_envelope_from_a_file_and_the_trace(
        store: SqlStore, backends: tuple[SoapTestServer, SoapTestServer]) -> None:
    fast, slow = backends
    port = free_port()
    with running(store, _production(fast, slow), port) as daemon:
        reply = requests.post(f"http://127.0.0.1:{port}/soap/echo",
                              data=(DATA / "echo_request.xml").read_bytes(),
                              headers={"Content-Type": "text/xml; charset=utf-8",
                                       "SOAPAction": '"echo"'}, timeout=30)
        assert reply.status_code == 200, reply.text
        assert reply.headers["content-type"].startswith("text/xml")
        root = etree.fromstring(reply.content)
        assert root.tag == f"{{{SOAP11}}}Envelope"
        assert root.xpath("//*[local-name()='echoResult']/text()") == ["B:from a file"]
        request = next(m for m in _messages(store) if m["source"] == "EchoSoap")
        wait_until(lambda: calls_of(store, [request["id"]]), 10, "the call's record")
        del daemon
    call = calls_of(store, [request["id"]])[request["id"]]
    assert call.caller.startswith("127.0.0.1:") and call.request == "SOAP echo"
    assert call.answer.startswith("200") and call.answered_at >= call.received_at
    svg = session_trace(store, request["session_id"])["svg"]
    first = svg.index('data-participant="caller ')
    assert first < svg.index('data-participant="EchoSoap"') < svg.index('data-participant="Router"')
    assert "127.0.0.1:" in svg and 'class="inbound-answer"' in svg


def test_soap_12_where_the_wsdl_binds_it(
        store: SqlStore, backends: tuple[SoapTestServer, SoapTestServer]) -> None:
    fast, slow = backends
    port = free_port()
    envelope = (f'<e:Envelope xmlns:e="{SOAP12}" xmlns:x="urn:encore:echo"><e:Body>'
                '<x:echo><x:text>twelve</x:text></x:echo></e:Body></e:Envelope>')
    with running(store, _production(fast, slow), port):
        reply = requests.post(f"http://127.0.0.1:{port}/soap/echo", data=envelope,
                              headers={"Content-Type": "application/soap+xml"}, timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("application/soap+xml")
    root = etree.fromstring(reply.content)
    assert root.tag == f"{{{SOAP12}}}Envelope"
    assert root.xpath("//*[local-name()='echoResult']/text()") == ["B:twelve"]


def test_a_timeout_answers_a_server_fault_and_the_message_goes_on(
        store: SqlStore, backends: tuple[SoapTestServer, SoapTestServer]) -> None:
    fast, slow = backends
    port = free_port()
    with running(store, _production(fast, slow, timeout=1), port):
        client = zeep.Client(f"http://127.0.0.1:{port}/soap/echo?wsdl")
        with pytest.raises(zeep.exceptions.Fault) as fault:
            client.service.echo(text="slow one")
        assert "Server" in str(fault.value.code)
        assert "not finished after 1 s" in fault.value.message
        assert "it goes on" in fault.value.message
        request = next(m for m in _messages(store) if m["source"] == "EchoSoap")
        ended = wait_for(store, request["id"], WAIT)
        assert ended is not None and ended.status == "Completed"  # it went on
        assert [p.method for p in slow.posts] == ["POST"]


@pytest.mark.parametrize("body, expected", [
    (b"<not-closed>", "not well-formed XML"),
    (b'<a xmlns="urn:x"/>', "not a SOAP envelope"),
    (f'<e:Envelope xmlns:e="{SOAP11}"><e:Body><x:nope xmlns:x="urn:encore:echo"/>'
     '</e:Body></e:Envelope>'.encode(), "is not the request element of an operation"),
    (f'<e:Envelope xmlns:e="{SOAP11}"><e:Body><x:echo xmlns:x="urn:encore:echo">'
     '<x:bogus>1</x:bogus></x:echo></e:Body></e:Envelope>'.encode(),
     "does not fit the WSDL: Unexpected element"),
    ((DATA / "billion_laughs.xml").read_bytes(), "DTD or entity declarations is refused"),
])
def test_a_malformed_request_answers_a_client_fault_and_creates_nothing(
        store: SqlStore, backends: tuple[SoapTestServer, SoapTestServer], body: bytes,
        expected: str) -> None:
    fast, slow = backends
    port = free_port()
    with running(store, _production(fast, slow), port):
        reply = requests.post(f"http://127.0.0.1:{port}/soap/echo", data=body,
                              headers={"Content-Type": "text/xml"}, timeout=30)
        again = requests.post(f"http://127.0.0.1:{port}/soap/echo", data=body,
                              headers={"Content-Type": "text/xml"}, timeout=30)
    assert reply.status_code == 500 and again.status_code == 500
    assert _fault_code(reply) == "Client"
    assert expected in _fault_text(reply)
    assert _messages(store) == []  # nothing created
    refusals = [e for e in queries.events(store, queries.EventFilter())
                if "refused a request" in e["text"]]
    assert len(refusals) == 1  # the second refusal of this client within the minute: counted
    assert refusals[0]["config_name"] == "EchoSoap" and expected in refusals[0]["text"]
    assert fast.posts == []


def test_a_body_over_the_limit_is_refused_before_it_is_read(
        store: SqlStore, backends: tuple[SoapTestServer, SoapTestServer]) -> None:
    fast, slow = backends
    port = free_port()
    items = (soap_service(extra="max_body_bytes = 1000") + router()
             + soap_operation("Backend", fast.wsdl))
    with running(store, items, port):
        reply = requests.post(f"http://127.0.0.1:{port}/soap/echo", data=b"<x/>" * 1000,
                              headers={"Content-Type": "text/xml"}, timeout=30)
    assert reply.status_code == 413 and _fault_code(reply) == "Client"
    assert "max_body_bytes 1000" in _fault_text(reply)
    assert _messages(store) == []


def test_basic_authentication_for_the_wsdl_and_the_calls(
        store: SqlStore, backends: tuple[SoapTestServer, SoapTestServer]) -> None:
    from engine.clock import utcnow
    from engine.serving.auth import hash_password
    from engine.store import accounts
    fast, slow = backends
    accounts.add_user(store, "caller", "viewer", hash_password("pw"), now=utcnow())
    port = free_port()
    items = soap_service(auth="basic") + router() + soap_operation("Backend", fast.wsdl)
    with running(store, items, port):
        url = f"http://127.0.0.1:{port}/soap/echo"
        anonymous = requests.get(url + "?wsdl", timeout=10)
        session = requests.Session()
        session.auth = ("caller", "pw")
        client = zeep.Client(url + "?wsdl", transport=zeep.Transport(session=session))
        answer = client.service.echo(text="signed")
        wrong = requests.post(url, data=(DATA / "echo_request.xml").read_bytes(),
                              auth=("caller", "nope"), headers={"Content-Type": "text/xml"},
                              timeout=30)
    assert anonymous.status_code == 401 and _fault_code(anonymous) == "Client"
    assert answer == "B:signed"
    assert wrong.status_code == 401 and "wrong user name or password" in _fault_text(wrong)
    assert len([m for m in _messages(store) if m["source"] == "EchoSoap"]) == 1
    calls = calls_of(store, [m["id"] for m in _messages(store)])
    assert [c.principal for c in calls.values()] == ["user:caller"]


def test_schema_files_the_wsdl_imports_are_served_beside_it(
        store: SqlStore, backends: tuple[SoapTestServer, SoapTestServer]) -> None:
    """A WSDL whose types are in an xsd:import that xsd:includes another file: both are
    served at ?xsd=NAME, every served reference points there, and a zeep client generated
    from the served WSDL alone (no access to the files) calls through."""
    fast, slow = backends
    wsdl = DATA / "imported" / "orders.wsdl"
    items = (soap_service(path="/soap/imported", wsdl=wsdl) + router()
             + soap_operation("Backend", fast.wsdl))
    port = free_port()
    with running(store, items, port):
        base = f"http://127.0.0.1:{port}/soap/imported"
        served = requests.get(base + "?wsdl", timeout=10)
        assert served.status_code == 200
        assert f'schemaLocation="{base}?xsd=schemas/echo.xsd"' in served.text
        imported = requests.get(base + "?xsd=schemas/echo.xsd", timeout=10)
        assert imported.status_code == 200
        assert f'schemaLocation="{base}?xsd=schemas/common/result.xsd"' in imported.text
        included = requests.get(base + "?xsd=schemas/common/result.xsd", timeout=10)
        assert included.status_code == 200 and 'name="echoResult"' in included.text
        for name in ("../echo_request.xml", "orders.wsdl/../../echo_request.xml", "nope.xsd"):
            refused = requests.get(base, params={"xsd": name}, timeout=10)
            assert refused.status_code == 404, name
            assert "schemas/echo.xsd" in refused.text  # it names what is there
        client = zeep.Client(base + "?wsdl")
        assert client.service.echo(text="imported") == "B:imported"
