"""The base of inbound services: items that other systems call, each request turned into a
message for a target (docs/inbound.md)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from engine.eventsink import EventSink
from engine.host import BusinessHost
from engine.settings import Setting

if TYPE_CHECKING:
    from starlette.routing import BaseRoute

    from engine.inbound.calls import InboundContext

__all__ = ["AUTH_MODES", "COMMON_SETTINGS", "DEFAULT_MAX_BODY_BYTES",
           "DEFAULT_RESPONSE_TIMEOUT", "InboundService"]

AUTH_MODES = ("none", "basic", "token")
DEFAULT_RESPONSE_TIMEOUT = 30.0
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
MAX_MAX_BODY_BYTES = 64 * 1024 * 1024


COMMON_SETTINGS: tuple[Setting, ...] = (
    Setting(name="response_timeout", kind=float, default=DEFAULT_RESPONSE_TIMEOUT,
            minimum=0.001, maximum=3600,
            help="seconds a caller waits for the target's response; then it is answered "
                 "with an error and the message goes on"),
    Setting(name="auth", kind=str, default="none", choices=AUTH_MODES,
            help="none: callers on loopback only; basic: HTTP Basic with a portal user "
                 "(encore user add); token: Authorization: Bearer TOKEN of role sender or "
                 "higher (encore token create)"),
    Setting(name="max_body_bytes", kind=int, default=DEFAULT_MAX_BODY_BYTES, minimum=1,
            maximum=MAX_MAX_BODY_BYTES, help="bytes of one request body; larger ones are "
                                             "refused before they are read"),
)


class InboundService(BusinessHost):
    """An item that other systems call; it takes no messages itself."""

    SETTINGS: ClassVar[tuple[Setting, ...]] = COMMON_SETTINGS
    serves_inbound: ClassVar[bool] = True
    request_class: ClassVar[None] = None

    def __init__(self, name: str, settings: Mapping[str, Any], *,
                 events: EventSink | None = None) -> None:
        super().__init__(name, settings, events=events)
        self.response_timeout: float = float(self.settings["response_timeout"])
        self.auth: str = self.settings["auth"]
        self.max_body_bytes: int = self.settings["max_body_bytes"]

    def routes(self, context: InboundContext) -> list[BaseRoute]:
        """The Starlette routes this service answers, served by the inbound server."""
        raise NotImplementedError

    def paths(self) -> tuple[str, ...]:
        """The URL paths (templates) this service claims; two services may not share one."""
        return ()

    def start(self) -> None:
        """Called once when the inbound server starts (before it listens)."""

    def prepare(self) -> None:
        """Called at a reload before the switch; ConfigurationError refuses the reload."""
        self.start()
