"""A uvicorn server that holds its :class:`~engine.serving.limits.ServerLimits`
(docs/server-limits.md), for any ASGI app, host, port and TLS context.

We accept connections ourselves: asyncio's accept loop takes a whole backlog before any code
of ours can count them, so a connection over a cap is reset the moment it is accepted.
"""
from __future__ import annotations

import asyncio
import errno
import importlib.util
import logging
import pkgutil
import socket
import ssl
import struct
from collections.abc import Callable
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from engine.observe.logs import SERVER_LOGGERS, limit_repeats
from engine.serving.limits import ConnectionGate, DescriptorBudget, ServerLimits

__all__ = ["LimitedServer", "limited_server", "server_loggers"]

log = logging.getLogger("engine.serving.limits")

ACCEPT_BATCH = 64
LISTEN_BACKLOG = 128
ACCEPT_PAUSE = 1.0
SWEEP_INTERVAL = 1.0
# a TLS connection closed at a stop waits for a close_notify an idle client never sends
SHUTDOWN_GRACE = 0.5
COALESCE_BYTES = 65536
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends a reset
STARTUP_FAILURE = 3
LOOP = "auto"  # uvloop where installed: less CPU per request (BENCHMARKS.md)
SERVER_PACKAGES = ("engine.serving", "engine.portal", "engine.inbound")


class Slot:
    """One admitted connection: its socket and its place in the gate, given back once."""

    __slots__ = ("gate", "host", "sock", "_released", "_on_release")

    def __init__(self, gate: ConnectionGate, host: str, sock: socket.socket,
                 on_release: Callable[[Slot], None]) -> None:
        self.gate, self.host, self.sock = gate, host, sock
        self._released = False
        self._on_release = on_release

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.gate.release(self.host)
            self._on_release(self)


class LimitedListener:
    """A listening socket whose connections pass a :class:`ConnectionGate` before they get a
    transport; shaped like the ``asyncio.Server`` uvicorn keeps (``close``, ``wait_closed``)."""

    def __init__(self, sock: socket.socket, gate: ConnectionGate,
                 protocol: Callable[[Slot], asyncio.Protocol], *,
                 tls: ssl.SSLContext | None, loop: asyncio.AbstractEventLoop) -> None:
        self.sock = sock
        self.gate = gate
        self._protocol = protocol
        self._tls = tls
        self._loop = loop
        self._slots: set[Slot] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False

    def start(self) -> None:
        self.sock.setblocking(False)
        self._loop.add_reader(self.sock.fileno(), self._accept_some)
        self._sweeper = self._loop.call_later(SWEEP_INTERVAL, self._sweep)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.remove_reader(self.sock.fileno())
        if self._sweeper is not None:
            self._sweeper.cancel()
        self.sock.close()

    async def wait_closed(self) -> None:
        return None

    def release_all(self) -> None:
        """Give back every place still held (the server has stopped)."""
        for slot in list(self._slots):
            slot.release()

    def _accept_some(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, address = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._accept_failed(exc)
                return
            self._admit(conn, address)

    def _admit(self, conn: socket.socket, address: Any) -> None:
        host = address[0] if isinstance(address, tuple) else str(address)
        refused = self.gate.admit(host)
        if refused is not None:
            self.gate.refused += 1
            _reset(conn)
            log.warning("refused a connection from %s: %s reached", host, refused)
            return
        slot = Slot(self.gate, host, conn, self._slots.discard)
        self._slots.add(slot)
        conn.setblocking(False)
        task = self._loop.create_task(self._connect(slot))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect(self, slot: Slot) -> None:
        timeout = self.gate.limits.read_timeout if self._tls is not None else None
        try:
            await self._loop.connect_accepted_socket(
                lambda: self._protocol(slot), slot.sock, ssl=self._tls,
                ssl_handshake_timeout=timeout)
        except (TimeoutError, OSError, ssl.SSLError, ConnectionError) as exc:
            log.warning("closed a connection from %s before its first request: %s",
                        slot.host, exc or type(exc).__name__)
            slot.sock.close()
            slot.release()

    def _accept_failed(self, exc: OSError) -> None:
        if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
            log.warning("could not accept a connection (%s); accepting again in %.0f s",
                        exc, ACCEPT_PAUSE)
            self._loop.remove_reader(self.sock.fileno())
            self._loop.call_later(ACCEPT_PAUSE, self._resume)

    def _resume(self) -> None:
        if not self._closed:
            self._loop.add_reader(self.sock.fileno(), self._accept_some)

    def _sweep(self) -> None:
        """Give back the places of sockets closed without a ``connection_lost``."""
        for slot in [s for s in self._slots if s.sock.fileno() == -1]:
            slot.release()
        if not self._closed:
            self._sweeper = self._loop.call_later(SWEEP_INTERVAL, self._sweep)


def _reset(conn: socket.socket) -> None:
    try:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
    except OSError:
        pass
    conn.close()


class CoalescingTransport:
    """A transport whose writes in one run of the event loop go out as one write, so that
    uvicorn's separate head and body make one system call (BENCHMARKS.md)."""

    __slots__ = ("_transport", "_loop", "_pending", "_held")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._held = 0

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(data)
        self._held += len(data)
        if self._held >= COALESCE_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            self._held = 0
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending.clear()
        self._held = 0
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + self._held

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class LimitedHttpProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol where a request, and an answer's draining, must complete
    within ``read_timeout``."""

    def __init__(self, *, slot: Slot, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._slot = slot
        self._read_timeout = slot.gate.limits.read_timeout
        self._reading: asyncio.TimerHandle | None = None
        self._stalled: asyncio.TimerHandle | None = None
        self._lingering: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        for timer in (self._stalled, self._lingering):
            if timer is not None:
                timer.cancel()
        try:
            super().connection_lost(exc)
        finally:
            self._slot.release()

    def data_received(self, data: bytes) -> None:
        self._arm()  # trickling does not restart the clock
        super().data_received(data)

    def on_message_begin(self) -> None:
        self._arm()
        super().on_message_begin()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()

    def shutdown(self) -> None:
        """Close as uvicorn does, then cut the connection after :data:`SHUTDOWN_GRACE`, so
        that a stop never waits on a client."""
        super().shutdown()
        self._lingering = self.loop.call_later(SHUTDOWN_GRACE, self._cut_short)

    def _cut_short(self) -> None:
        if self.transport.is_closing():
            self.transport.abort()
        else:
            self._lingering = self.loop.call_later(SHUTDOWN_GRACE, self._cut_short)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stalled is None:
            self._stalled = self.loop.call_later(self._read_timeout, self._write_timed_out)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None

    def _arm(self) -> None:
        if self._reading is None:
            self._reading = self.loop.call_later(self._read_timeout, self._read_timed_out)

    def _disarm(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
            self._reading = None

    def _read_timed_out(self) -> None:
        self._reading = None
        if self.transport.is_closing():
            return
        log.warning("closed a connection from %s: no complete request within %g s "
                    "(read_timeout)", self._slot.host, self._read_timeout)
        answering = self.cycle is not None and self.cycle.response_started
        if answering or self.transport.get_write_buffer_size():
            self.transport.abort()
            return
        self.transport.write(STATUS_LINE[408] + b"content-length: 0\r\nconnection: close\r\n\r\n")
        self.transport.close()

    def _write_timed_out(self) -> None:
        self._stalled = None
        if not self.transport.is_closing():
            log.warning("closed a connection from %s: it read none of its answer for %g s "
                        "(read_timeout)", self._slot.host, self._read_timeout)
            self.transport.abort()


class LimitedServer(uvicorn.Server):
    """uvicorn's server with our own listeners and protocol."""

    def __init__(self, config: uvicorn.Config, limits: ServerLimits, *,
                 budget: DescriptorBudget | None = None) -> None:
        super().__init__(config)
        self.limits = limits
        self.gate = ConnectionGate(limits, budget)
        limit_repeats(server_loggers())

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await self.lifespan.startup()
        if self.lifespan.should_exit:
            raise SystemExit(STARTUP_FAILURE)
        config, loop = self.config, asyncio.get_running_loop()
        try:
            bound = sockets or bind(config.host, config.port)
        except OSError as exc:
            log.error("could not listen on %s:%s: %s", config.host, config.port, exc)
            await self.lifespan.shutdown()
            raise SystemExit(STARTUP_FAILURE) from exc
        # uvicorn only closes and awaits its servers: a LimitedListener does both
        self.servers = [LimitedListener(sock, self.gate, self._protocol, tls=config.ssl,
                                        loop=loop) for sock in bound]  # type: ignore[misc]
        for listener in self.servers:
            listener.start()  # type: ignore[attr-defined]
        self.started = True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().shutdown(sockets)
        finally:
            for listener in self.servers:
                listener.release_all()  # type: ignore[attr-defined]

    def _protocol(self, slot: Slot) -> asyncio.Protocol:
        return LimitedHttpProtocol(slot=slot, config=self.config,
                                   server_state=self.server_state,
                                   app_state=self.lifespan.state)


def server_loggers() -> tuple[str, ...]:
    """The loggers that must not write a line per request: ``SERVER_LOGGERS`` and every
    module's of :data:`SERVER_PACKAGES`."""
    names = list(SERVER_LOGGERS)
    for package in SERVER_PACKAGES:
        spec = importlib.util.find_spec(package)
        places = spec.submodule_search_locations if spec is not None else None
        names += [f"{package}.{module.name}" for module in pkgutil.iter_modules(places or [])]
    return tuple(dict.fromkeys(names))


def bind(host: str, port: int, backlog: int = LISTEN_BACKLOG) -> list[socket.socket]:
    """Listening sockets on every address ``host`` resolves to (as asyncio binds them)."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                               flags=socket.AI_PASSIVE)
    bound: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            bound.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
    except OSError:
        for sock in bound:
            sock.close()
        raise
    return bound


def limited_server(app: Any, *, host: str, port: int, limits: ServerLimits,
                   tls_cert: str | None = None, tls_key: str | None = None,
                   budget: DescriptorBudget | None = None,
                   **options: Any) -> LimitedServer:
    """A :class:`LimitedServer` of ``app``; ``options`` go to ``uvicorn.Config``."""
    config = uvicorn.Config(app, host=host, port=port, ssl_certfile=tls_cert or None,
                            ssl_keyfile=tls_key or None, loop=LOOP, http="httptools",
                            ws="none", backlog=LISTEN_BACKLOG,
                            timeout_keep_alive=limits.keepalive_timeout,  # type: ignore[arg-type]
                            **options)
    return LimitedServer(config, limits, budget=budget)
