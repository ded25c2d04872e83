"""The middleware of an item's deliveries: one protocol for everything that acts around them.

The event log, metrics, tracing, breaker, rate limit and schedule window implement the hooks they
need (the others are no-ops) and declare the settings they read; docs/architecture.md, "The
middleware of a delivery", lists the hooks. :class:`Hooks` keeps per hook only the middleware
implementing it, so an unused hook costs nothing.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from engine.attempt import AttemptObserver
from engine.settings import Setting

if TYPE_CHECKING:
    from engine.store.rows import MessageRow

__all__ = ["HOOKS", "EndedAttempt", "GuardMetrics", "Hooks", "Middleware", "settings_of"]

HOOKS = ("may_claim", "delivery", "before_attempt", "after_attempt", "on_start",
         "on_first_failure", "on_reply_warning", "on_failure", "on_complete", "on_give_up",
         "on_suspend", "on_disable", "on_failure_timeout_response")


class EndedAttempt(Protocol):
    """What the decision hooks read of an attempt."""

    @property
    def number(self) -> int: ...

    @property
    def ended(self) -> float: ...

    @property
    def error(self) -> BaseException | None: ...


class GuardMetrics(Protocol):
    """What the breaker and the rate limit report to (:class:`engine.observe.metrics.Metrics`)."""

    def set_breaker_open(self, item: str, is_open: bool) -> None: ...

    def rate_limited(self, item: str, seconds: float) -> None: ...


class Middleware(AttemptObserver):
    """Acts around the deliveries of one item; every hook here does nothing."""

    SETTINGS: ClassVar[tuple[Setting, ...]] = ()

    def may_claim(self) -> bool:
        """Whether the dispatcher may claim messages of the item now."""
        return True

    def delivery(self, row: MessageRow) -> AbstractContextManager[Any]:
        """Around one delivery of ``row``: yields an object with ``ended(result)``."""
        raise NotImplementedError  # never called: only overriding middleware is asked

    def on_start(self, row: MessageRow, first_failure: float | None) -> None:
        """A delivery of ``row`` begins; ``first_failure``: when its first failure ended."""

    def on_first_failure(self, row: MessageRow, text: str,
                         error: BaseException | None = None) -> None:
        """Attempt 1 failed; ``error``: an unexpected exception of the operation's code."""

    def on_reply_warning(self, row: MessageRow, outcome: EndedAttempt) -> None:
        """A reply code action asked for a warning (``W``)."""

    def on_failure(self, row: MessageRow, outcome: EndedAttempt, *, final: bool) -> None:
        """A failed attempt once the policy has decided: ``final`` when no retry follows."""

    def on_complete(self, row: MessageRow, number: int) -> None:
        """The message completed on attempt ``number``."""

    def on_give_up(self, row: MessageRow, text: str) -> None:
        """The message ended in Error."""

    def on_suspend(self, row: MessageRow, text: str) -> None:
        """The message was suspended for an operator."""

    def on_disable(self, row: MessageRow, reason: str) -> None:
        """Reply code action D switched the item off; the message is back in its queue."""

    def on_failure_timeout_response(self, row: MessageRow) -> None:
        """``on_failure_timeout`` answered instead of failing the message."""


# the no-op bodies: a middleware whose hook is one of these does not implement it
_NO_OPS = {name: getattr(Middleware, name) for name in HOOKS}


class Hooks:
    """Middleware by hook: each attribute is the tuple of methods implementing it."""

    may_claim: tuple[Callable[[], bool], ...]
    delivery: tuple[Callable[[MessageRow], AbstractContextManager[Any]], ...]
    before_attempt: tuple[Callable[[MessageRow, int], Mapping[str, str] | None], ...]
    after_attempt: tuple[Callable[..., None], ...]

    def __init__(self, middleware: Sequence[object]) -> None:
        self.middleware = tuple(middleware)
        for name in HOOKS:
            no_op = _NO_OPS[name]
            setattr(self, name, tuple(
                getattr(m, name) for m in self.middleware
                if getattr(type(m), name, no_op) is not no_op))

    def may_claim_now(self) -> bool:
        """True when every ``may_claim`` allows a claim (in order; the first no ends it)."""
        for allows in self.may_claim:
            if not allows():
                return False
        return True

    @contextmanager
    def around_delivery(self, row: MessageRow) -> Iterator[list[Any]]:
        """Every ``delivery`` context of ``row`` entered; yields what they yielded."""
        with ExitStack() as stack:
            yield [stack.enter_context(around(row)) for around in self.delivery]


def settings_of(middleware: Sequence[type[Middleware]]) -> tuple[Setting, ...]:
    """The settings that the ``middleware`` classes declare, in order."""
    return tuple(s for cls in middleware for s in cls.SETTINGS)
