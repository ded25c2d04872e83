"""Hostile XML for the fault campaign, both ways (issue 36 finding 1): SOAP documents with
one element of many attributes — just under the engine's limit (``xml_max_attributes``,
256 by default) and far over it.

- In: envelopes posted to a daemon's inbound SoapService (``EchoSoap``, target ``Sink``)
  while a probe asks the daemon's portal for its login page every 0.1 s: the slowest
  answer says whether anything held the daemon's interpreter (:class:`Probe`).
- Out: messages to the ``Soap`` item (``operations.soap:SoapOperation``, not idempotent)
  that the loopback server answers with a response of as many attributes
  (:func:`response`; bench/chaos_server.py). Under the limit the message must end
  Completed (the reconciliation invariant); over it the answer is flawed (``"xml"``) and
  may end Error, answered — never re-sent; a daemon that parses it whole stalls, and the
  claims it loses meanwhile are stolen (it was never faulted).
"""
from __future__ import annotations

import http.client
import re
import threading
import time
from pathlib import Path
from types import TracebackType

__all__ = ["OVER", "OVER_MARK", "SOAP_PATH", "UNDER", "UNDER_MARK", "WSDL", "Probe", "envelope",
           "post", "request_tag", "response"]

ROOT = Path(__file__).resolve().parents[1]
WSDL = ROOT / "docs" / "examples" / "soap-passthrough" / "echo.wsdl"
SOAP_PATH = "/soap/echo"  # the inbound service's path on every daemon
XML_MAX_ATTRIBUTES = 256  # the engine's default limit of attributes on one element
UNDER = XML_MAX_ATTRIBUTES - 1  # attributes of a document just under the limit
# attributes of a document far over it: about 5 s of zeep's quadratic copy on this
# machine without the limit — past the lease — and 400 KB, under every size limit
OVER = 40_000
UNDER_MARK, OVER_MARK = "!xml-under", "!xml-over"  # in a Soap message's tag
PROBE_INTERVAL = 0.1  # seconds between two questions to the portal
_NS = ('xmlns:e="http://schemas.xmlsoap.org/soap/envelope/" '
       'xmlns:x="urn:encore:echo"')
_TEXT = re.compile(rb"<(?:\w+:)?text>([^<]*)</(?:\w+:)?text>")


def _attributes(count: int) -> str:
    return " ".join(f'a{i}="v"' for i in range(count))


def envelope(count: int, text: str) -> bytes:
    """An echo request whose ``echo`` element carries ``count`` attributes."""
    return (f"<e:Envelope {_NS}><e:Body><x:echo {_attributes(count)}><x:text>{text}"
            "</x:text></x:echo></e:Body></e:Envelope>").encode()


def response(count: int, text: str) -> bytes:
    """An echo response whose ``echoResponse`` element carries ``count`` attributes."""
    return (f"<e:Envelope {_NS}><e:Body><x:echoResponse {_attributes(count)}><x:echoResult>"
            f"{text}</x:echoResult></x:echoResponse></e:Body></e:Envelope>").encode()


def request_tag(body: bytes) -> str:
    """The tag of a Soap message's request: the text it asks to echo."""
    found = _TEXT.search(body)
    return found.group(1).decode("utf-8", "replace") if found else ""


def post(port: int, body: bytes, timeout: float = 60.0) -> tuple[int, float]:
    """(status, seconds) of ``body`` posted to the SoapService on ``port``; status 0: no
    answer (the connection failed or timed out)."""
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", SOAP_PATH, body, {"Content-Type": "text/xml; charset=utf-8",
                                               "SOAPAction": '"echo"'})
        status = conn.getresponse().status
    except OSError:
        status = 0
    finally:
        conn.close()
    return status, time.monotonic() - started


class Probe:
    """Asks ``GET /login`` of the portal on ``port`` every :data:`PROBE_INTERVAL` seconds
    while in its ``with`` block; :attr:`worst` is the slowest answer, in seconds."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.worst = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="chaos-probe")

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            try:
                conn.request("GET", "/login")
                conn.getresponse().read()
            except OSError:
                pass
            finally:
                conn.close()
            self.worst = max(self.worst, time.monotonic() - started)
            self._stop.wait(PROBE_INTERVAL)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(90)
