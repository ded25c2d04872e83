"""A production with inbound services for the inbound tests: a daemon in this process on
SQLite or PostgreSQL, its [inbound] server on a free loopback port."""
from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from engine.config.production import parse_production
from engine.runtime.daemon import Daemon
from engine.store.sql import SqlStore

DATA = Path(__file__).resolve().parents[1] / "inbound_data"
EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "soap-passthrough"
WSDL = EXAMPLE / "echo.wsdl"  # the documented example's contract


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running(store: SqlStore, items: str, port: int, inbound: str = "") -> Iterator[Daemon]:
    """The daemon of ``items`` started, its [inbound] on ``port`` (``inbound``: more of
    that table's lines)."""
    text = (f"[production]\npoll_interval = 0.05\n[inbound]\nport = {port}\n{inbound}\n"
            + items)
    daemon = Daemon(parse_production(text, env={}), store=store, env={})
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


def soap_service(name: str = "EchoSoap", *, target: str = "Router", timeout: float = 10,
                 auth: str = "none", path: str = "/soap/echo", wsdl: Path = WSDL,
                 extra: str = "") -> str:
    return (f'[[items]]\nname = "{name}"\nclass = "engine.inbound:SoapService"\n'
            f'[items.settings]\nwsdl = "{wsdl}"\npath = "{path}"\ntarget = "{target}"\n'
            f'response_timeout = {timeout}\nauth = "{auth}"\n{extra}\n')


def router(slow_target: str | None = None) -> str:
    rules = (f'rules = [{{field = "args.text", matches = "^slow", target = "{slow_target}"}}]\n'
             if slow_target else "")
    return (f'[[items]]\nname = "Router"\nclass = "engine.router:Router"\npool_size = 4\n'
            f'[items.settings]\n{rules}default_target = "Backend"\n')


def soap_operation(name: str, wsdl: str, pool_size: int = 2) -> str:
    return (f'[[items]]\nname = "{name}"\nclass = "operations.soap:SoapOperation"\n'
            f'pool_size = {pool_size}\n[items.settings]\nwsdl = "{wsdl}"\nidempotent = true\n'
            f'response_timeout = 10\n')
