"""Encore: an Ensemble-style integration engine.

The public API: subclass :class:`BusinessOperation` (or :class:`BusinessProcess`, to call
other items), describe requests and responses as :class:`Message` dataclasses, raise
:class:`Retry` to ask for a retry.
"""
from __future__ import annotations

from engine.clock import Clock, SystemClock, VirtualClock
from engine.errors import (AdapterError, CallFailed, CallTimedOut, ConfigurationError,
                           EncoreError, MessageError, ProcessError, Retry, StoreError)
from engine.host import BusinessHost, BusinessOperation
from engine.message import JsonMessage, Message
from engine.process import BusinessProcess
from engine.service import BusinessService

__all__ = [
    "AdapterError", "BusinessHost", "BusinessOperation", "BusinessProcess", "BusinessService",
    "CallFailed", "CallTimedOut", "Clock", "ConfigurationError", "EncoreError", "JsonMessage",
    "Message", "MessageError", "ProcessError", "Retry", "StoreError", "SystemClock",
    "VirtualClock",
]
