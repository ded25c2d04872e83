"""Small business processes used by the tests."""
from __future__ import annotations

import json
from typing import Any

from engine import BusinessProcess, JsonMessage


class QuoteAndTax(BusinessProcess):
    """Asks ``Quote`` for a price, then ``Tax`` for the tax on it, and answers with both."""

    def on_request(self, request: JsonMessage) -> dict[str, Any]:
        quote = self.send_request_sync("Quote", {"item": request.data["item"]})
        price = quote.data["answer"]["price"]
        tax = self.send_request_sync("Tax", {"price": price})
        return {"item": request.data["item"], "price": price, "tax": tax.data["answer"]["tax"]}


class Impatient(BusinessProcess):
    """Waits for ``Slow`` at most ``timeout`` seconds (from the request)."""

    def on_request(self, request: JsonMessage) -> Any:
        return self.send_request_sync("Slow", {"method": "GET", "path": "/slow"},
                                      timeout=request.data["timeout"])


class FireAndForget(BusinessProcess):
    """Sends to ``Quote`` and ``Tax`` without waiting; answers with the two ids."""

    def on_request(self, request: JsonMessage) -> dict[str, int]:
        return {"quote": self.send_request_async("Quote", request),
                "tax": self.send_request_async("Tax", {"price": 1})}


class CallsItself(BusinessProcess):
    """Tries to wait for its own queue."""

    def on_request(self, request: JsonMessage) -> Any:
        return self.send_request_sync(self.name, request)


class PriceWithTax(BusinessProcess):
    """Asks ``Prices`` (an HTTP operation) for the price of an item, then ``Taxes`` for the
    tax on that price, and answers with both and their total."""

    def on_request(self, request: JsonMessage) -> dict[str, Any]:
        item = request.data["item"]
        price = json.loads(self.send_request_sync(
            "Prices", {"method": "GET", "path": f"/price/{item}"}).body)["price"]
        tax = json.loads(self.send_request_sync(
            "Taxes", {"method": "POST", "path": "/tax", "json": {"price": price}}).body)["tax"]
        return {"item": item, "price": price, "tax": tax, "total": price + tax}
