"""The middleware protocol of deliveries: each hook holds only the middleware that implements
it, in the order given, whether it subclasses delivery's Middleware or only the kernel's
AttemptObserver (tracing, metrics); the guards' settings reach every operation."""
from __future__ import annotations

from typing import Any

from engine.attempt import AttemptObserver, AttemptReport
from engine.delivery.guards import GUARD_SETTINGS
from engine.delivery.middleware import HOOKS, Hooks, Middleware
from engine.host import OPERATION_SETTINGS, BusinessOperation


class Gate(Middleware):
    def __init__(self, allows: bool) -> None:
        self.allows, self.asked = allows, 0

    def may_claim(self) -> bool:
        self.asked += 1
        return self.allows


class Counter(AttemptObserver):  # below delivery: the hooks are found by name
    def __init__(self) -> None:
        self.seen: list[str] = []

    def after_attempt(self, row: Any, report: AttemptReport) -> None:
        self.seen.append(report.outcome)

    def on_complete(self, row: Any, number: int) -> None:
        self.seen.append(f"complete {number}")


def test_a_hook_holds_only_the_middleware_that_implements_it_in_order() -> None:
    first, second, counter = Gate(True), Gate(False), Counter()
    hooks = Hooks([first, Middleware(), counter, second])
    assert hooks.may_claim == (first.may_claim, second.may_claim)
    assert hooks.after_attempt == (counter.after_attempt,)
    assert hooks.on_complete == (counter.on_complete,)
    assert all(getattr(hooks, name) == () for name in HOOKS
               if name not in ("may_claim", "after_attempt", "on_complete"))


def test_may_claim_stops_at_the_first_no() -> None:
    no, after = Gate(False), Gate(True)
    assert Hooks([no, after]).may_claim_now() is False
    assert (no.asked, after.asked) == (1, 0)
    assert Hooks([]).may_claim_now() is True


def test_the_guards_declare_their_settings_and_every_operation_accepts_them() -> None:
    names = [s.name for s in GUARD_SETTINGS]
    assert names == ["schedule", "breaker_threshold", "breaker_open_seconds", "rate_limit"]
    assert not set(names) & {s.name for s in OPERATION_SETTINGS}  # the kernel names none
    declared = {s.name for s in BusinessOperation.declared_settings()}
    assert set(names) <= declared
