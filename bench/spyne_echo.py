"""A spyne SOAP 1.1 echo service for bench/inbound.py, in a process of its own:
``echo(text) -> "echo:<text>"`` at once.

``python -m bench.spyne_echo`` prints its WSDL URL on one line and serves until its standard
input closes.
"""
from __future__ import annotations

import sys
import threading
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from spyne import Application, ServiceBase, Unicode, rpc
from spyne.protocol.soap import Soap11
from spyne.server.wsgi import WsgiApplication


class EchoService(ServiceBase):  # type: ignore[misc]
    @rpc(Unicode, _returns=Unicode)  # type: ignore[misc]
    def echo(ctx: Any, text: str) -> str:
        return f"echo:{text}"


class _Quiet(WSGIRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real service would

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def main() -> None:
    app = Application([EchoService], tns="urn:encore:echo", in_protocol=Soap11(),
                      out_protocol=Soap11())
    server = make_server("127.0.0.1", 0, WsgiApplication(app), server_class=_Server,
                         handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"http://127.0.0.1:{server.server_port}/?wsdl", flush=True)
    sys.stdin.read()
    server.shutdown()


if __name__ == "__main__":
    main()
