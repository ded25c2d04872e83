"""Business hosts: the classes users subclass (docs/retries.md for what follows a failure)."""
from __future__ import annotations

import sys
import traceback
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from engine.eventsink import EventSink
from engine.message import JsonMessage, Message
from engine.retry import RETRY_SETTINGS, RetrySettings
from engine.settings import OPERATION, Setting, TypedSettings, added_settings, setting
from engine.store.properties import check_paths

if TYPE_CHECKING:
    from adapters.base import OutboundAdapter


DEFAULT_MAX_DELIVERIES = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationSettings(TypedSettings):
    """A business operation's settings besides its retries'. The guards' are declared in
    engine.delivery and added by :meth:`BusinessOperation.declared_settings`; the trace and
    alert settings stay here, though middleware acts on them: a process reads ``trace``
    itself, the loader, the portal and the daemon read the queue alerts, and the item pages
    list them all in this order, before the added settings."""

    trace: bool = setting(kind=bool, default=False, help="write a Trace event per attempt")
    retry_mode: str = setting(
        kind=str, default="blocking", choices=("blocking", "requeue"),
        help="blocking: a retrying message holds its worker (FIFO); "
             "requeue: park it until its next attempt and serve others")
    alert_on_error: bool = setting(kind=bool, default=False,
                                   help="write an Alert event when a message fails")
    alert_retry_grace_period: float = setting(
        kind=float, default=0.0, minimum=0,
        help="seconds after a first failure during which no alert is raised if a retry "
             "may still succeed; 0 = alert at the first failure")
    queue_count_alert: int = setting(
        kind=int, default=0, minimum=0,
        help="Alert when this many messages are queued; 0 = never")
    queue_wait_alert: float = setting(
        kind=float, default=0.0, minimum=0,
        help="Alert when the oldest queued message has waited this many seconds; 0 = never")
    max_deliveries: int = setting(
        kind=int, default=DEFAULT_MAX_DELIVERIES, minimum=1, maximum=1000,
        help="deliveries of a message that never end (its daemon died, froze past its "
             "lease or was killed during it) after which it is Suspended, whatever its "
             "failure_timeout: a message that crashes or freezes its daemon is not passed "
             "from daemon to daemon for ever")
    search_properties: tuple[str, ...] = setting(
        kind=(list, tuple), default=(), check=check_paths,
        help='dotted paths into the JSON body indexed when a message is accepted, for '
             'the Message Viewer\'s prop.PATH filters, e.g. ["order", "customer.id"]')


OPERATION_SETTINGS: tuple[Setting, ...] = OperationSettings.DECLARED
HOST_SETTINGS: tuple[Setting, ...] = (*RETRY_SETTINGS, *OPERATION_SETTINGS)


@dataclass(frozen=True)
class TargetRef:
    """A target named in an item's setting ``key``, at ``where`` (e.g. ``rule 2 (rules[1])``)."""

    key: str
    where: str
    target: str


class BusinessHost(ABC):
    """Common base of hosts: a config name, validated settings, hooks and event helpers."""

    SETTINGS: ClassVar[tuple[Setting, ...]] = ()

    def __init__(self, name: str, settings: Mapping[str, Any], *,
                 events: EventSink | None = None) -> None:
        self.name = name
        self.settings = dict(settings)
        self.events = events
        self.message_id: int | None = None
        self.session_id: int | None = None

    @classmethod
    def declared_settings(cls) -> tuple[Setting, ...]:
        """Every setting an item of this class accepts."""
        return cls.SETTINGS

    @classmethod
    def declared_targets(cls, settings: Mapping[str, Any]) -> tuple[TargetRef, ...]:
        """The items an item of this class with these ``settings`` sends to."""
        return ()

    @classmethod
    def check_request(cls, request: Message, *, name: str, settings: Mapping[str, Any]) -> None:
        """Raise MessageError at intake for a ``request`` item ``name`` could never handle."""

    @classmethod
    def settings_objects(cls, settings: Mapping[str, Any]) -> dict[str, TypedSettings | None]:
        """The typed settings objects an ItemConfig holds for this class, by field name."""
        return {}

    def on_init(self) -> None:
        """Called once when the item starts."""

    def on_tear_down(self) -> None:
        """Called once when the item stops."""

    # -- event-log helpers ---------------------------------------------------------------
    def log_info(self, text: str) -> None:
        self._log("Info", text)

    def log_warning(self, text: str) -> None:
        self._log("Warning", text)

    def log_error(self, text: str, *, exc: BaseException | None = None) -> None:
        stack = "".join(traceback.format_exception(exc)) if exc is not None else None
        self._log("Error", text, stack=stack)

    def log_trace(self, text: str) -> None:
        self._log("Trace", text)

    def log_alert(self, text: str) -> None:
        self._log("Alert", text)

    def log_event(self, type_: str, text: str, *, method: str,
                  exc: BaseException | None = None) -> None:
        """Write an event of ``type_`` about the message in hand from ``method``."""
        stack = "".join(traceback.format_exception(exc)) if exc is not None else None
        self._log(type_, text, stack=stack, method=method)

    def _log(self, type_: str, text: str, *, stack: str | None = None,
             method: str | None = None) -> None:
        if self.events is None:
            return
        caller = method or sys._getframe(2).f_code.co_name
        self.events.write(type_, text, config_name=self.name, message_id=self.message_id,
                          session_id=self.session_id, source_class=type(self).__qualname__,
                          source_method=caller, stack=stack)


class BusinessOperation(BusinessHost):
    """An outbound host. Implement :meth:`on_message`; set ``self.retry`` (or raise
    :class:`engine.Retry`) or ``self.suspend_message``, reset per attempt."""

    SETTINGS = HOST_SETTINGS
    adapter_class: ClassVar[type[OutboundAdapter] | None] = None
    request_class: ClassVar[type[Message]] = JsonMessage

    def __init__(self, name: str, settings: Mapping[str, Any], *,
                 events: EventSink | None = None, adapter: OutboundAdapter | None = None) -> None:
        super().__init__(name, settings, events=events)
        self.operation_settings = OperationSettings.from_validated(self.settings)
        self.adapter = adapter
        self.retry = False
        self.suspend_message = False
        self.retry_count = 0

    @classmethod
    def declared_settings(cls) -> tuple[Setting, ...]:
        """Its class's settings, those added to every operation and its adapter's."""
        adapter = cls.adapter_class.SETTINGS if cls.adapter_class is not None else ()
        return (*cls.SETTINGS, *added_settings(OPERATION), *adapter)

    @classmethod
    def settings_objects(cls, settings: Mapping[str, Any]) -> dict[str, TypedSettings | None]:
        adapter = cls.adapter_class
        return {"retry_settings": RetrySettings.from_validated(settings),
                "operation_settings": OperationSettings.from_validated(settings),
                "adapter_settings": (None if adapter is None
                                     else adapter.settings_class.from_validated(settings))}

    @abstractmethod
    def on_message(self, request: Any) -> Any:
        """Handle one request; return the response (a Message, a JSON-able value, or None)."""

    def on_failure_timeout(self, request: Any) -> Any:
        """Called when the FailureTimeout runs out: a response completes the message; None
        fails it unless ``self.retry`` is set."""
        return None
