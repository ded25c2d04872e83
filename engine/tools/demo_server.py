"""A tiny loopback SOAP service for ``encore demo``: a static WSDL and a canned answer that
comes after a configurable delay (no SOAP library needed on the server side)."""
from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from xml.sax.saxutils import escape

NS = "http://tempuri.org/"

WSDL = """<?xml version="1.0" encoding="utf-8"?>
<definitions xmlns="http://schemas.xmlsoap.org/wsdl/"
    xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/"
    xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:tns="{ns}" targetNamespace="{ns}">
  <types>
    <xs:schema elementFormDefault="qualified" targetNamespace="{ns}">
      <xs:element name="GetResponse"><xs:complexType><xs:sequence>
        <xs:element name="text" type="xs:string" minOccurs="0"/>
      </xs:sequence></xs:complexType></xs:element>
      <xs:element name="GetResponseResponse"><xs:complexType><xs:sequence>
        <xs:element name="GetResponseResult" type="xs:string" minOccurs="0"/>
      </xs:sequence></xs:complexType></xs:element>
    </xs:schema>
  </types>
  <message name="GetResponseIn"><part name="parameters" element="tns:GetResponse"/></message>
  <message name="GetResponseOut">
    <part name="parameters" element="tns:GetResponseResponse"/></message>
  <portType name="WSTimeoutsSoap">
    <operation name="GetResponse">
      <input message="tns:GetResponseIn"/><output message="tns:GetResponseOut"/>
    </operation>
  </portType>
  <binding name="WSTimeoutsSoap" type="tns:WSTimeoutsSoap">
    <soap:binding transport="http://schemas.xmlsoap.org/soap/http"/>
    <operation name="GetResponse">
      <soap:operation soapAction="{ns}Test.WSTimeouts.WebService.GetResponse" style="document"/>
      <input><soap:body use="literal"/></input><output><soap:body use="literal"/></output>
    </operation>
  </binding>
  <service name="WSTimeouts">
    <port name="WSTimeoutsSoap" binding="tns:WSTimeoutsSoap">
      <soap:address location="{address}"/>
    </port>
  </service>
</definitions>
"""

ANSWER = """<?xml version="1.0" encoding="utf-8"?>
<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body>
<GetResponseResponse xmlns="{ns}"><GetResponseResult>{text}</GetResponseResult>
</GetResponseResponse></soap:Body></soap:Envelope>"""


class DemoSoapServer:
    """Serves the WSDL on ``GET /?wsdl`` and answers ``GetResponse`` after ``delay(text)``
    seconds. ``on_event(kind, text)`` hears of every request received and answer sent."""

    def __init__(self, delay: Callable[[str], float],
                 on_event: Callable[[str, str], None] | None = None) -> None:
        self.delay = delay
        self.on_event = on_event or (lambda kind, text: None)
        self.requests = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="demo-soap-server")

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/"

    def __enter__(self) -> DemoSoapServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # http.server's naming
                self._reply(200, WSDL.format(ns=NS, address=server.url))

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                match = re.search(r"<(?:\w+:)?text>(.*?)</(?:\w+:)?text>", body, re.S)
                text = match.group(1) if match else ""
                server.requests += 1
                server.on_event("received", text)
                time.sleep(server.delay(text))
                try:
                    self._reply(200, ANSWER.format(ns=NS, text=escape(text.upper())))
                    server.on_event("answered", text)
                except OSError:  # the client gave up and closed the connection
                    server.on_event("discarded", text)

            def _reply(self, status: int, text: str) -> None:
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/xml; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
