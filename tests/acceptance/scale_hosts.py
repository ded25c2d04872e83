"""Hosts for the scale-out acceptance tests, loaded by ``encore run`` from the production."""
from __future__ import annotations

from typing import Any

from engine import BusinessOperation, BusinessService, JsonMessage


class TickService(BusinessService):
    """Sends one message to its first target on every fire of its schedule."""

    def on_process_input(self) -> None:
        self.send(self.targets[0], {"tick": True})


class SinkOperation(BusinessOperation):
    """Accepts any JSON object and does nothing with it."""

    request_class = JsonMessage

    def on_message(self, request: Any) -> None:
        return None
