"""Router: a ready-made business process that sends each request to the target of the
first rule it matches (docs/processes.md); the rules are checked when the production loads.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.config.rules import check_rules, first_match, parse_rules
from engine.errors import NoRoute
from engine.eventsink import EventSink
from engine.host import TargetRef
from engine.message import JsonMessage
from engine.process import PROCESS_SETTINGS, BusinessProcess
from engine.settings import Setting, TypedSettings, setting


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutingSettings(TypedSettings):
    """A router's own settings, besides a process's: :data:`ROUTING_SETTINGS`."""

    rules: tuple[Any, ...] = setting(  # the tables as given, read by parse_rules
        kind=list, default=[], check=check_rules,
        help='routing rules, first match wins: [{field = "country", equals = "PT", '
             'target = "PaymentsPT"}, ...]; operators: equals, not_equals, in, '
             "greater_than, less_than, matches, exists")
    default_target: str = setting(
        kind=str, default="",
        help='the item that gets requests no rule matches; "" = none: such a request '
             "ends in Error")
    timeout: float = setting(kind=float, default=0.0, minimum=0,
                             help="seconds to wait for the target's response; 0 = no limit")


ROUTING_SETTINGS: tuple[Setting, ...] = RoutingSettings.DECLARED
ROUTER_SETTINGS: tuple[Setting, ...] = (*PROCESS_SETTINGS, *ROUTING_SETTINGS)


class Router(BusinessProcess):
    """Routes each JSON request to the target of the first matching rule, else to
    ``default_target``, and answers with the target's response."""

    SETTINGS = ROUTER_SETTINGS
    request_class = JsonMessage

    def __init__(self, name: str, settings: Mapping[str, Any], *,
                 events: EventSink | None = None, **kwargs: Any) -> None:
        super().__init__(name, settings, events=events, **kwargs)
        routing = RoutingSettings.from_validated(self.settings)
        self.rules = parse_rules(routing.rules)
        self.default_target = routing.default_target
        self.timeout = routing.timeout or None

    @classmethod
    def declared_targets(cls, settings: Mapping[str, Any]) -> tuple[TargetRef, ...]:
        routing = RoutingSettings.from_validated(settings)
        refs = [TargetRef("rules", rule.label, rule.target)
                for rule in parse_rules(routing.rules)]
        if routing.default_target:
            refs.append(TargetRef("default_target", "default_target", routing.default_target))
        return tuple(refs)

    def on_request(self, request: JsonMessage) -> Any:
        target = self.route(request.to_dict())
        return self.send_request_sync(target, request, timeout=self.timeout)

    def route(self, body: Any) -> str:
        """The target for ``body``; NoRoute if none."""
        rule = first_match(self.rules, body)
        if rule is not None:
            if self.operation_settings.trace:
                self.log_trace(f"{rule.label} matched: routed to {rule.target}")
            return rule.target
        if not self.default_target:
            raise NoRoute(f"no rule matched and {self.name} has no default_target")
        if self.operation_settings.trace:
            self.log_trace(f"no rule matched: routed to {self.default_target}")
        return self.default_target
