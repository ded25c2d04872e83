"""Where a listening endpoint of Encore (the metrics endpoint, the portal) can be reached
from: loopback only, or beyond."""
from __future__ import annotations

import ipaddress

__all__ = ["is_loopback"]


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``: only this machine can connect. Any
    other address, ``0.0.0.0`` and ``::`` (every interface) included, is beyond it."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
