"""Disk full for the campaign's SQLite daemon, and the portal flood.

Disk full, two ways, the first that works:

- ``tmpfs`` (root, as CI runs): the SQLite database lives on a tmpfs of its own
  (``mount -t tmpfs -o size=256m``); *full* is a file that takes every free byte
  (``posix_fallocate``), *freed* is its removal. A real ``ENOSPC`` for every write of the
  daemon — database, WAL, journal — and instant to inject and undo, with no loop device,
  no image to format and nothing left behind but a mount point the campaign unmounts.
  Chosen over a loop-mounted image because containers often have no free loop device while
  tmpfs needs only the mount capability, and over an ``LD_PRELOAD`` shim because the engine
  under test stays exactly the one users run.
- ``fsize`` (no mount allowed): ``prlimit(RLIMIT_FSIZE)`` on the daemon's process, so no
  file of it can grow (``EFBIG``; CPython ignores ``SIGXFSZ``). Not the same errno as a
  full disk, but the same effect on SQLite: its writes fail until the limit is lifted.
"""
from __future__ import annotations

import contextlib
import os
import resource
import shutil
import socket
import subprocess
import time
from pathlib import Path

__all__ = ["SqliteDisk", "flood"]

TMPFS_SIZE = "256m"
FILLER = ".chaos-filler"


class SqliteDisk:
    """The directory the SQLite database lives in, and how to fill it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.mode = "tmpfs" if self._mount() else "fsize"
        self._limited: int | None = None

    def _mount(self) -> bool:
        if os.geteuid() != 0 or not shutil.which("mount"):
            return False
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0755",
                                 "tmpfs", str(self.directory)], capture_output=True, timeout=30)
        return result.returncode == 0

    def fill(self, pid: int) -> str:
        if self.mode == "tmpfs":
            stat = os.statvfs(self.directory)
            free = stat.f_bavail * stat.f_frsize
            fd = os.open(self.directory / FILLER, os.O_CREAT | os.O_WRONLY, 0o600)
            try:
                with contextlib.suppress(OSError):
                    os.posix_fallocate(fd, 0, free)
            finally:
                os.close(fd)
            return f"tmpfs filled ({free // 1024} KiB)"
        self._limited = pid
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (1, resource.RLIM_INFINITY))
        return f"RLIMIT_FSIZE of pid {pid} set to 1 byte"

    def free(self) -> None:
        if self.mode == "tmpfs":
            with contextlib.suppress(FileNotFoundError):
                (self.directory / FILLER).unlink()
            return
        if self._limited is not None:
            with contextlib.suppress(ProcessLookupError):
                resource.prlimit(self._limited, resource.RLIMIT_FSIZE,
                                 (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            self._limited = None

    def close(self) -> None:
        self.free()
        if self.mode == "tmpfs":
            subprocess.run(["umount", "-l", str(self.directory)], capture_output=True,
                           timeout=30)


def flood(port: int, connections: int, seconds: float) -> str:
    """Hold ``connections`` half-open requests (a request line and one header, never the
    blank line) at ``127.0.0.1:port`` for ``seconds``, then drop them all."""
    held: list[socket.socket] = []
    refused = 0
    try:
        for _ in range(connections):
            sock = socket.socket()
            sock.settimeout(0.5)
            try:
                sock.connect(("127.0.0.1", port))
                sock.sendall(b"GET /login HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                held.append(sock)
            except OSError:
                refused += 1
                sock.close()
        time.sleep(seconds)
    finally:
        for sock in held:
            with contextlib.suppress(OSError):
                sock.close()
    return f"{len(held)} half-open connections held {seconds:g} s, {refused} refused"
