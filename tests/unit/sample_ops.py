"""Small operations used by the tests."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine import BusinessOperation, Message, Retry
from engine.testing import StubAdapter


@dataclass
class Ping(Message):
    text: str
    count: int = 1


class EchoOperation(BusinessOperation):
    """Answers with the request, without any adapter."""

    request_class = Ping

    def on_message(self, request: Ping) -> Ping:
        return Ping(text=request.text.upper(), count=request.count)


class StubOperation(BusinessOperation):
    """Calls a StubAdapter once per attempt."""

    adapter_class = StubAdapter

    def on_message(self, request: Any) -> Any:
        assert isinstance(self.adapter, StubAdapter)
        return {"answer": self.adapter.call(request.to_dict())}


class RetryTwiceOperation(BusinessOperation):
    """Asks for a retry on its first two attempts, in both supported ways."""

    def on_message(self, request: Any) -> Any:
        if self.retry_count == 1:
            raise Retry("not yet")
        if self.retry_count == 2:
            self.retry = True
            return None
        return {"attempt": self.retry_count}


class BrokenInitOperation(EchoOperation):
    """Cannot start: its ``on_init`` raises."""

    def on_init(self) -> None:
        raise RuntimeError("the ledger file is locked")


class NamedEchoOperation(BusinessOperation):
    """Answers with its own item name and the JSON it was sent (any JSON object)."""

    def on_message(self, request: Any) -> Any:
        return {"by": self.name, "data": request.data}
