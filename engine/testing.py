"""Fakes for tests — Encore's own and its users': a virtual clock and adapters that record.

:class:`StubAdapter` answers from a script instead of a network; :class:`SimulatedServerAdapter`
plays a remote service with a fixed reply delay on a virtual clock, enforcing the attempt's
deadline the way the real adapters do. ``encore simulate`` uses it.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from adapters.base import OutboundAdapter
from adapters.deadline import TryScope
from engine.clock import VirtualClock
from engine.errors import AdapterError, HttpStatusError, ResponseTimeout
from engine.host import BusinessOperation

__all__ = ["SimulatedOperation", "SimulatedServerAdapter", "StubAdapter", "StubCall",
           "VirtualClock"]


@dataclass
class StubCall:
    """One call an operation made through a stub adapter."""

    attempt_deadline: float
    idempotency_key: str
    payload: Any
    server: str | None = None
    started: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)  # what its requests would carry


class StubAdapter(OutboundAdapter):
    """Answers ``call(payload)`` from ``script`` instead of a network: a list of answers used
    in order (an exception instance is raised instead of returned), or one callable given
    the :class:`StubCall`. Every call is recorded in ``calls``. Goes through the same
    template method, deadline and failover code as the real adapters."""

    def __init__(self, settings: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        self.calls: list[StubCall] = []
        self.script: list[Any] | Callable[[StubCall], Any] = []
        self._lock = threading.Lock()

    def _open(self) -> None:
        pass

    def _targets(self) -> list[str]:
        return list(self.settings["servers"]) or ["stub"]

    def _classify(self, exc: Exception, scope: TryScope, server: str) -> AdapterError | None:
        return None

    def _transmit(self, server: str, request: Any, scope: TryScope) -> Any:
        ctx = self.current_attempt()
        record = StubCall(attempt_deadline=ctx.deadline, idempotency_key=ctx.idempotency_key,
                          payload=request, server=server, started=self.clock.monotonic(),
                          headers=self.attempt_headers())
        with self._lock:
            self.calls.append(record)
            answer = self.script(record) if callable(self.script) else self.script.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


@dataclass
class ServerBehaviour:
    """How the simulated service answers: after ``delay`` seconds; the first ``fail_first``
    requests (all of them when None and ``status`` is set) answer ``status`` instead."""

    delay: float = 0.0
    fail_first: int | None = None
    status: int | None = None
    retry_after: str | None = None
    late_responses: list[tuple[float, int]] = field(default_factory=list)  # (time, server)


class SimulatedServerAdapter(OutboundAdapter):
    """Plays ``servers`` identical remote services (named A, B, C, ...) on a
    :class:`VirtualClock`, through the real adapters' deadline and failover code."""

    def __init__(self, settings: Mapping[str, Any], *, behaviour: ServerBehaviour,
                 servers: int = 1, **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        self.behaviour = behaviour
        self.names = [chr(ord("A") + i) if i < 26 else f"S{i}" for i in range(servers)]
        self.total_requests = 0

    def invoke(self) -> str:
        return self.call(None)

    def _open(self) -> None:
        pass

    def _targets(self) -> list[str]:
        return list(self.names)

    def _classify(self, exc: Exception, scope: TryScope, server: str) -> AdapterError | None:
        return None

    def _transmit(self, server: str, request: Any, scope: TryScope) -> Any:
        started = self.clock.monotonic()
        self.total_requests += 1
        b = self.behaviour
        if b.delay > scope.remaining():
            b.late_responses.append((started + b.delay, self.names.index(server)))
            self._advance(scope.remaining())
            raise ResponseTimeout(f"no response within the response timeout of "
                                  f"{self.response_timeout:g} seconds", server=server)
        self._advance(b.delay)
        failing = self.total_requests <= b.fail_first if b.fail_first is not None \
            else b.status is not None
        if failing:
            status = b.status or 503
            headers = {"Retry-After": b.retry_after} if b.retry_after else {}
            raise HttpStatusError(f"HTTP {status}", server=server, code=str(status),
                                  status_code=status, headers=headers,
                                  retryable=status in self.retry_on_status)
        return f"answered by server {server}"

    def _advance(self, seconds: float) -> None:
        if isinstance(self.clock, VirtualClock):
            self.clock.advance(seconds)


class SimulatedOperation(BusinessOperation):
    """Calls the simulated service once per attempt."""

    adapter_class = SimulatedServerAdapter

    def on_message(self, request: Any) -> Any:
        assert isinstance(self.adapter, SimulatedServerAdapter)
        return {"result": self.adapter.invoke()}
