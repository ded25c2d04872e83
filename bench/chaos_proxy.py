"""A loopback TCP proxy in front of a database server that the fault campaign can break.

Each client of the campaign (every daemon, the producer) reaches each database node
through a :class:`FaultProxy` of its own, so one daemon can be cut off while the others
go on. Faults, each undone by :meth:`FaultProxy.heal`:

- :meth:`cut`: every open connection is reset at once, and new ones are reset for a while
  (a server restart as its clients see it);
- :meth:`blackhole`: nothing is forwarded either way and new connections hang, but nothing
  is closed (a network partition: TCP keeps the connections, and they go on where they
  were when it heals — the bytes wait in the socket buffers);
- :meth:`delay`: every chunk is forwarded ``seconds`` late (a slow link).

Two threads per connection pump bytes; they poll the proxy's state every
``POLL`` seconds, so a fault takes hold within that time.
"""
from __future__ import annotations

import socket
import struct
import threading
import time

__all__ = ["FaultProxy"]

POLL = 0.05  # seconds between two looks at the proxy's state while blocked
CHUNK = 65536


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a TCP reset (SO_LINGER 0), as a dead server's host would."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class FaultProxy:
    """Listens on a free loopback port and forwards to ``target`` (host, port)."""

    def __init__(self, target: tuple[str, int], name: str = "proxy") -> None:
        self.target = target
        self.name = name
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._refuse_until = 0.0  # monotonic: new connections are reset until then
        self._blackhole = False
        self._delay = 0.0  # seconds added to every chunk
        self._closed = False
        self.connections = 0  # accepted so far
        threading.Thread(target=self._accept_loop, daemon=True, name=f"{name}-accept").start()

    # -- faults ----------------------------------------------------------------------------
    def cut(self, refuse_for: float = 0.0) -> int:
        """Reset every open connection; reset new ones for ``refuse_for`` seconds. Returns
        how many were cut."""
        with self._lock:
            self._refuse_until = time.monotonic() + refuse_for
            pairs, self._pairs = self._pairs, set()
        for client, server in pairs:
            _reset(client)
            _reset(server)
        return len(pairs)

    def blackhole(self) -> None:
        self._blackhole = True

    def delay(self, seconds: float) -> None:
        self._delay = seconds

    def heal(self) -> None:
        self._blackhole = False
        self._delay = 0.0
        self._refuse_until = 0.0

    def close(self) -> None:
        self._closed = True
        self.cut()
        try:
            self._listener.close()
        except OSError:
            pass

    # -- pumping ---------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if time.monotonic() < self._refuse_until:
                _reset(client)
                continue
            threading.Thread(target=self._open, args=(client,), daemon=True,
                             name=f"{self.name}-open").start()

    def _open(self, client: socket.socket) -> None:
        while self._blackhole and not self._closed:  # a partition: the connect hangs
            time.sleep(POLL)
        try:
            server = socket.create_connection(self.target, timeout=10)
        except OSError:
            _reset(client)
            return
        for sock in (client, server):
            sock.settimeout(POLL)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pair = (client, server)
        with self._lock:
            self._pairs.add(pair)
            self.connections += 1
        threading.Thread(target=self._pump, args=(client, server, pair), daemon=True,
                         name=f"{self.name}-up").start()
        threading.Thread(target=self._pump, args=(server, client, pair), daemon=True,
                         name=f"{self.name}-down").start()

    def _pump(self, source: socket.socket, sink: socket.socket,
              pair: tuple[socket.socket, socket.socket]) -> None:
        try:
            while self._alive(pair):
                if self._blackhole:
                    time.sleep(POLL)
                    continue
                try:
                    data = source.recv(CHUNK)
                except TimeoutError:
                    continue
                if not data:
                    break
                if self._delay:
                    time.sleep(self._delay)
                while self._blackhole and self._alive(pair):  # hold what was read
                    time.sleep(POLL)
                self._send_all(sink, data, pair)
        except OSError:
            pass
        self._drop(pair)

    def _send_all(self, sink: socket.socket, data: bytes,
                  pair: tuple[socket.socket, socket.socket]) -> None:
        view = memoryview(data)
        while view and self._alive(pair):
            try:
                view = view[sink.send(view):]
            except TimeoutError:
                continue

    def _alive(self, pair: tuple[socket.socket, socket.socket]) -> bool:
        with self._lock:
            return pair in self._pairs

    def _drop(self, pair: tuple[socket.socket, socket.socket]) -> None:
        with self._lock:
            known = pair in self._pairs
            self._pairs.discard(pair)
        if known:  # the other side closed: pass the close on (a FIN, not a reset)
            for sock in pair:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
