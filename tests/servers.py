"""Real loopback servers for integration tests.

Every server listens on 127.0.0.1, port 0 (a free port), serves each connection in its own
daemon thread, records what it received, and is a context manager::

    with HttpTestServer({"/slow": respond(body=b"ok", delay=2)}) as server:
        requests.get(server.url + "/slow")
        server.requests[0].headers["User-Agent"]

- :class:`HttpTestServer`: routes built from :func:`respond`, :func:`trickle`,
  :func:`reset_after_request`, :func:`sequence`, :func:`soap_wsdl`; optional TLS.
- :class:`SoapTestServer`: a spyne service (``echo``, ``refuse``, ``fail``) with a configurable
  delay.
- :func:`make_tls` / :class:`TlsFiles`: a CA, a server and a client certificate (trustme).

Handlers that wait use the server's ``stopping`` event, so leaving the ``with`` block frees
them at once.
"""
from __future__ import annotations

import importlib.util
import logging
import socket
import ssl
import struct
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

TRICKLE_INTERVAL = 0.2  # seconds between two bytes of a trickled body


class _SpecFinder:
    """Gives the old ``six`` importer bundled with spyne the ``find_spec`` API.

    Without it, every import that the standard finders miss (``try: import x except
    ImportError``) reaches spyne's importer and emits an ``ImportWarning`` — an error under
    ``-W error``, raised in place of the ``ImportError`` the code expects.
    """

    def __init__(self, legacy: Any) -> None:
        self._legacy = legacy

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if self._legacy.find_module(fullname, path) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> Any:
        return self._legacy.load_module(spec.name)

    def exec_module(self, module: Any) -> None:
        """``load_module`` already ran it."""


with warnings.catch_warnings():
    # spyne 2.14 imports the deprecated ``cgi`` module and its own old copy of ``six``.
    warnings.simplefilter("ignore")
    from spyne import Application, Fault, ServiceBase, Unicode, rpc
    from spyne.protocol.soap import Soap11
    from spyne.server.wsgi import WsgiApplication
logging.getLogger("spyne").setLevel(logging.CRITICAL)  # faults raised on purpose, not news
sys.meta_path[:] = [_SpecFinder(f) if type(f).__name__ == "_SixMetaPathImporter" else f
                    for f in sys.meta_path]


@dataclass
class Recorded:
    """One request as the server received it. Header names keep the client's spelling;
    ``at`` is when it arrived (``time.monotonic()``)."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)


Route = Callable[["_Handler", Recorded], None]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers do
    server: _HttpServer

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if len(body) < length:  # the client went away mid-request (killed): no request
            self.close_connection = True
            return
        record = Recorded(self.command, self.path, dict(self.headers.items()), body)
        self.server.owner.requests.append(record)
        self.server.owner.route_for(self.command, self.path)(self, record)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

    def log_message(self, format: str, *args: Any) -> None:  # quiet tests
        pass

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:  # the route reset the connection on purpose
            pass


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    owner: HttpTestServer

    def finish_request(self, request: Any, client_address: Any) -> None:
        self.owner.connections += 1
        tls = self.owner.tls
        if tls is None:
            super().finish_request(request, client_address)
            return
        try:  # wrapping detaches ``request``: the TLS socket is ours to close
            secure = tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return  # the client refused our certificate, or we refused theirs
        try:
            super().finish_request(secure, client_address)
        finally:
            secure.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (ConnectionError, ssl.SSLError, OSError)):
            super().handle_error(request, client_address)


class _Loopback:
    """Runs a socketserver in a thread for the duration of a ``with`` block."""

    scheme = "http"
    _server: Any

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.requests: list[Recorded] = []
        self.connections = 0  # TCP connections accepted (HttpTestServer)
        self.url = ""

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def __enter__(self) -> Any:
        self._server = self._make_server()
        self.url = f"{self.scheme}://127.0.0.1:{self.port}"
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True, name=f"test-server-{self.port}").start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def _make_server(self) -> Any:
        raise NotImplementedError


class HttpTestServer(_Loopback):
    """A plain HTTP(S) server with routes keyed ``"/path"`` or ``"METHOD /path"`` (no query).

    Unrouted requests get 404. ``tls``: a server-side ``ssl.SSLContext`` to serve HTTPS.
    """

    def __init__(self, routes: Mapping[str, Route] | None = None, *,
                 tls: ssl.SSLContext | None = None) -> None:
        super().__init__()
        self.routes = dict(routes or {})
        self.tls = tls
        self.scheme = "https" if tls is not None else "http"

    def _make_server(self) -> _HttpServer:
        server = _HttpServer(("127.0.0.1", 0), _Handler)
        server.owner = self
        return server

    def route_for(self, method: str, path: str) -> Route:
        path = path.split("?", 1)[0]
        return self.routes.get(f"{method} {path}") or self.routes.get(path) or respond(404)


def respond(status: int = 200, body: bytes | str = b"", *, headers: Mapping[str, str] | None = None,
            delay: float = 0.0, content_type: str = "text/plain; charset=utf-8") -> Route:
    """Answer ``status`` with ``body`` after ``delay`` seconds."""
    data = body.encode() if isinstance(body, str) else body

    def route(handler: _Handler, record: Recorded) -> None:
        if delay and handler.server.owner.stopping.wait(delay):
            return
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", content_type)
            handler.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(data)
        except OSError:
            handler.close_connection = True  # the client gave up first
    return route


def trickle(body: bytes = b"x" * 25, *, interval: float = TRICKLE_INTERVAL,
            headers_too: bool = False) -> Route:
    """Send the headers at once (or, ``headers_too``, byte by byte as well), then the body
    one byte every ``interval`` seconds."""
    head = f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n\r\n"

    def route(handler: _Handler, record: Recorded) -> None:
        handler.close_connection = True
        slow = (head.encode() if headers_too else b"") + body
        try:
            if not headers_too:
                handler.wfile.write(head.encode())
                handler.wfile.flush()
            for i in range(len(slow)):
                if handler.server.owner.stopping.wait(interval):
                    return
                handler.wfile.write(slow[i:i + 1])
                handler.wfile.flush()
        except OSError:
            return  # the client gave up, as it should
    return route


def reset_after_request() -> Route:
    """Read the request, then reset the connection (TCP RST) without answering."""

    def route(handler: _Handler, record: Recorded) -> None:
        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                      struct.pack("ii", 1, 0))
        handler.connection.close()
        handler.close_connection = True
    return route


def sequence(*routes: Route) -> Route:
    """The n-th request gets the n-th route; the last one repeats."""
    count = iter(range(1_000_000))
    lock = threading.Lock()

    def route(handler: _Handler, record: Recorded) -> None:
        with lock:
            n = next(count)
        routes[min(n, len(routes) - 1)](handler, record)
    return route


# -- SOAP ---------------------------------------------------------------------------------

SOAP_NS = "urn:encore:test"
# ``{address}``: the service address; ``{wsdl_import}``/``{xsd_import}``: imports, or ''.
ECHO_WSDL = """<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://schemas.xmlsoap.org/wsdl/"
    xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/"
    xmlns:xsd="http://www.w3.org/2001/XMLSchema"
    xmlns:tns="urn:encore:test" targetNamespace="urn:encore:test" name="Echo">
  {wsdl_import}
  <types>
    <xsd:schema targetNamespace="urn:encore:test" elementFormDefault="qualified">
      {xsd_import}
      <xsd:element name="echo"><xsd:complexType><xsd:sequence>
        <xsd:element name="text" type="xsd:string"/>
      </xsd:sequence></xsd:complexType></xsd:element>
      <xsd:element name="echoResponse"><xsd:complexType><xsd:sequence>
        <xsd:element name="echoResult" type="xsd:string"/>
      </xsd:sequence></xsd:complexType></xsd:element>
    </xsd:schema>
  </types>
  <message name="echoIn"><part name="parameters" element="tns:echo"/></message>
  <message name="echoOut"><part name="parameters" element="tns:echoResponse"/></message>
  <portType name="EchoPort">
    <operation name="echo"><input message="tns:echoIn"/><output message="tns:echoOut"/></operation>
  </portType>
  <binding name="EchoBinding" type="tns:EchoPort">
    <soap:binding style="document" transport="http://schemas.xmlsoap.org/soap/http"/>
    <operation name="echo">
      <soap:operation soapAction="urn:encore:test#echo"/>
      <input><soap:body use="literal"/></input><output><soap:body use="literal"/></output>
    </operation>
  </binding>
  <service name="EchoService">
    <port name="EchoPort" binding="tns:EchoBinding"><soap:address location="{address}"/></port>
  </service>
</definitions>
"""


def soap_wsdl(path: str = "/soap") -> Route:
    """Serve a static document/literal WSDL (``echo(text) -> echoResult``) whose service
    address is this server + ``path``."""

    def route(handler: _Handler, record: Recorded) -> None:
        address = handler.server.owner.url + path
        respond(200, ECHO_WSDL.format(address=address, wsdl_import="", xsd_import=""),
                content_type="text/xml; charset=utf-8")(handler, record)
    return route


def soap_envelope(body_xml: str, *, prolog: str = "") -> str:
    """A SOAP 1.1 envelope around ``body_xml``, with an optional prolog (a DOCTYPE...)."""
    return (f'<?xml version="1.0" encoding="utf-8"?>\n{prolog}'
            '<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/">'
            f"<soap:Body>{body_xml}</soap:Body></soap:Envelope>")


def soap_reply(text: str) -> str:
    """A well-formed ``echoResponse`` envelope for the static WSDL."""
    return soap_envelope(f'<echoResponse xmlns="{SOAP_NS}"><echoResult>{text}'
                         "</echoResult></echoResponse>")


def soap_fault(code: str, text: str) -> str:
    return soap_envelope(f"<soap:Fault><faultcode>{code}</faultcode>"
                         f"<faultstring>{text}</faultstring></soap:Fault>")


def soap_xml(status: int, xml: str, *, delay: float = 0.0) -> Route:
    """Answer a SOAP POST with ``xml`` as it is."""
    return respond(status, xml, delay=delay, content_type="text/xml; charset=utf-8")


@dataclass
class _SpyneState:
    name: str
    delay: float
    stopping: threading.Event
    calls: list[str] = field(default_factory=list)


def _echo_service(state: _SpyneState) -> type:
    class EchoService(ServiceBase):  # type: ignore[misc]
        @rpc(Unicode, _returns=Unicode)  # type: ignore[misc]
        def echo(ctx: Any, text: str) -> str:
            state.calls.append("echo")
            state.stopping.wait(state.delay)
            return f"{state.name}:{text}"

        @rpc(Unicode, _returns=Unicode)  # type: ignore[misc]
        def refuse(ctx: Any, text: str) -> str:
            state.calls.append("refuse")
            raise Fault(faultcode="Client.Refused", faultstring=f"refused: {text}")

        @rpc(Unicode, _returns=Unicode)  # type: ignore[misc]
        def fail(ctx: Any, text: str) -> str:
            state.calls.append("fail")
            raise Fault(faultcode="Server", faultstring=f"failed: {text}")

    return EchoService


class _QuietWSGIRequestHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # a client that timed out and left
            super().handle_error(request, client_address)


class SoapTestServer(_Loopback):
    """A spyne SOAP 1.1 service: ``echo(text) -> "<name>:<text>"`` after ``delay`` seconds,
    ``refuse(text)``, which answers with the fault ``Client.Refused``, and ``fail(text)``,
    which answers with the fault ``Server`` (spyne sends both as ``soap11env:<code>``).

    ``wsdl`` is its WSDL URL; ``requests`` records every HTTP request (WSDL fetches too);
    :attr:`posts` only the SOAP calls.
    """

    def __init__(self, name: str = "A", *, delay: float = 0.0) -> None:
        super().__init__()
        self.name = name
        self._state = _SpyneState(name=name, delay=delay, stopping=self.stopping)

    @property
    def wsdl(self) -> str:
        return self.url + "/?wsdl"

    @property
    def posts(self) -> list[Recorded]:
        return [r for r in self.requests if r.method == "POST"]

    def _make_server(self) -> Any:
        app = Application([_echo_service(self._state)], tns="urn:encore:echo",
                          in_protocol=Soap11(validator="lxml"), out_protocol=Soap11())
        return make_server("127.0.0.1", 0, self._recording(WsgiApplication(app)),
                           server_class=_ThreadingWSGIServer,
                           handler_class=_QuietWSGIRequestHandler)

    def _recording(self, app: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length) if length else b""
            headers = {k[5:].replace("_", "-").title(): v for k, v in environ.items()
                       if k.startswith("HTTP_")}
            self.requests.append(Recorded(environ["REQUEST_METHOD"],
                                          environ.get("PATH_INFO", ""), headers, body))
            environ["wsgi.input"] = _Body(body)
            return app(environ, start_response)
        return wrapper


class _Body:
    def __init__(self, data: bytes) -> None:
        self._data, self._pos = data, 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._data) if size < 0 else self._pos + size
        chunk, self._pos = self._data[self._pos:end], min(end, len(self._data))
        return chunk


# -- TLS ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a throw-away CA and of certificates it signed for 127.0.0.1."""

    ca: Path
    server_cert: Path  # chain and key in one file
    client_cert: Path
    client_key: Path

    def server_context(self, *, require_client_cert: bool = False) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.server_cert))
        if require_client_cert:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(str(self.ca))
        return ctx


def make_tls(directory: Path) -> TlsFiles:
    """Write a CA and a server and client certificate for 127.0.0.1 into ``directory``."""
    import trustme  # test-only dependency, imported where needed

    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("encore-client@example.test")
    files = TlsFiles(ca=directory / "ca.pem", server_cert=directory / "server.pem",
                     client_cert=directory / "client.pem", client_key=directory / "client.key")
    ca.cert_pem.write_to_path(str(files.ca))
    server.private_key_and_cert_chain_pem.write_to_path(str(files.server_cert))
    for blob in client.cert_chain_pems:
        blob.write_to_path(str(files.client_cert), append=True)
    client.private_key_pem.write_to_path(str(files.client_key))
    return files
