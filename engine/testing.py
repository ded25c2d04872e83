"""Fakes for tests, Encore's own and its users': a virtual clock, adapters that record or
simulate a server, and :class:`VirtualDaemon`, the real daemon on a virtual clock."""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Self

from adapters.base import OutboundAdapter
from adapters.deadline import TryScope
from engine.client import send_message
from engine.clock import Clock, VirtualClock
from engine.config.production import ITEM_KEYS, ItemConfig, ProductionConfig
from engine.delivery.middleware import Middleware
from engine.delivery.worker import Result
from engine.errors import AdapterError, HttpStatusError, ResponseTimeout
from engine.host import BusinessOperation
from engine.settings import validate_settings
from engine.store import queries
from engine.store.memory import memory_store
from engine.store.rows import MessageRow
from engine.store.sql import SqlStore

AdapterSource = OutboundAdapter | Callable[[Clock], OutboundAdapter]

__all__ = ["SimulatedOperation", "SimulatedServerAdapter", "StubAdapter", "StubCall",
           "VirtualClock", "VirtualDaemon"]

VIRTUAL_STEPS = 100_000


@dataclass
class StubCall:
    """One call an operation made through a stub adapter."""

    attempt_deadline: float
    idempotency_key: str
    payload: Any
    server: str | None = None
    started: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


class StubAdapter(OutboundAdapter):
    """Answers ``call(payload)`` from ``script`` (a list used in order, exceptions raised,
    or a callable given the :class:`StubCall`); records every call in ``calls``."""

    def __init__(self, settings: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        self.calls: list[StubCall] = []
        self.script: list[Any] | Callable[[StubCall], Any] = []
        self._lock = threading.Lock()

    def _open(self) -> None:
        pass

    def _targets(self) -> list[str]:
        return list(self.adapter_settings.servers) or ["stub"]

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
    requests (all if None and ``status`` is set) answer ``status``."""

    delay: float = 0.0
    fail_first: int | None = None
    status: int | None = None
    retry_after: str | None = None
    late_responses: list[tuple[float, int]] = field(default_factory=list)


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
        answer: str = self.call(None)
        return answer

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


class _DeliveryLog(Middleware):
    """Records ``(message id, result)`` of each delivery that ended, in ``deliveries``."""

    def __init__(self, deliveries: list[tuple[int, Result]]) -> None:
        self.deliveries = deliveries

    @contextmanager
    def delivery(self, row: MessageRow) -> Iterator[_Ended]:
        yield _Ended(self.deliveries, row.id)


@dataclass
class _Ended:
    deliveries: list[tuple[int, Result]]
    message_id: int

    def ended(self, result: str) -> None:
        self.deliveries.append((self.message_id, Result(result)))


class VirtualDaemon:
    """The real daemon of ``production`` on a virtual clock, driven by ``tick()``: no
    thread, no real sleep, the same result on every run.

    ``store``: None makes an in-memory SQLite store. ``adapters`` replaces the adapter of the
    items it names (an adapter, or a callable given the clock). One thing happens at a
    time: a delivery's sleep ticks the daemon until it ends, so other items work meanwhile.
    """

    def __init__(self, production: ProductionConfig, store: SqlStore | None = None, *,
                 adapters: Mapping[str, AdapterSource] | None = None,
                 start: datetime | None = None, rng: Any = None) -> None:
        from engine.runtime.daemon import Daemon
        from engine.runtime.execution import SteppedRuntime

        self.production = production
        self.own_store = store is None
        if store is None:
            store = memory_store()
        self.store = store
        self.clock = _TickingClock(self, start)
        made = {name: a(self.clock) if callable(a) and not isinstance(a, OutboundAdapter) else a
                for name, a in (adapters or {}).items()}
        self.deliveries: list[tuple[int, Result]] = []
        log = _DeliveryLog(self.deliveries)
        self.daemon = Daemon(production, store=store, clock=self.clock, env={}, adapters=made,
                             rng=rng, runtime=SteppedRuntime(), middleware=(lambda _item: log,))
        self.daemon.start(background=False)
        self.ticks = 0

    @classmethod
    def for_item(cls, name: str, host_class: type[BusinessOperation],
                 settings: Mapping[str, Any], *, adapter: AdapterSource | None = None,
                 store: SqlStore | None = None, rng: Any = None,
                 **production: Any) -> VirtualDaemon:
        """A production of one item; ``production`` sets ``[production]`` values."""
        clean = validate_settings(name, settings, host_class.declared_settings())
        path = f"{host_class.__module__}:{host_class.__qualname__}"
        keys = validate_settings(name, {"name": name, "class": path}, ITEM_KEYS)
        item = ItemConfig(name=name, class_path=path, cls=host_class,
                          pool_size=keys["pool_size"], enabled=keys["enabled"], settings=clean)
        config = ProductionConfig.from_validated(
            {"name": "Virtual", "database": "sqlite://", **production}, items=(item,))
        return cls(config, store, adapters={name: adapter} if adapter is not None else None,
                   rng=rng)

    # -- what tests use ------------------------------------------------------------------
    @property
    def hosts(self) -> dict[str, BusinessOperation]:
        """The first host instance of each running item."""
        return {name: r.hosts[0] for name, r in self.daemon.runners.items() if r.hosts}

    def send(self, target: str, body: Any) -> int:
        """Enqueue ``body`` for ``target`` as ``encore send`` does; return the id."""
        return send_message(self.store, self.production, target, body, now=self.clock.now())

    def at(self, moment: datetime | None) -> float | None:
        """``moment`` as seconds on the virtual clock (None stays None)."""
        return None if moment is None else (moment - self.clock.start).total_seconds()

    def tick(self) -> float:
        """One step of the daemon now; the seconds until the next one is needed."""
        self.ticks += 1
        return self.daemon.step(self.clock.monotonic())

    def run_until(self, t: float) -> None:
        """Tick and move the clock on until virtual time ``t`` (seconds)."""
        for _ in range(VIRTUAL_STEPS):
            wake = self._next_wake(self.tick())
            if wake > t or self.clock.monotonic() >= t:
                self.clock.advance_to(t)
                return
            self.clock.advance_to(wake)
        raise RuntimeError(f"still ticking after {VIRTUAL_STEPS} ticks")

    def advance(self, seconds: float) -> None:
        """:meth:`run_until` ``seconds`` from now."""
        self.run_until(self.clock.monotonic() + seconds)

    def run(self) -> int:
        """Tick until nothing is queued or in hand; return how many ticks that took."""
        names = set(self.daemon.runners)
        for step in range(VIRTUAL_STEPS):
            wait = self.tick()
            stats = queries.queue_stats(self.store)
            if not any(stats.get(n, {}).get("queued") for n in names):
                return step + 1
            self.clock.advance_to(self._next_wake(wait))
        raise RuntimeError(f"still delivering after {VIRTUAL_STEPS} ticks")

    def stop(self) -> bool:
        """Stop the daemon (as at SIGTERM); True if it stopped cleanly."""
        clean = self.daemon.stop()
        if self.own_store:
            self.store.dispose()
        return clean

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- inside -------------------------------------------------------------------------
    def _next_wake(self, wait: float) -> float:
        """When to tick next: after ``wait`` seconds, or when a parked message falls due."""
        now = self.clock.monotonic()
        due = [self.at(t) for t in map(self.store.next_due_time, self.daemon.runners)
               if t is not None]
        later = [t for t in due if t is not None and t > now]
        return min([now + wait, *later])


class _TickingClock(VirtualClock):
    """A virtual clock whose ``sleep`` ticks its :class:`VirtualDaemon` until it ends."""

    def __init__(self, harness: VirtualDaemon, start: datetime | None) -> None:
        super().__init__(start)
        self._harness = harness

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> bool:
        if stop is not None and stop.is_set():
            return True
        self._harness.run_until(self.monotonic() + max(seconds, 0.0))
        return stop is not None and stop.is_set()
