"""Inbound services: SOAP and HTTP endpoints that other systems call (docs/inbound.md)."""
from __future__ import annotations

from engine.inbound.base import InboundService
from engine.inbound.http import HttpService
from engine.inbound.refusals import Refused
from engine.inbound.soap import SoapService

__all__ = ["HttpService", "InboundService", "Refused", "SoapService"]
