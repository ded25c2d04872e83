"""Encore: an Ensemble-style integration engine.

The hosts and messages are imported on first use (PEP 562), so that ``import engine`` and
commands that only read the database do not load the retry engine or the HTTP and SOAP
stacks.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from engine.clock import Clock, SystemClock, VirtualClock
from engine.errors import (
    AdapterError,
    CallFailed,
    CallTimedOut,
    ConfigurationError,
    EncoreError,
    MessageError,
    ProcessError,
    Retry,
    StoreError,
)

if TYPE_CHECKING:
    from engine.host import BusinessHost, BusinessOperation
    from engine.message import JsonMessage, Message
    from engine.process import BusinessProcess
    from engine.service import BusinessService

_LAZY = {"BusinessHost": "engine.host", "BusinessOperation": "engine.host",
         "BusinessProcess": "engine.process", "BusinessService": "engine.service",
         "JsonMessage": "engine.message", "Message": "engine.message"}

__all__ = [
    "AdapterError", "BusinessHost", "BusinessOperation", "BusinessProcess", "BusinessService",
    "CallFailed", "CallTimedOut", "Clock", "ConfigurationError", "EncoreError", "JsonMessage",
    "Message", "MessageError", "ProcessError", "Retry", "StoreError", "SystemClock",
    "VirtualClock",
]


def __getattr__(name: str) -> Any:
    """``engine.BusinessOperation`` and the others of ``_LAZY``, imported when first asked."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
