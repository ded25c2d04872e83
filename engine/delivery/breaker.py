"""The circuit breaker of an item, shared by every daemon on the database (docs/guards.md).

``breaker_threshold`` consecutive failed attempts across all daemons open it; while open no attempt
starts anywhere and messages are put back unsent. After ``breaker_open_seconds`` one probe goes
through. Each daemon keeps a copy of the row, re-read at most every :data:`BREAKER_REFRESH` seconds
while closed; transitions are announced to the others at once.
"""
from __future__ import annotations

import logging
import math
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, NoReturn

from engine.attempt import AttemptReport
from engine.clock import Clock
from engine.delivery.middleware import GuardMetrics, Middleware
from engine.errors import AttemptHeld
from engine.settings import Setting, TypedSettings, setting
from engine.store.breaker_row import CLOSED, HALF_OPEN, OPEN, BreakerRow

if TYPE_CHECKING:
    from engine.eventsink import EventSink
    from engine.store.rows import MessageRow
    from engine.store.sql import SqlStore

__all__ = ["BREAKER_REFRESH", "BREAKER_SETTINGS", "CLOSED", "HALF_OPEN", "OPEN",
           "BreakerFields", "BreakerSettings", "CircuitBreaker", "Transition",
           "check_open_seconds"]

log = logging.getLogger(__name__)

BREAKER_REFRESH = 1.0  # seconds a daemon trusts its copy of a closed breaker
DEFAULT_OPEN_SECONDS = 30.0  # seconds a breaker stays open before its probe

# for `encore simulate`: (kind, when, attempt, until); kind: open, hold, half_open or close
Transition = Callable[[str, datetime, int, "datetime | None"], None]


def check_open_seconds(value: float) -> float:
    """Validate ``breaker_open_seconds``: a finite number of seconds > 0."""
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{value!r} is out of range; expected a number of seconds > 0")
    return float(value)


@dataclass(frozen=True, kw_only=True)
class BreakerFields(TypedSettings):
    """The settings the breaker reads."""

    breaker_threshold: int = setting(  # failed attempts
        kind=int, default=0, minimum=0,
        help="consecutive failed attempts (across all daemons) that open the item's "
             "circuit breaker; 0 = no breaker")
    breaker_open_seconds: float = setting(
        kind=float, default=DEFAULT_OPEN_SECONDS, check=check_open_seconds,
        help="seconds an open breaker lets no attempt start before one probe attempt")


BREAKER_SETTINGS: tuple[Setting, ...] = BreakerFields.DECLARED


@dataclass(frozen=True, kw_only=True)
class BreakerSettings:
    """An item's breaker: ``threshold`` failures open it for ``open_seconds``."""

    threshold: int
    open_seconds: float
    probe_seconds: float

    @classmethod
    def from_settings(cls, settings: BreakerFields, *,
                      response_timeout: float = 0.0) -> BreakerSettings | None:
        """The item's breaker; None when ``breaker_threshold`` is 0."""
        if settings.breaker_threshold <= 0:
            return None
        open_seconds = settings.breaker_open_seconds
        return cls(threshold=settings.breaker_threshold, open_seconds=open_seconds,
                   probe_seconds=open_seconds + max(response_timeout, 0.0))


class CircuitBreaker(Middleware):
    """One item's breaker as one daemon sees it; ``wake``: called when the open period ends."""

    SETTINGS = BREAKER_SETTINGS

    def __init__(self, item: str, settings: BreakerSettings, *, store: SqlStore,
                 clock: Clock, owner: str, events: EventSink | None = None,
                 metrics: GuardMetrics | None = None, wake: Callable[[], object] | None = None,
                 listener: Transition | None = None) -> None:
        self.item = item
        self.settings = settings
        self.store = store
        self.clock = clock
        self.owner = owner
        self.events = events
        self.metrics = metrics
        self.wake = wake
        self.listener = listener
        self._lock = threading.Lock()
        self._probes: dict[int, str] = {}  # message id → owner of the probe it carries
        self._stale = False  # told that another daemon changed the breaker
        self._timer: threading.Timer | None = None
        self._timer_at: datetime | None = None  # when the pending wake-up fires
        store.breakers.ensure(item, now=clock.now())
        self._row = BreakerRow.closed(item, datetime.min.replace(tzinfo=UTC))
        self._read_at = float("-inf")
        self.refresh()

    def current(self) -> BreakerRow:
        """The breaker's row: this daemon's copy while it can be trusted, else read."""
        with self._lock:
            row, stale = self._row, self._stale
            fresh = self.clock.monotonic() - self._read_at < BREAKER_REFRESH
        if not stale and ((row.state == CLOSED and fresh)
                          or (row.state == OPEN and not self._over(row))):
            return row
        return self.refresh()

    def refresh(self) -> BreakerRow:
        """Read the breaker's row again."""
        row = self.store.breakers.get(self.item) or BreakerRow.closed(self.item,
                                                                      self.clock.now())
        self._learn(row)
        return row

    def invalidate(self) -> None:
        """Another daemon opened or closed the breaker: read it before trusting the copy."""
        with self._lock:
            self._stale = True

    def allows_claims(self) -> bool:
        """True unless the breaker is open or its probe is in flight."""
        row = self.current()
        return row.state == CLOSED or self._over(row)

    may_claim = allows_claims

    def set_wake(self, wake: Callable[[], object]) -> None:
        """Call ``wake`` whenever an open period (or a probe's time) ends from now on."""
        self.wake = wake
        with self._lock:
            row = self._row
        if row.state != CLOSED and row.open_until is not None:
            self._wake_at(row.open_until)

    def close_timer(self) -> None:
        """Cancel the wake-up at the end of the open period (the item stops)."""
        with self._lock:
            timer, self._timer, self._timer_at = self._timer, None, None
        if timer is not None:
            timer.cancel()

    def before_attempt(self, row: MessageRow, number: int) -> None:
        """Let the attempt start if closed or if it is the probe; else raise AttemptHeld."""
        state = self.current()
        if state.state == CLOSED:
            return None
        if self._over(state):
            if self._take_probe(row, number):
                return None
            state = self.refresh()
            if state.state == CLOSED:
                return None
        self._hold(row, number, state)

    def after_attempt(self, row: MessageRow, report: AttemptReport) -> None:
        with self._lock:
            probe = self._probes.pop(row.id, None)
        if probe is not None:
            self._probe_ended(row, report, probe)
        elif report.outcome == "ok":
            self._succeeded()
        else:
            self._failed(row, report)

    def _take_probe(self, row: MessageRow, number: int) -> bool:
        owner = f"{self.owner}:{uuid.uuid4().hex[:8]}"
        now = self.clock.now()
        taken = self.store.breakers.take_probe(self.item, owner, now=now,
                                               probe_seconds=self.settings.probe_seconds)
        if taken is None:
            return False
        with self._lock:
            self._probes[row.id] = owner
        self._learn(taken)
        log.info("item %s: circuit breaker half-open: message %d is the probe", self.item,
                 row.id)
        self._tell("half_open", now, number, None)
        return True

    def _hold(self, row: MessageRow, number: int, state: BreakerRow) -> NoReturn:
        # half-open: due at once, but no dispatcher claims it before the probe closes the breaker
        until = state.open_until if state.state == OPEN else None
        text = (f"circuit breaker of {self.item} is open until {_time(until)}"
                if until is not None else
                f"circuit breaker of {self.item} is half-open: its probe is in flight")
        self._tell("hold", self.clock.now(), number, until)
        raise AttemptHeld(text, until=until)

    def _succeeded(self) -> None:
        with self._lock:
            counting = self._row.state == CLOSED and self._row.failures > 0
            if counting:
                self._row = replace(self._row, failures=0)
        if counting:
            self.store.breakers.reset_failures(self.item, now=self.clock.now())

    def _failed(self, row: MessageRow, report: AttemptReport) -> None:
        with self._lock:
            known, stale = self._row, self._stale
        if known.state == OPEN and not stale and not self._over(known):
            return  # in flight when it opened: not counted
        now = self.clock.now()
        after = self.store.breakers.record_failure(
            self.item, threshold=self.settings.threshold,
            open_seconds=self.settings.open_seconds, now=now)
        if after is None:
            self.refresh()
            return
        self._learn(after)
        if after.state == OPEN:
            self._opened(row, report, after, now)

    def _opened(self, row: MessageRow, report: AttemptReport, after: BreakerRow,
                now: datetime) -> None:
        s = self.settings
        last = f"{type(report.error).__name__}: {report.error}" if report.error is not None \
            else report.outcome
        self._event("Warning", f"circuit breaker opened after {after.failures} consecutive "
                    f"failed attempts (the last: {last}); no attempt of {self.item} starts "
                    f"for {s.open_seconds:g} s, then one probe attempt; messages stay queued",
                    "open", now, row)
        self._tell("open", now, report.number, after.open_until)

    def _probe_ended(self, row: MessageRow, report: AttemptReport, owner: str) -> None:
        now = self.clock.now()
        breakers = self.store.breakers
        if report.outcome == "ok":
            after = breakers.close(self.item, owner, now=now)
        else:
            after = breakers.reopen(self.item, owner, now=now,
                                    open_seconds=self.settings.open_seconds)
        if after is None:  # the probe counted as lost meanwhile: another one decides
            self.refresh()
            return
        self._learn(after)
        if after.state == CLOSED:
            self._event("Info", f"circuit breaker closed: the probe attempt (message {row.id}) "
                        f"succeeded; attempts of {self.item} start again", "close", now, row)
            self._tell("close", now, report.number, None)
        else:
            log.info("item %s: circuit breaker probe (message %d) failed (%s); open again "
                     "until %s", self.item, row.id, report.outcome, _time(after.open_until))
            self._tell("open", now, report.number, after.open_until)

    def _learn(self, row: BreakerRow) -> None:
        """Take ``row`` as the state unless a later one is known; publish it."""
        with self._lock:
            if row.version < self._row.version:
                row = self._row
            self._row, self._read_at, self._stale = row, self.clock.monotonic(), False
        if self.metrics is not None:
            self.metrics.set_breaker_open(self.item, row.state != CLOSED)
        if row.state != CLOSED and row.open_until is not None:
            self._wake_at(row.open_until)

    def _over(self, row: BreakerRow) -> bool:
        """True once the open period (or the probe's time) of ``row`` has passed."""
        return row.open_until is None or row.open_until <= self.clock.now()

    def _wake_at(self, when: datetime) -> None:
        """Call ``wake`` at ``when``."""
        if self.wake is None:
            return
        delay = (when - self.clock.now()).total_seconds()
        with self._lock:
            if delay <= 0 or self._timer_at == when:
                return
            timer = threading.Timer(delay, self.wake)
            timer.daemon = True
            old, self._timer, self._timer_at = self._timer, timer, when
        if old is not None:
            old.cancel()
        timer.start()

    def _event(self, type_: str, text: str, method: str, now: datetime,
               row: MessageRow) -> None:
        if self.events is not None:
            self.events.write(type_, text, config_name=self.item, message_id=row.id,
                              session_id=row.session_id, source_class=type(self).__name__,
                              source_method=method, now=now)

    def _tell(self, kind: str, when: datetime, number: int, until: datetime | None) -> None:
        if self.listener is not None:
            self.listener(kind, when, number, until)


def _time(value: datetime | None) -> str:
    return "-" if value is None else value.isoformat(timespec="milliseconds")

