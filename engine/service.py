"""Business services: hosts the scheduler polls, that put messages into the production
(docs/architecture.md)."""
from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from engine.client import send_message, wait_for_response
from engine.clock import Clock, SystemClock
from engine.config.cron import parse_schedule
from engine.config.production import ProductionConfig
from engine.errors import CallFailed, CallTimedOut, ConfigurationError, EncoreError, MessageError
from engine.eventsink import EventSink
from engine.host import BusinessHost
from engine.message import Message
from engine.settings import Setting, TypedSettings, setting
from engine.store.sql import SqlStore

__all__ = ["SERVICE_SETTINGS", "BusinessService", "CallFailed", "CallTimedOut",
           "ServiceSettings", "parse_schedule"]

DEFAULT_CALL_INTERVAL = 5.0
SCHEDULE_EXAMPLE = 'schedule = "*/5 * * * *" (every 5 minutes) or "30 2 * * mon-fri"'


def _check_schedule(value: str) -> str:
    expr = " ".join(value.split())
    if not expr:
        return ""
    try:
        parse_schedule(expr)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{value!r} is not a cron expression: {exc}. Expected 5 fields "
                         f"'minute hour day month day-of-week' in UTC, e.g. "
                         f"{SCHEDULE_EXAMPLE}; \"\" = use call_interval") from exc
    return expr


def _check_interval(value: float) -> float:
    if value <= 0:
        raise ValueError(f"{value!r} is out of range; expected a number of seconds > 0, "
                         "e.g. call_interval = 5")
    return float(value)


def _check_targets(value: list[Any]) -> list[str]:
    bad = [t for t in value if not isinstance(t, str) or not t]
    if bad:
        raise ValueError(f"expected a list of item names, e.g. targets = [\"Payments\"]; "
                         f"not names: {', '.join(repr(b) for b in bad)}")
    return list(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceSettings(TypedSettings):
    """A business service's settings: :data:`SERVICE_SETTINGS`."""

    call_interval: float = setting(
        kind=float, default=DEFAULT_CALL_INTERVAL, check=_check_interval,
        help="seconds between calls of on_process_input (when there is no schedule)")
    schedule: str = setting(
        kind=str, default="", check=_check_schedule,
        help="cron expression 'min hour day month dow' in UTC; \"\" = use call_interval")
    targets: tuple[str, ...] = setting(kind=list, default=[], check=_check_targets,
                                       help="items this service may send to; [] = any")


SERVICE_SETTINGS: tuple[Setting, ...] = ServiceSettings.DECLARED


class BusinessService(BusinessHost):
    """An inbound host the scheduler calls, never twice at once. Implement
    :meth:`on_process_input`; a long one may return early on :attr:`stop_requested`."""

    SETTINGS: ClassVar[tuple[Setting, ...]] = SERVICE_SETTINGS

    def __init__(self, name: str, settings: Mapping[str, Any], *,
                 events: EventSink | None = None, store: SqlStore | None = None,
                 production: ProductionConfig | None = None,
                 clock: Clock | None = None) -> None:
        if events is None and store is not None:
            events = store.events
        super().__init__(name, settings, events=events)
        self.store = store
        self.production = production
        self.clock: Clock = clock or SystemClock()
        self.stop_requested = threading.Event()
        self.service_settings = ServiceSettings.from_validated(self.settings)
        self.targets: tuple[str, ...] = self.service_settings.targets
        if production is not None:
            known = {item.name for item in production.items}
            unknown = [t for t in self.targets if t not in known]
            if unknown:
                raise ConfigurationError(
                    f"no item named {', '.join(repr(u) for u in unknown)} in the production "
                    f"(items: {', '.join(sorted(known)) or 'none'})", item=name, key="targets")

    def on_process_input(self) -> None:
        """Called on every tick of the service's schedule: look for input and :meth:`send` it."""
        raise NotImplementedError(
            f"{type(self).__qualname__} (item {self.name!r}) must implement "
            "on_process_input(self) -> None, e.g. `self.send(\"Payments\", {...})`")

    # -- sending -------------------------------------------------------------------------
    def send(self, target: str, message: str | dict[str, Any] | Message) -> int:
        """Enqueue ``message`` for ``target`` in a new session; return its id (MessageError
        if it does not fit or ``targets`` excludes it)."""
        store, production = self._attached()
        if self.targets and target not in self.targets:
            raise MessageError(f"service {self.name!r} may not send to {target!r}: its "
                               f"targets setting allows {', '.join(self.targets)}")
        return send_message(store, production, target, message, source=self.name,
                            now=self.clock.now())

    def call(self, target: str, message: str | dict[str, Any] | Message,
             timeout: float) -> Any:
        """Send ``message`` and return its decoded response, waiting up to ``timeout``
        seconds (CallFailed, CallTimedOut)."""
        store, _ = self._attached()
        message_id = self.send(target, message)
        return wait_for_response(store, message_id, target, timeout, clock=self.clock)

    def _attached(self) -> tuple[SqlStore, ProductionConfig]:
        if self.store is None or self.production is None:
            raise EncoreError(f"service {self.name!r} is not attached to a production: "
                              "build it with store= and production= (the scheduler does)")
        return self.store, self.production
