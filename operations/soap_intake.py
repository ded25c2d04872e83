"""Checks a SOAP item's requests against its WSDL where they come in, so a request that
cannot fit is refused before anything is created. Each process keeps a loaded WSDL
:data:`KEEP_SECONDS`; one that cannot be loaded checks nothing (the worker will refuse).
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapters.base import InvalidRequest
from adapters.soap import SoapAdapter
from engine.errors import EncoreError, MessageError

__all__ = ["KEEP_SECONDS", "LOAD_TIMEOUT", "check_soap_call"]

log = logging.getLogger(__name__)

LOAD_TIMEOUT = 10.0
KEEP_SECONDS = 300.0


@dataclass
class _Loaded:
    adapter: SoapAdapter | None
    until: float


_loaded: dict[str, _Loaded] = {}
_locks: dict[str, threading.Lock] = {}  # one per item: a slow WSDL delays only its own item
_locks_lock = threading.Lock()


def check_soap_call(name: str, settings: Mapping[str, Any], operation: str,
                    args: Mapping[str, Any]) -> None:
    """Raise MessageError if ``operation`` or ``args`` do not fit item ``name``'s WSDL."""
    adapter = _adapter(name, settings)
    if adapter is None:
        return
    try:
        adapter.check_call(operation, args)
    except InvalidRequest as exc:
        raise MessageError(f"item {name!r}: {exc}; nothing was enqueued") from exc
    except EncoreError as exc:  # stopped meanwhile: the worker checks
        log.debug("item %s: request not checked: %s", name, exc)


def _adapter(name: str, settings: Mapping[str, Any]) -> SoapAdapter | None:
    key = json.dumps([name, settings], sort_keys=True, default=str)
    with _locks_lock:
        lock = _locks.setdefault(key, threading.Lock())
    with lock:  # concurrent first calls wait for one load, they do not repeat it
        found = _loaded.get(key)
        now = time.monotonic()
        if found is None or found.until <= now:
            if found is not None and found.adapter is not None:
                found.adapter.stop()
            found = _loaded[key] = _load(name, settings, now)
        return found.adapter


def _load(name: str, settings: Mapping[str, Any], now: float) -> _Loaded:
    timeout = float(settings.get("response_timeout") or LOAD_TIMEOUT)
    bounded = {**settings, "response_timeout": LOAD_TIMEOUT if timeout < 0
               else min(timeout, LOAD_TIMEOUT)}
    adapter = SoapAdapter(bounded, item_name=name, env=os.environ)
    try:
        adapter.start()
    except EncoreError as exc:
        log.info("item %s: requests not checked against the WSDL for now: %s", name, exc)
        adapter.stop()
        return _Loaded(None, now + KEEP_SECONDS / 10)
    return _Loaded(adapter, now + KEEP_SECONDS)
