"""The doorbell of an SQLite database: announcements between the processes sharing the file.

SQLite has no NOTIFY. Each listening process binds a Unix datagram socket in ``<file>-notify/``
(or, for a too-long path, a temp directory named after the file's real path); a committer
sends one datagram of JSON lines to every other socket. A lost datagram is covered by the
waiters' safety-net poll.
"""
from __future__ import annotations

import atexit
import errno
import hashlib
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable

from engine.store.notify import Announcement

log = logging.getLogger(__name__)

MAX_SOCKET_PATH = 100  # the kernel allows 107
MAX_DATAGRAM = 60_000  # bytes of one datagram we send
RECEIVE_TIMEOUT = 0.5  # seconds between a receiver's checks for a stop


def socket_directory(database: str) -> str:
    """Where the doorbells of the SQLite file ``database`` are."""
    real = os.path.realpath(database)
    beside = f"{real}-notify"
    if len(os.fsencode(beside)) + 40 <= MAX_SOCKET_PATH:
        return beside
    digest = hashlib.sha256(os.fsencode(real)).hexdigest()[:24]
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"encore-{os.getuid()}-{digest}")


class Doorbell:
    """Rings the other processes of one SQLite database, and hears them after :meth:`listen`."""

    def __init__(self, database: str) -> None:
        self.directory = socket_directory(database)
        self._own: str | None = None
        self._peers: tuple[int, list[str]] = (-1, [])  # (directory mtime, socket paths)
        self._lock = threading.Lock()
        self._receiver: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def ring(self, notes: Iterable[Announcement]) -> None:
        """Send ``notes`` to every other listening process. Never fails."""
        peers = self._listening_peers()
        if not peers:
            return
        for datagram in _datagrams(notes):
            for path in peers:
                self._send(datagram, path)

    def _listening_peers(self) -> list[str]:
        try:
            mtime = os.stat(self.directory).st_mtime_ns
        except OSError:
            return []
        cached_mtime, peers = self._peers
        if mtime != cached_mtime:
            try:
                names = os.listdir(self.directory)
            except OSError:
                return []
            peers = [os.path.join(self.directory, n) for n in names if n.endswith(".sock")]
            self._peers = (mtime, peers)
        return [p for p in peers if p != self._own]

    def _send(self, datagram: bytes, path: str) -> None:
        try:
            _sender().sendto(datagram, path)
        except ConnectionRefusedError:  # its process is gone
            _remove(path)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ENOENT, errno.EACCES, errno.EPERM):
                log.debug("doorbell %s: %s", path, exc)

    def listen(self, on_note: Callable[[Announcement], object]) -> None:
        """Bind this process's socket, then hear on a thread until :meth:`close`."""
        with self._lock:
            if self._receiver is not None:
                return
            path = os.path.join(self.directory, f"{os.getpid()}-{os.urandom(4).hex()}.sock")
            receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            for _ in range(3):  # the last process to leave removes the directory
                os.makedirs(self.directory, mode=0o700, exist_ok=True)
                try:
                    receiver.bind(path)
                    break
                except FileNotFoundError:
                    continue
            else:
                receiver.close()
                raise FileNotFoundError(errno.ENOENT, "doorbell directory removed", path)
            os.chmod(path, 0o600)
            receiver.settimeout(RECEIVE_TIMEOUT)
            self._receiver, self._own = receiver, path
            self._stop.clear()
            self._thread = threading.Thread(target=self._hear, args=(receiver, on_note),
                                            daemon=True, name="sqlite-doorbell")
            self._thread.start()
        atexit.register(self.close)

    def _hear(self, receiver: socket.socket, on_note: Callable[[Announcement], object]) -> None:
        while not self._stop.is_set():
            try:
                datagram = receiver.recv(MAX_DATAGRAM + 1024)
            except TimeoutError:
                continue
            except OSError:
                return
            for line in datagram.decode("utf-8", "replace").splitlines():
                note = Announcement.from_json(line)
                if note is not None:
                    try:
                        on_note(note)
                    except Exception:  # the receiver outlives a callback
                        log.exception("doorbell callback failed for %s", note)

    def close(self) -> None:
        """Stop hearing and remove this process's socket."""
        with self._lock:
            receiver, path, thread = self._receiver, self._own, self._thread
            self._receiver = self._own = self._thread = None
            self._stop.set()
        if thread is not None:
            if path is not None:  # wake it now rather than at its timeout
                self._send(b"", path)
            thread.join(RECEIVE_TIMEOUT * 2)
        if receiver is not None:
            receiver.close()
        if path is not None:
            _remove(path)
            try:  # the last one out removes the directory
                os.rmdir(self.directory)
            except OSError:
                pass
        atexit.unregister(self.close)

    @property
    def listening(self) -> bool:
        return self._receiver is not None


_SENDER: socket.socket | None = None  # one per process
_SENDER_LOCK = threading.Lock()


def _sender() -> socket.socket:
    global _SENDER
    if _SENDER is None:
        with _SENDER_LOCK:
            if _SENDER is None:
                sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                sender.setblocking(False)
                atexit.register(sender.close)
                _SENDER = sender
    return _SENDER


def _datagrams(notes: Iterable[Announcement]) -> list[bytes]:
    """``notes`` as JSON lines, in datagrams of at most :data:`MAX_DATAGRAM` bytes."""
    out: list[bytes] = []
    current = b""
    for note in notes:
        line = note.to_json().encode() + b"\n"
        if current and len(current) + len(line) > MAX_DATAGRAM:
            out.append(current)
            current = b""
        current += line
    if current:
        out.append(current)
    return out


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
