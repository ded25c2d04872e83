"""A hostile business operation for the fault campaign's *live stall*: the daemon stays
alive — its sockets accept, its process answers signals — but one C call holds its
interpreter (the GIL) past the lease, so that no other thread of it runs: not the
heartbeat, not the other items' workers, not the portal. What a pathological regular
expression or a quadratic parse of hostile input does (issue 36 finding 1), made exact.

The call is ``poll(NULL, 0, ms)`` through :class:`ctypes.PyDLL`, which keeps the GIL during
the call (``ctypes.CDLL`` would release it): a fixed time whatever the machine's load, and
no CPU burnt on a shared machine. A marker file in the daemon's directory makes each stall
happen once, even if its message is delivered again.
"""
from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

from engine import BusinessOperation

__all__ = ["StallOperation", "marker"]


def marker(directory: Path, stall: str, state: str) -> Path:
    """The file that says stall ``stall`` has ``state`` ("begun" | "ended")."""
    return directory / f"stall-{stall}.{state}"


class StallOperation(BusinessOperation):
    """``{"stall": "<id>", "seconds": 3.5}``: holds the GIL ``seconds`` in one C call."""

    def on_message(self, request: Any) -> dict[str, Any]:
        data = getattr(request, "data", request)  # a JsonMessage: {"stall": ..., ...}
        stall, seconds = str(data["stall"]), float(data["seconds"])
        begun = marker(Path.cwd(), stall, "begun")
        if begun.exists():
            return {"stalled": False}
        begun.touch()
        ctypes.PyDLL(None).poll(None, 0, int(seconds * 1000))
        marker(Path.cwd(), stall, "ended").touch()
        return {"stalled": True}
