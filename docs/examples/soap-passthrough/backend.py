"""The "real" SOAP service behind the passthrough, for trying the example: the contract of
echo.wsdl on http://127.0.0.1:8765 (its WSDL at /?wsdl), with the standard library only.

    python backend.py [PORT]     (from any directory; Ctrl-C stops it)

``echo(text)`` answers ``text``; ``refuse(text)`` answers the fault ``Client.Refused``;
``fail(text)`` the fault ``Server``. It listens on loopback only.
"""
from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HOST, PORT = "127.0.0.1", 8765
NS = "urn:encore:echo"
ENVELOPE = "http://schemas.xmlsoap.org/soap/envelope/"
MAX_BODY = 1024 * 1024  # bytes of one request
CONTRACT = Path(__file__).resolve().parent / "echo.wsdl"
ADDRESS = "http://127.0.0.1:9/soap/echo"  # the service address written in echo.wsdl


def _envelope(body: str) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?><soap:Envelope xmlns:soap="{ENVELOPE}">'
            f"<soap:Body>{body}</soap:Body></soap:Envelope>").encode()


def _answer(operation: str, text: str) -> tuple[int, bytes]:
    """(HTTP status, SOAP envelope) for ``operation`` called with ``text``."""
    if operation == "echo":
        return 200, _envelope(f'<tns:echoResponse xmlns:tns="{NS}">'
                              f"<tns:echoResult>{_escaped(text)}</tns:echoResult>"
                              "</tns:echoResponse>")
    code, reason = {"refuse": ("soap:Client.Refused", f"refused: {text}"),
                    "fail": ("soap:Server", f"failed: {text}")}.get(
        operation, ("soap:Client", f"no operation {operation!r}"))
    return 500, _envelope(f"<soap:Fault><faultcode>{code}</faultcode>"
                          f"<faultstring>{_escaped(reason)}</faultstring></soap:Fault>")


def _escaped(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class Handler(BaseHTTPRequestHandler):
    wsdl = b""  # echo.wsdl, its address this server's

    def do_GET(self) -> None:  # the name http.server calls
        if self.path.endswith("?wsdl"):
            self._send(200, self.wsdl, "text/xml; charset=utf-8")
        else:
            self._send(404, b"not found: the WSDL is at /?wsdl\n", "text/plain")

    def do_POST(self) -> None:  # the name http.server calls
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._send(413, b"too large\n", "text/plain")
            return
        try:
            body = ET.fromstring(self.rfile.read(length)).find(f"{{{ENVELOPE}}}Body")
            call = body[0] if body is not None and len(body) else None
        except ET.ParseError:
            call = None
        if call is None:
            self._send(400, b"not a SOAP envelope\n", "text/plain")
            return
        operation = call.tag.rpartition("}")[2]
        text = call.findtext(f"{{{NS}}}text") or ""
        self._send(*_answer(operation, text), "text/xml; charset=utf-8")

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main() -> None:
    server = ThreadingHTTPServer((HOST, int(sys.argv[1]) if len(sys.argv) > 1 else PORT),
                                 Handler)
    url = f"http://{HOST}:{server.server_address[1]}/"
    Handler.wsdl = CONTRACT.read_text(encoding="utf-8").replace(ADDRESS, url).encode()
    print(f"echo backend on {url}?wsdl", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
