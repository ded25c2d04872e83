"""SoapAdapter against a real spyne service and a raw SOAP responder: faults, failover
(seed 003, scaled ÷20), the deadline, hostile XML, WSDL loading and the idempotency header."""
from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from zeep.helpers import serialize_object

from adapters.base import AttemptContext, InvalidRequest
from adapters.soap import SoapAdapter
from engine.attempt import servers_of
from engine.errors import (
    AdapterNotReady,
    ConnectFailed,
    Delivery,
    HttpStatusError,
    RemoteFault,
    ResponseRejected,
    ResponseTimeout,
)
from engine.retry import ReplyCodeActions
from tests.servers import (
    HttpTestServer,
    SoapTestServer,
    respond,
    sequence,
    soap_envelope,
    soap_fault,
    soap_reply,
    soap_wsdl,
    soap_xml,
    trickle,
)

# seconds: the response timeout of the tests that wait for one to pass (the seed's 10 s,
# scaled); it bounds the WSDL's load and parse too: no less than a second on a loaded machine
TIMEOUT = 1.0
PATIENT = 10.0  # seconds: the response timeout and attempt deadline of the other tests
SERVER_DELAY = 5.0  # seconds each slow server takes (the seed's 11 s): far past the timeout
MARGIN = 2.0  # seconds past the timeout a cut call may take on a loaded machine

XXE = soap_envelope(
    '<echoResponse xmlns="urn:encore:test"><echoResult>&xxe;</echoResult></echoResponse>',
    prolog='<!DOCTYPE soap:Envelope [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>\n')
BILLION_LAUGHS = soap_envelope(
    '<echoResponse xmlns="urn:encore:test"><echoResult>&lol9;</echoResult></echoResponse>',
    prolog="<!DOCTYPE lolz [<!ENTITY lol \"lol\">"
           + "".join(f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">'
                     for i in range(1, 10))
           + "]>\n")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def started(settings: dict) -> SoapAdapter:
    adapter = SoapAdapter({"response_timeout": PATIENT, **settings}, item_name="Payments")
    adapter.start()
    return adapter


def attempt(adapter: SoapAdapter, key: str = "msg-1", timeout: float = PATIENT) -> None:
    adapter.begin_attempt(AttemptContext(deadline=time.monotonic() + timeout,
                                         idempotency_key=key))


def raw_soap(post_route) -> HttpTestServer:
    """A server offering the static echo WSDL at /soap?wsdl and ``post_route`` for calls."""
    return HttpTestServer({"GET /soap": soap_wsdl("/soap"), "POST /soap": post_route})


@pytest.fixture
def spyne() -> Iterator[SoapTestServer]:
    with SoapTestServer("A") as srv:
        yield srv


# -- calls and faults ---------------------------------------------------------------------

def test_an_operation_returns_zeep_s_result(spyne):
    adapter = started({"wsdl": spyne.wsdl})
    attempt(adapter)
    assert serialize_object(adapter.invoke("echo", {"text": "hi"})) == "A:hi"
    assert adapter.end_attempt() == spyne.url + "/"
    assert adapter.operations == ("echo", "fail", "refuse")


def test_a_spyne_fault_is_a_remote_fault_that_is_not_retried(spyne):
    adapter = started({"wsdl": spyne.wsdl})
    attempt(adapter)
    with pytest.raises(RemoteFault, match="refused: no") as caught:
        adapter.invoke("refuse", {"text": "no"})
    err = caught.value
    assert err.fault_code == "Client.Refused" and "soap11env:Client.Refused" in str(err)
    assert err.code == err.fault_code and not err.retryable
    assert err.delivery is Delivery.ANSWERED and err.server == spyne.url + "/"


def test_a_soap_fault_inside_an_http_500_is_a_remote_fault():
    with raw_soap(soap_xml(500, soap_fault("soap:Server.Busy", "ledger locked"))) as srv:
        adapter = started({"wsdl": srv.url + "/soap?wsdl"})
        attempt(adapter)
        with pytest.raises(RemoteFault, match="ledger locked") as caught:
            adapter.invoke("echo", {"text": "x"})
    assert caught.value.fault_code == "Server.Busy" and not caught.value.retryable
    assert "SOAP fault soap:Server.Busy from" in str(caught.value)


@pytest.mark.parametrize(("operation", "rules", "retry"), [
    ("fail", "E#Server=R", True),  # Ensemble style: the local name of soap11env:Server
    ("fail", "E#soap:Server=R", True),  # a rule with its own prefix compares local parts
    ("fail", "E#SOAP11ENV:server=R", True),  # the server's own prefix, any case
    ("fail", "E#Client=R", False),  # another code
    ("fail", "E#Server.Busy=R", False),  # a more specific code does not cover the generic one
    ("refuse", "E#Client=R", True),  # Client covers the dotted Client.Refused (SOAP 1.1)
    ("refuse", "E#Client.Refused=R", True),  # the full local name
    ("refuse", "E#Server=R", False),  # another code
])
def test_reply_code_actions_match_a_spyne_fault_by_its_local_name(spyne, operation, rules,
                                                                  retry):
    adapter = started({"wsdl": spyne.wsdl})
    attempt(adapter)
    with pytest.raises(RemoteFault) as caught:
        adapter.invoke(operation, {"text": "x"})
    assert "SOAP fault soap11env:" in str(caught.value)  # the code as the server sent it
    assert ReplyCodeActions.parse(rules).evaluate(caught.value).retry is retry


def test_an_http_503_without_a_fault_is_a_retryable_status_error():
    with raw_soap(respond(503, "<html>down</html>", headers={"Retry-After": "2"},
                          content_type="text/html")) as srv:
        adapter = started({"wsdl": srv.url + "/soap?wsdl"})
        attempt(adapter)
        with pytest.raises(HttpStatusError) as caught:
            adapter.invoke("echo", {"text": "x"})
    assert (caught.value.status_code, caught.value.retryable) == (503, True)
    assert caught.value.headers["Retry-After"] == "2"


def test_an_unknown_operation_names_the_available_ones(spyne):
    adapter = started({"wsdl": spyne.wsdl})
    with pytest.raises(InvalidRequest, match="'pay'; the WSDL offers: echo, fail, refuse") as caught:
        adapter.invoke("pay", {})
    assert not caught.value.retryable and spyne.posts == []


def test_arguments_that_do_not_fit_are_refused_before_sending(spyne):
    adapter = started({"wsdl": spyne.wsdl})
    attempt(adapter)
    with pytest.raises(InvalidRequest, match="unexpected keyword argument 'amount'"):
        adapter.invoke("echo", {"amount": 3})
    assert spyne.posts == []


# -- failover (seed 003) -------------------------------------------------------------------

def test_slow_servers_are_marked_bad_and_attempts_go_a_b_c_then_a_again():
    with SoapTestServer("A", delay=SERVER_DELAY) as a, \
            SoapTestServer("B", delay=SERVER_DELAY) as b, \
            SoapTestServer("C", delay=SERVER_DELAY) as c:
        adapter = started({"wsdl": a.wsdl, "servers": [a.url, b.url, c.url],
                           "response_timeout": TIMEOUT})
        used = []
        for _ in range(4):  # what the worker does, with retry_interval = 0
            attempt(adapter, timeout=TIMEOUT)
            began = time.monotonic()
            with pytest.raises(ResponseTimeout) as caught:
                adapter.invoke("echo", {"text": "pay"})
            assert time.monotonic() - began < TIMEOUT + MARGIN < SERVER_DELAY
            assert caught.value.delivery is Delivery.UNKNOWN
            used.append(adapter.end_attempt())
        posts = (len(a.posts), len(b.posts), len(c.posts))
    assert used == [a.url + "/", b.url + "/", c.url + "/", a.url + "/"]
    assert posts == (2, 1, 1)  # one request per attempt: a timeout is not re-sent at once


def test_a_not_sent_failure_moves_to_the_next_server_within_the_attempt(spyne):
    dead = f"http://127.0.0.1:{closed_port()}"
    adapter = started({"wsdl": spyne.wsdl, "servers": [dead, spyne.url]})
    attempt(adapter)
    assert serialize_object(adapter.invoke("echo", {"text": "x"})) == "A:x"
    assert servers_of(adapter.end_attempt()) == [dead + "/", spyne.url + "/"]


def test_when_every_server_refuses_the_last_connect_failure_is_raised():
    dead = [f"http://127.0.0.1:{closed_port()}" for _ in range(2)]
    with raw_soap(soap_xml(200, soap_reply("x"))) as srv:
        adapter = started({"wsdl": srv.url + "/soap?wsdl", "servers": dead})
        attempt(adapter)
        with pytest.raises(ConnectFailed) as caught:
            adapter.invoke("echo", {"text": "x"})
    assert caught.value.server == dead[1] + "/soap"


# -- the deadline and hostile responses ----------------------------------------------------

def test_a_trickling_soap_server_is_cut_at_the_deadline():
    with raw_soap(trickle(soap_reply("slow").encode())) as srv:
        adapter = started({"wsdl": srv.url + "/soap?wsdl", "response_timeout": TIMEOUT})
        attempt(adapter, timeout=TIMEOUT)
        began = time.monotonic()
        with pytest.raises(ResponseTimeout):
            adapter.invoke("echo", {"text": "x"})
        assert time.monotonic() - began < TIMEOUT + MARGIN


@pytest.mark.parametrize("xml, reason", [
    (XXE, "DTD"),  # an external entity reading a local file: refused for its DTD
    (BILLION_LAUGHS, "amplification"),  # nested entities: libxml2 stops the expansion first
])
def test_xml_with_a_dtd_or_entities_is_refused(xml, reason):
    with raw_soap(soap_xml(200, xml)) as srv:
        adapter = started({"wsdl": srv.url + "/soap?wsdl"})
        attempt(adapter)
        with pytest.raises(ResponseRejected, match=f"refused.*{reason}") as caught:
            adapter.invoke("echo", {"text": "x"})
    assert "root:" not in str(caught.value) and "lollol" not in str(caught.value)
    assert not caught.value.retryable


def test_a_response_larger_than_max_response_bytes_is_refused():
    big = soap_reply("y" * 20_000)
    with raw_soap(soap_xml(200, big)) as srv:
        adapter = started({"wsdl": srv.url + "/soap?wsdl", "max_response_bytes": 10_000})
        attempt(adapter)
        with pytest.raises(ResponseRejected, match="max_response_bytes"):
            adapter.invoke("echo", {"text": "x"})


# -- the WSDL ---------------------------------------------------------------------------------

def test_an_unreachable_wsdl_leaves_the_adapter_not_ready_with_the_reason():
    adapter = SoapAdapter({"wsdl": f"http://127.0.0.1:{closed_port()}/?wsdl"})
    with pytest.raises(AdapterNotReady, match="cannot load the WSDL .* refused"):
        adapter.start()
    with pytest.raises(AdapterNotReady):
        adapter.invoke("echo", {"text": "x"})


def test_a_wsdl_that_appears_later_loads_on_the_next_start():
    with HttpTestServer({"GET /soap": sequence(respond(404), soap_wsdl("/soap")),
                         "POST /soap": soap_xml(200, soap_reply("late"))}) as srv:
        adapter = SoapAdapter({"wsdl": srv.url + "/soap?wsdl"})
        with pytest.raises(AdapterNotReady, match="HTTP 404"):
            adapter.start()
        adapter.start()
        attempt(adapter)
        assert adapter.invoke("echo", {"text": "x"}) == "late"


def test_a_trickling_wsdl_is_given_up_within_the_response_timeout():
    with HttpTestServer({"GET /soap": trickle(b"<definitions/>" * 10)}) as srv:
        adapter = SoapAdapter({"wsdl": srv.url + "/soap?wsdl", "response_timeout": TIMEOUT})
        began = time.monotonic()
        with pytest.raises(AdapterNotReady):
            adapter.start()
        assert time.monotonic() - began < TIMEOUT + MARGIN


def test_a_wsdl_with_a_dtd_is_refused():
    wsdl = '<?xml version="1.0"?><!DOCTYPE d [<!ENTITY e "x">]><definitions/>'
    with HttpTestServer({"GET /soap": respond(200, wsdl, content_type="text/xml")}) as srv:
        with pytest.raises(AdapterNotReady, match="DTD"):
            SoapAdapter({"wsdl": srv.url + "/soap?wsdl"}).start()


# -- idempotency ------------------------------------------------------------------------------

def test_every_attempt_carries_the_same_idempotency_key_as_an_http_header():
    with raw_soap(sequence(soap_xml(503, "busy"), soap_xml(200, soap_reply("ok")))) as srv:
        adapter = started({"wsdl": srv.url + "/soap?wsdl",
                           "idempotency_header": "Idempotency-Key"})
        attempt(adapter, key="msg-7")
        with pytest.raises(HttpStatusError):
            adapter.invoke("echo", {"text": "x"})
        attempt(adapter, key="msg-7")
        assert adapter.invoke("echo", {"text": "x"}) == "ok"
    keys = [r.headers.get("Idempotency-Key") for r in srv.requests if r.method == "POST"]
    assert keys == ["msg-7", "msg-7"]
