"""Whether a daemon of this host is dead, judged by its process (docs/architecture.md)."""
from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["boot_id", "pid_namespace", "process_start", "why_dead", "why_local_daemon_dead"]

_STATE_FIELD = 0  # of the fields after the command's closing parenthesis: field 3, the state
_START_FIELD = 19  # likewise: field 22, the start time in clock ticks after the boot


def boot_id() -> str | None:
    """The kernel's boot of this host; None where the system does not tell."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def pid_namespace() -> str | None:
    """This process's PID namespace and boot; None: unknown (no PID is trusted)."""
    boot = boot_id()
    try:
        return None if boot is None else f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return None


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name; None if unavailable."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split()


def process_start(pid: int | None = None) -> int | None:
    """The start of process ``pid`` (None: this one) in clock ticks after boot; None if unknown."""
    return _start_of(_stat(os.getpid() if pid is None else pid))


def _start_of(fields: list[str] | None) -> int | None:
    try:
        return None if fields is None else int(fields[_START_FIELD])
    except (IndexError, ValueError):
        return None


def why_dead(pid: int, started: int | None) -> str | None:
    """Why the daemon of process ``pid`` started at ``started`` is dead, or None."""
    fields = _stat(pid)
    if fields is None:
        return None if _signalable(pid) else f"pid {pid} gone"
    if fields[_STATE_FIELD:_STATE_FIELD + 1] in (["Z"], ["X"]):
        return f"pid {pid} a zombie"
    start = _start_of(fields)
    if started is not None and start is not None and start != started:
        return f"pid {pid} now another process's"
    return None


def _signalable(pid: int) -> bool:
    """True if a process ``pid`` exists (fallback without ``/proc``)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def why_local_daemon_dead(row: Mapping[str, Any]) -> str | None:
    """:func:`why_dead` for a ``daemon`` row of this host, namespace and boot, else None."""
    namespace = pid_namespace()
    if namespace is None or row.get("pid_namespace") != namespace:
        return None
    if row.get("host") != socket.gethostname():
        return None
    return why_dead(int(row["pid"]), row.get("process_start"))
