"""Inbound services: SOAP and HTTP endpoints that other systems call (docs/inbound.md).

``engine.inbound:SoapService`` serves a WSDL (:mod:`engine.inbound.soap`);
``engine.inbound:HttpService`` plain HTTP routes (:mod:`engine.inbound.http`). Both are
served by the daemon's inbound server (:mod:`engine.inbound.server`, the ``[inbound]``
table) and put each request they accept into the production as a message to their target.
"""
from __future__ import annotations

from engine.inbound.base import InboundService
from engine.inbound.http import HttpService
from engine.inbound.refusals import Refused
from engine.inbound.soap import SoapService

__all__ = ["HttpService", "InboundService", "Refused", "SoapService"]
