"""Delivering one message: the retry engine's acting half (docs/retries.md).

:class:`MessageWorker` runs attempts (:class:`~engine.delivery.attempt_runner.AttemptRunner`), asks
the :class:`~engine.delivery.policy.DeliveryPolicy` what follows, acts on it and tells its
middleware.
"""
from __future__ import annotations

import enum
import logging
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from datetime import timedelta
from typing import Any

from engine.attempt import AttemptObserver
from engine.clock import Clock
from engine.delivery.attempt_runner import (
    AttemptOutcome,
    AttemptRunner,
    error_text,
    idempotency_key,
    outcome_of,
)
from engine.delivery.events import AlertObserver, EventLogObserver, TraceObserver
from engine.delivery.middleware import Hooks
from engine.delivery.policy import DeliveryPolicy, Judgement
from engine.errors import CRASH_TEXT, AttemptHeld, OutcomeUnknown
from engine.host import DEFAULT_MAX_DELIVERIES, BusinessOperation, OperationSettings
from engine.message import decode_message, encode_response
from engine.retry import Action, AttemptState, ReplyCodeActions, RetryPolicy, RetrySettings
from engine.store.hotpath import Completion
from engine.store.rows import AttemptRow
from engine.store.sql import MessageRow, SqlStore
from engine.store.statuses import Status
from engine.store.text import storable
from engine.store.transition import (
    AttemptEnd,
    Complete,
    Finish,
    Next,
    Requeue,
    RetryAt,
    Transition,
)

__all__ = ["CRASH_TEXT", "MessageWorker", "Result", "error_text", "idempotency_key",
           "outcome_of", "poison_text"]

log = logging.getLogger(__name__)



def poison_text(interrupted: int, limit: int) -> str:
    """The reason a message whose deliveries keep being cut short is suspended."""
    return (f"delivery interrupted {interrupted} times: the message may crash or freeze its "
            f"daemon (max_deliveries = {limit}); it is not delivered again — find out why, "
            "then resend or discard it")


class Result(str, enum.Enum):
    """How a delivery left the message: in the status it ended in, or back in its queue."""

    COMPLETED = Status.COMPLETED.value
    ERROR = Status.ERROR.value
    SUSPENDED = Status.SUSPENDED.value
    PARKED = "Parked"  # requeue mode: back in the queue until next_attempt_at
    RELEASED = "Released"  # stop requested during a wait: back in the queue
    DISABLED = "Disabled"  # reply code action D: item disabled, message back in the queue
    HELD = "Held"  # an observer held it before an attempt (breaker open): back in the queue


class MessageWorker:
    """Delivers claimed messages for one host instance (one worker of an item)."""

    def __init__(self, host: BusinessOperation, *, store: SqlStore, clock: Clock,
                 policy: RetryPolicy, reply_codes: ReplyCodeActions, requeue: bool = False,
                 trace: bool = False, stop: threading.Event | None = None,
                 rng: random.Random | None = None, alert_on_error: bool = False,
                 alert_grace: float = 0.0,
                 defer: Callable[[Completion], None] | None = None,
                 observers: Sequence[AttemptObserver] = (),
                 max_deliveries: int = DEFAULT_MAX_DELIVERIES) -> None:
        self.host = host
        self.max_deliveries = max_deliveries
        self.store = store
        self.clock = clock
        self.policy = policy
        self.requeue = requeue
        self.stop = stop or threading.Event()
        self.defer = defer
        self.judge = DeliveryPolicy(policy, reply_codes, rng=rng)
        self.event_log = EventLogObserver(host)
        self.own: tuple[AttemptObserver, ...] = (
            self.event_log, *([TraceObserver(host)] if trace else []),
            *([AlertObserver(host, grace=alert_grace)] if alert_on_error else []))
        self._observers = tuple(observers)
        self.hooks = Hooks((*self._observers, *self.own))
        self.runner = AttemptRunner(host, store=store, clock=clock, policy=policy,
                                    hooks=self.hooks)

    @property
    def observers(self) -> tuple[AttemptObserver, ...]:
        """The item's middleware (guards, tracing, metrics), run before the worker's own."""
        return self._observers

    @observers.setter
    def observers(self, value: Sequence[AttemptObserver]) -> None:
        self._observers = tuple(value)
        self.hooks = self.runner.hooks = Hooks((*self._observers, *self.own))

    @classmethod
    def from_settings(cls, host: BusinessOperation, settings: Mapping[str, Any],
                      **options: Any) -> MessageWorker:
        """A worker for ``host`` from its item's validated settings."""
        return cls.from_typed(host, RetrySettings.from_validated(settings),
                              OperationSettings.from_validated(settings), **options)

    @classmethod
    def from_typed(cls, host: BusinessOperation, retry: RetrySettings,
                   operation: OperationSettings, *, store: SqlStore, clock: Clock,
                   stop: threading.Event | None = None, rng: random.Random | None = None,
                   defer: Callable[[Completion], None] | None = None,
                   observers: Sequence[AttemptObserver] = ()) -> MessageWorker:
        """A worker for ``host`` configured from its item's retry and operation settings."""
        return cls(host, store=store, clock=clock, policy=RetryPolicy.from_settings(retry),
                   reply_codes=ReplyCodeActions.parse(retry.reply_code_actions),
                   requeue=operation.retry_mode == "requeue", trace=operation.trace,
                   stop=stop, rng=rng, alert_on_error=operation.alert_on_error,
                   alert_grace=operation.alert_retry_grace_period,
                   defer=defer, observers=observers, max_deliveries=operation.max_deliveries)

    def deliver(self, row: MessageRow, begun: int | None = None,
                interrupted: int = 0, *, begun_server: str | None = None) -> Result:
        """Run attempts for the claimed message ``row`` until it ends, parks or is released.

        ``begun``: attempt 1 already recorded with the claim, to ``begun_server``. ``interrupted``:
        earlier deliveries that never ended. Every write is conditional on the claim token;
        ClaimLost ends the delivery. Each change after an attempt is one
        :class:`~engine.store.transition.Transition`: the attempt's end, what follows and the
        events reporting it.
        """
        self.host.message_id, self.host.session_id = row.id, row.session_id
        self.event_log.take()  # none of a delivery cut short belongs to this one
        if interrupted >= self.max_deliveries:
            return self._suspend_poison(row, interrupted, begun)
        request = decode_message(row.body_class, row.body)
        first_started = None if begun is not None else self._first_started(row)
        self._tell("on_start", row, first_started if row.retry_needed else None)
        number = 0 if begun is not None else row.attempts
        open_attempt = self.store.open_attempt(row.id) if number else None
        if open_attempt is not None:
            recovered = self._recover_in_flight(row, open_attempt, first_started)
            if isinstance(recovered, Result):
                return recovered
            first_started = recovered
        while True:
            number += 1
            try:
                outcome = self.runner.run(row, request, number, first_started, begun,
                                          begun_server)
            except AttemptHeld as held:
                return self._hold(row, held, begun)
            begun = None
            if first_started is None:
                first_started = outcome.started
            judgement = self.judge.judge(self.host, request, outcome, first_started)
            result = self._follow(row, outcome, judgement)
            if result is not None:
                return result

    def _apply(self, row: MessageRow, then: Next, attempt: AttemptEnd | None) -> None:
        """Write ``then`` for the claimed ``row`` with ``attempt``'s end and the events made
        since the last change, in one transaction."""
        self.store.apply(Transition(row.id, row.claim_token, then, attempt,
                                    self.event_log.take()))

    def _first_started(self, row: MessageRow) -> float | None:
        """s_1 on this process's monotonic clock, from the stored first-attempt time."""
        if row.first_attempt_at is None:
            return None
        elapsed = (self.clock.now() - row.first_attempt_at).total_seconds()
        return self.clock.monotonic() - elapsed

    def _follow(self, row: MessageRow, outcome: AttemptOutcome,
                judgement: Judgement) -> Result | None:
        """Report ``judgement`` to the observers, then carry it out; None: attempt again."""
        if judgement.warn:
            self._tell("on_reply_warning", row, outcome)
        if judgement.first_failure:
            self._tell("on_first_failure", row, f"attempt 1 failed: {error_text(outcome.error)}",
                       judgement.unexpected)
        if judgement.decided:
            self._tell("on_failure", row, outcome, final=judgement.action is not Action.RETRY)
        if judgement.action is Action.COMPLETE:
            return self._complete(row, judgement, outcome)
        return self._act(row, judgement, outcome.end())

    def _act(self, row: MessageRow, judgement: Judgement,
             attempt: AttemptEnd) -> Result | None:
        """Carry out ``judgement`` after the failed ``attempt``; None: attempt again."""
        if judgement.action is Action.RETRY:
            assert judgement.at is not None
            return self._wait_for(row, judgement.at, attempt)
        if judgement.action is Action.DISABLE:
            return self._disable(row, judgement.text, attempt)
        result = Result.SUSPENDED if judgement.action is Action.SUSPEND else Result.ERROR
        return self._end(row, result, judgement.text, attempt)

    def _wait_for(self, row: MessageRow, at: float, attempt: AttemptEnd) -> Result | None:
        """Persist the retry state with ``attempt``'s end, then wait for ``at`` (blocking) or
        park (requeue)."""
        delay = max(at - self.clock.monotonic(), 0.0)
        # A daemon's clock is held while a wall-clock step moves the stored due times: the
        # due time is read and written under it, or it could land after the move, a step off.
        holding = getattr(self.clock, "holding", None)
        with holding() if holding is not None else nullcontext():
            next_at = self.clock.now() + timedelta(seconds=delay)
            self._apply(row, Requeue(next_at, retry=True) if self.requeue else RetryAt(next_at),
                        attempt)
        if self.requeue:
            return Result.PARKED
        if self.clock.sleep(delay, self.stop):
            self.store.release(row.id, token=row.claim_token)
            return Result.RELEASED
        return None

    def _hold(self, row: MessageRow, held: AttemptHeld, begun: int | None) -> Result:
        """Put the message back in its queue, unsent, due again at ``held.until``."""
        self.store.hold(row.id, token=row.claim_token, until=held.until or self.clock.now(),
                        begun=begun)
        log.info("item %s: message %d held: %s", self.host.name, row.id, held)
        return Result.HELD

    def _recover_in_flight(self, row: MessageRow, open_attempt: AttemptRow,
                           first_started: float | None) -> Result | float:
        """Decide an attempt a stopped daemon left open; returns s_1 or the delivery's end."""
        now = self.clock.monotonic()
        if open_attempt.attempt == 1:
            self._tell("on_first_failure", row, f"attempt 1 failed: {CRASH_TEXT}")
        end = AttemptEnd(open_attempt.id, self.clock.now(), open_attempt.server, "error",
                         error_text=CRASH_TEXT)
        first = now if first_started is None else first_started
        started = min(now, now - (self.clock.now() - open_attempt.started_at).total_seconds())
        state = AttemptState(attempt=open_attempt.attempt, first_started=first, started=started,
                             ended=now, error=OutcomeUnknown(CRASH_TEXT))
        decision = self.policy.decide(state, retry_needed=True, interrupted=True,
                                      rng=self.judge.rng)
        result = self._act(row, self.judge.carry_out(decision, state), end)
        return first if result is None else result

    def _suspend_poison(self, row: MessageRow, interrupted: int, begun: int | None) -> Result:
        """Suspend ``row`` unsent after ``interrupted`` deliveries that never ended."""
        open_attempt = self.store.open_attempt(row.id) if row.attempts else None
        end = None
        if open_attempt is not None and open_attempt.id != begun:
            if open_attempt.attempt == 1:
                self._tell("on_first_failure", row, f"attempt 1 failed: {CRASH_TEXT}")
            end = AttemptEnd(open_attempt.id, self.clock.now(), open_attempt.server, "error",
                             error_text=CRASH_TEXT)
        elif begun is not None:
            end = AttemptEnd(begun, self.clock.now(), outcome="error",
                             error_text="not sent: the message was suspended first")
        return self._end(row, Result.SUSPENDED, poison_text(interrupted, self.max_deliveries),
                         end)

    def _complete(self, row: MessageRow, judgement: Judgement,
                  outcome: AttemptOutcome) -> Result:
        """A success, or an answer from reply code action C or ``on_failure_timeout``."""
        body_class, body = encode_response(judgement.response)
        if judgement.from_hook:
            self._tell("on_failure_timeout_response", row)
        self._tell("on_complete", row, outcome.number)
        events = self.event_log.take()
        # a plain success goes to the group commit; one with events, or after a failure, not
        if judgement.attempt_open and self.defer is not None and not events:
            self.defer(Completion(row.id, row.claim_token, outcome.attempt_id,
                                  outcome.started_at, outcome.ended_at, outcome.server,
                                  body_class, body, urgent=row.waited))
        else:
            self.store.apply(Transition(row.id, row.claim_token,
                                        Complete(self.clock.now(), body_class, body),
                                        outcome.end(), events))
        return Result.COMPLETED

    def _end(self, row: MessageRow, result: Result, text: str,
             attempt: AttemptEnd | None) -> Result:
        self._tell("on_give_up" if result is Result.ERROR else "on_suspend", row, text)
        self._apply(row, Finish(result.value, text, self.clock.now()), attempt)
        return result

    def _disable(self, row: MessageRow, reason: str, attempt: AttemptEnd) -> Result:
        self.store.set_item_enabled(self.host.name, False, reason=storable(reason),
                                    now=self.clock.now())
        self._tell("on_disable", row, reason)
        self._apply(row, Requeue(), attempt)
        return Result.DISABLED

    def _tell(self, hook: str, *args: Any, **kwargs: Any) -> None:
        for method in getattr(self.hooks, hook):
            method(*args, **kwargs)
