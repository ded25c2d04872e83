"""The benchmark's loopback servers, run in a child process of their own.

- SOAP: the dependency-free service of ``encore demo`` (static WSDL, ``GetResponse``), kept
  alive between requests (HTTP/1.1); a request whose text is ``sleep:S`` is answered after S
  seconds, anything else at once.
- HTTP: ``/sleep/MS`` answers ``ok`` after MS milliseconds (keep-alive, HTTP/1.1).
- Trickle: ``/`` sends its headers at once, then one body byte every ``TRICKLE_INTERVAL`` s.

``python -m bench.servers`` prints one JSON line ``{"soap": url, "http": url, "trickle": url}``
and serves until its standard input closes, so the servers never outlive the benchmark. A
child process keeps the servers' work off the interpreter (and the GIL) being measured.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from engine.tools.demo_server import DemoSoapServer

ROOT = Path(__file__).resolve().parents[1]
TRICKLE_INTERVAL = 0.2  # seconds between two body bytes of the trickling server
TRICKLE_BYTES = 25  # body bytes: ~5 s of trickling


def soap_delay(text: str) -> float:
    """Seconds before the SOAP answer: ``sleep:0.8`` → 0.8; anything else → 0."""
    if text.startswith("sleep:"):
        return float(text[len("sleep:"):])
    return 0.0


class KeepAliveSoapServer(DemoSoapServer):
    """The demo's SOAP service speaking HTTP/1.1, so clients reuse their connections."""

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        handler = super()._handler()
        handler.protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes: without TCP_NODELAY, Nagle and the
        # client's delayed ACK add 40 ms to every answer on a kept-alive connection.
        handler.disable_nagle_algorithm = True
        return handler


class _Quiet(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # see KeepAliveSoapServer

    def log_message(self, *args: Any) -> None:
        pass

    def _drain(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)


class LatencyHandler(_Quiet):
    """``/sleep/MS``: ``ok`` after MS milliseconds; any method."""

    def _answer(self) -> None:
        self._drain()
        parts = self.path.strip("/").split("/")
        if len(parts) == 2 and parts[0] == "sleep":
            time.sleep(float(parts[1]) / 1000)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    do_GET = do_POST = do_PUT = _answer


class TrickleHandler(_Quiet):
    """Headers at once, then ``TRICKLE_BYTES`` body bytes, one per ``TRICKLE_INTERVAL``."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(TRICKLE_BYTES))
        self.end_headers()
        self.wfile.flush()
        try:
            for _ in range(TRICKLE_BYTES):
                time.sleep(TRICKLE_INTERVAL)
                self.wfile.write(b"x")
                self.wfile.flush()
        except OSError:  # the client gave up
            pass


def _serve(handler: type[BaseHTTPRequestHandler]) -> str:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.request_queue_size = 128
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    return f"http://{host}:{port}"


def main() -> None:
    soap = KeepAliveSoapServer(soap_delay)
    soap.__enter__()
    urls = {"soap": soap.url, "http": _serve(LatencyHandler), "trickle": _serve(TrickleHandler)}
    print(json.dumps(urls), flush=True)
    sys.stdin.read()  # until the benchmark closes our stdin (or dies)


class ServerProcess:
    """``python -m bench.servers`` as a context manager; ``urls`` once it is up."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.urls: dict[str, str] = {}

    def __enter__(self) -> ServerProcess:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT),
                                                            os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.servers"], cwd=ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.urls = json.loads(self.proc.stdout.readline())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


if __name__ == "__main__":
    main()
