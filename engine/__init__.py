"""Encore: an Ensemble-style integration engine.

The public API: subclass :class:`BusinessOperation`, describe requests and responses as
:class:`Message` dataclasses, raise :class:`Retry` to ask for a retry.
"""
from __future__ import annotations

from engine.clock import Clock, SystemClock, VirtualClock
from engine.errors import (AdapterError, ConfigurationError, EncoreError, MessageError, Retry,
                           StoreError)
from engine.host import BusinessHost, BusinessOperation
from engine.message import JsonMessage, Message
from engine.service import BusinessService

__all__ = [
    "AdapterError", "BusinessHost", "BusinessOperation", "BusinessService", "Clock", "ConfigurationError",
    "EncoreError", "JsonMessage", "Message", "MessageError", "Retry", "StoreError",
    "SystemClock", "VirtualClock",
]
