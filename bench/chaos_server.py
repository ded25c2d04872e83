"""The fault campaign's loopback service: it answers the daemons' HTTP requests and keeps
its own record of every one, which the checker holds the database to.

Each daemon calls it under a path of its own (``/pg-1/m``): the sender of a request.
Each request's body is the message's *tag* (the producer writes it into the message:
``{"method": "POST", "path": "/m", "body": TAG}``). The server numbers requests in the
order it reads them (:class:`~bench.chaos_checker.Arrival`) and decides, from the tag
alone, so that a run is the same whatever the timing:

- a tag containing ``!fail`` is always answered 503 (the message gives up: an ``Error``);
- a tag containing ``!slow`` is answered after 2.5 s the first time, past the items'
  response timeout of 2 s: processed, but the daemon cannot know it (*outcome unknown*: an
  idempotent item sends it again, a non-idempotent one must not);
- about one tag in five (by its CRC) is answered 503 the first time, 200 after (one retry
  and a first-failure event);
- every answer waits 5–60 ms (by the CRC), so that faults catch attempts in flight.

A request under ``/<sender>/soap`` is a SOAP call of the ``Soap`` item (bench/chaos_xml.py):
its tag is the text it asks to echo, and it is answered 200 with an echo response whose
element carries 255 attributes (``!xml-under`` in the tag, or none) or 40,000
(``!xml-over``: an answer no daemon may take as a success, flawed ``"xml"``).
"""
from __future__ import annotations

import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bench.chaos_checker import Arrival
from bench.chaos_xml import OVER, OVER_MARK, UNDER, request_tag, response

__all__ = ["CountingServer"]

FAIL_MARK = "!fail"
SLOW_MARK = "!slow"
SLOW_SECONDS = 2.5  # past the response timeout of bench/chaos_daemons.py


def plan(tag: str, seen_before: int) -> tuple[int, float]:
    """(status, seconds to wait) of the answer to ``tag``'s request number
    ``seen_before + 1``."""
    crc = zlib.crc32(tag.encode())
    wait = 0.005 + (crc % 56) / 1000
    if FAIL_MARK in tag:
        return 503, wait
    if SLOW_MARK in tag and seen_before == 0:
        return 200, SLOW_SECONDS
    if crc % 5 == 0 and seen_before == 0:
        return 503, wait
    return 200, wait


class _Quiet(ThreadingHTTPServer):
    """A daemon killed in the middle of an answer breaks its connection: not an error."""

    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass


class CountingServer:
    """A threaded HTTP/1.1 server on a free loopback port; :attr:`arrivals` in order."""

    def __init__(self) -> None:
        self.arrivals: list[Arrival] = []
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()
        self._server = _Quiet(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_port}/"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="chaos-server")

    def arrive(self, tag: str, sender: str = "", *, soap: bool = False) -> tuple[int, float]:
        """Record a request of ``tag``; (status, seconds to wait) of its answer."""
        with self._lock:
            seen = self._seen.get(tag, 0)
            self._seen[tag] = seen + 1
            status, wait = plan(tag, seen)
            if soap:  # always processed: the flaw, if any, is in the document
                status, wait = 200, 0.0
                flaw = "xml" if OVER_MARK in tag else ""
            else:
                flaw = "late" if status == 200 and wait >= SLOW_SECONDS else ""
            self.arrivals.append(Arrival(tag, len(self.arrivals), status, sender, flaw))
        return status, wait

    def snapshot(self) -> list[Arrival]:
        with self._lock:
            return list(self.arrivals)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length)
                sender, _, rest = self.path.lstrip("/").partition("/")
                if rest.startswith("soap"):
                    tag = request_tag(data)
                    server.arrive(tag, sender, soap=True)
                    body = response(OVER if OVER_MARK in tag else UNDER, tag)
                    self._answer(200, "text/xml; charset=utf-8", body)
                    return
                status, wait = server.arrive(data.decode("utf-8", "replace"), sender)
                time.sleep(wait)
                self._answer(status, "text/plain", b"ok" if status == 200 else b"busy")

            def _answer(self, status: int, kind: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        return Handler

    def __enter__(self) -> CountingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
