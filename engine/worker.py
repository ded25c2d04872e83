"""Delivering one message: attempts, the retry-needed flag, and what follows a failure.

This is the retry engine's acting half (DESIGN.md §3.1): the policy decides (retry at T, give
up because R), the worker acts — it runs ``on_message`` once per attempt, records every
attempt, writes the events of rule 6, and waits (blocking mode) or parks the message
(requeue mode) until the next attempt. ``encore simulate`` runs this same code on a virtual
clock.
"""
from __future__ import annotations

import enum
import logging
import random
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from engine.attempt import AttemptContext, AttemptObserver, AttemptReport
from engine.clock import Clock
from engine.errors import AdapterError, AttemptHeld, OutcomeUnknown, Retry
from engine.host import BusinessOperation
from engine.message import decode_message, encode_response
from engine.metrics import Metrics
from engine.retry import Action, AttemptState, Decision, ReplyCodeActions, RetryPolicy
from engine.retry.reply_codes import Actions
from engine.store.hotpath import Completion
from engine.store.rows import AttemptEnd
from engine.store.sql import MessageRow, SqlStore

log = logging.getLogger(__name__)

NO_DEADLINE = float("inf")
CRASH_TEXT = "outcome unknown: the daemon stopped while this attempt was in flight"


class Result(str, enum.Enum):
    """How a delivery left the message."""

    COMPLETED = "Completed"
    ERROR = "Error"
    SUSPENDED = "Suspended"
    PARKED = "Parked"  # requeue mode: back in the queue until next_attempt_at
    RELEASED = "Released"  # stop requested during a wait: back in the queue
    DISABLED = "Disabled"  # reply code action D: item disabled, message back in the queue
    HELD = "Held"  # an observer held it before an attempt (breaker open): back in the queue


@dataclass
class _Attempt:
    number: int
    started: float  # monotonic seconds
    ended: float
    attempt_id: int = 0
    started_at: datetime | None = None  # stored time of the start
    ended_at: datetime | None = None  # stored time of the end
    response: Any = None
    error: BaseException | None = None
    server: str | None = None


def error_text(error: BaseException | None) -> str:
    if error is None:
        return "the operation asked for a retry"
    return f"{type(error).__name__}: {error}"


def outcome_of(error: BaseException | None) -> str:
    return error.outcome if isinstance(error, AdapterError) else "error"


class MessageWorker:
    """Delivers claimed messages for one host instance (one worker of an item)."""

    def __init__(self, host: BusinessOperation, *, store: SqlStore, clock: Clock,
                 policy: RetryPolicy, reply_codes: ReplyCodeActions, requeue: bool = False,
                 trace: bool = False, stop: threading.Event | None = None,
                 rng: random.Random | None = None, alert_on_error: bool = False,
                 alert_grace: float = 0.0, metrics: Metrics | None = None,
                 defer: Callable[[Completion], None] | None = None,
                 observers: Sequence[AttemptObserver] = ()) -> None:
        self.host = host
        self.store = store
        self.clock = clock
        self.policy = policy
        self.reply_codes = reply_codes
        self.requeue = requeue
        self.trace = trace
        self.stop = stop or threading.Event()
        self.rng = rng or random.Random()
        self.alert_on_error = alert_on_error
        self.alert_grace = alert_grace  # seconds after the first failure without alerts
        self.metrics = metrics
        # Where successes go: the dispatcher's group commit, else one transaction each.
        self.defer = defer
        self.observers = tuple(observers)
        self._first_failure: float | None = None  # of the message in hand
        self._alerted = False

    @classmethod
    def from_settings(cls, host: BusinessOperation, settings: Mapping[str, Any], *,
                      store: SqlStore, clock: Clock, stop: threading.Event | None = None,
                      rng: random.Random | None = None, metrics: Metrics | None = None,
                      defer: Callable[[Completion], None] | None = None,
                      observers: Sequence[AttemptObserver] = ()) -> MessageWorker:
        """A worker for ``host`` configured from its item's validated settings."""
        return cls(host, store=store, clock=clock, policy=RetryPolicy.from_settings(settings),
                   reply_codes=ReplyCodeActions.parse(settings["reply_code_actions"]),
                   requeue=settings["retry_mode"] == "requeue", trace=bool(settings["trace"]),
                   stop=stop, rng=rng, alert_on_error=bool(settings["alert_on_error"]),
                   alert_grace=float(settings["alert_retry_grace_period"]), metrics=metrics,
                   defer=defer, observers=observers)

    # -- the delivery loop ---------------------------------------------------------------
    def deliver(self, row: MessageRow, begun: int | None = None) -> Result:
        """Run attempts for the claimed message ``row`` until it ends, parks or is released.
        ``begun``: the id of attempt 1, already recorded with the claim
        (:meth:`SqlStore.claim` with ``begin``). Every write is conditional on the row's
        claim token: when the claim is gone, ClaimLost ends the delivery and nothing more is
        sent."""
        self.host.message_id, self.host.session_id = row.id, row.session_id
        request = decode_message(row.body_class, row.body)
        # An attempt 1 begun with the claim starts for real now: s_1 is taken then.
        first_started = None if begun is not None else self._first_started(row)
        self._first_failure, self._alerted = first_started if row.retry_needed else None, False
        number = 0 if begun is not None else row.attempts
        # attempts > 0 only once an attempt row exists: a fresh message needs no look
        open_attempt = self.store.open_attempt(row.id) if number else None
        if open_attempt is not None:  # in flight when its daemon died: outcome unknown
            result = self._recover_in_flight(row, open_attempt, first_started)
            if isinstance(result, Result):
                return result
            first_started = result
        while True:
            number += 1
            try:
                attempt = self._run_attempt(row, request, number, first_started, begun)
            except AttemptHeld as held:
                return self._hold(row, held, begun)
            begun = None
            if first_started is None:
                first_started = attempt.started
            result = self._after_attempt(row, request, attempt, first_started)
            if result is not None:
                return result

    def _first_started(self, row: MessageRow) -> float | None:
        """s_1 on this process's monotonic clock, from the stored first-attempt time."""
        if row.first_attempt_at is None:
            return None
        elapsed = (self.clock.now() - row.first_attempt_at).total_seconds()
        return self.clock.monotonic() - elapsed

    def _run_attempt(self, row: MessageRow, request: Any, number: int,
                     first_started: float | None, begun: int | None = None) -> _Attempt:
        host, adapter = self.host, self.host.adapter
        headers = self._before_attempt(row, number)  # may wait, or hold the message
        host.retry, host.suspend_message, host.retry_count = False, False, number
        started, started_at = self.clock.monotonic(), self.clock.now()
        attempt_id = begun if begun is not None else self.store.begin_attempt(
            row.id, number, started_at=started_at, token=row.claim_token)
        attempt = _Attempt(number=number, started=started, ended=started, attempt_id=attempt_id,
                           started_at=started_at)
        if adapter is not None:
            s_1 = started if first_started is None else first_started
            deadline = self.policy.deadline(first_started=s_1, started=started,
                                            response_timeout=adapter.response_timeout)
            adapter.begin_attempt(AttemptContext(deadline=deadline, message_id=row.id,
                                                 idempotency_key=idempotency_key(row),
                                                 headers=headers))
        try:
            attempt.response = host.on_message(request)
        except Exception as exc:  # noqa: BLE001 - every failure of user code is recorded
            attempt.error = exc
        finally:
            attempt.server = adapter.end_attempt() if adapter is not None else None
        attempt.ended, attempt.ended_at = self.clock.monotonic(), self.clock.now()
        failed = attempt.error is not None or host.retry or host.suspend_message
        err = attempt.error
        if failed:  # a success is recorded with the completion, in one transaction
            self.store.end_attempt(attempt_id, ended_at=attempt.ended_at, server=attempt.server,
                                   outcome=outcome_of(err),
                                   status_code=getattr(err, "status_code", None),
                                   error_text=error_text(err),
                                   started_at=started_at if begun is not None else None,
                                   token=row.claim_token)
        outcome = outcome_of(err) if failed else "ok"
        self._after_attempt_observers(row, AttemptReport(
            number=number, outcome=outcome, seconds=attempt.ended - attempt.started,
            server=attempt.server, status_code=getattr(err, "status_code", None), error=err,
            exchange=adapter.exchange() if adapter is not None else None))
        if self.metrics is not None:
            self.metrics.observe_attempt(host.name, outcome, attempt.ended - attempt.started)
        if self.trace:
            self.host.log_trace(f"attempt {number}"
                                f"{' to ' + attempt.server if attempt.server else ''}: "
                                f"{outcome_of(err) if failed else 'ok'} in "
                                f"{attempt.ended - attempt.started:.3f} s")
        return attempt

    def _before_attempt(self, row: MessageRow, number: int) -> dict[str, str]:
        headers: dict[str, str] = {}
        for observer in self.observers:
            headers.update(observer.before_attempt(row, number) or {})
        return headers

    def _after_attempt_observers(self, row: MessageRow, report: AttemptReport) -> None:
        for observer in self.observers:
            try:
                observer.after_attempt(row, report)
            except Exception:  # noqa: BLE001 - an observer never fails a delivery
                log.exception("item %s: attempt observer %s failed", self.host.name,
                              type(observer).__name__)

    def _hold(self, row: MessageRow, held: AttemptHeld, begun: int | None) -> Result:
        """Put the message back in its queue, unsent, due again at ``held.until``."""
        self.store.hold(row.id, token=row.claim_token, until=held.until or self.clock.now(),
                        begun=begun)
        log.info("item %s: message %d held: %s", self.host.name, row.id, held)
        return Result.HELD

    # -- after an attempt ----------------------------------------------------------------
    def _after_attempt(self, row: MessageRow, request: Any, attempt: _Attempt,
                       first_started: float) -> Result | None:
        host = self.host
        failed = attempt.error is not None or host.retry or host.suspend_message
        if not failed:
            return self._complete(row, attempt.response, attempt.number, attempt)
        err = attempt.error
        actions = self._reply_actions(err)
        if actions.warn:
            host.log_warning(f"attempt {attempt.number} failed: {error_text(err)}")
        if actions.complete:
            return self._complete(row, None, attempt.number)
        if attempt.number == 1:
            unexpected = err is not None and not isinstance(err, (AdapterError, Retry))
            host.log_error(f"attempt 1 failed: {error_text(err)}", exc=err if unexpected else None)
        if host.suspend_message or actions.suspend:
            return self._end(row, Result.SUSPENDED, f"suspended after attempt {attempt.number}: "
                             f"{error_text(err)}")
        retry_needed = (host.retry or isinstance(err, Retry) or actions.retry
                        or (isinstance(err, AdapterError) and err.retryable))
        if actions.disable and not actions.retry:
            return self._disable(row, err)
        state = AttemptState(attempt=attempt.number, first_started=first_started,
                             started=attempt.started, ended=attempt.ended, error=err)
        decision = self.policy.decide(state, retry_needed=retry_needed, rng=self.rng)
        if decision.action is Action.GIVE_UP and "FailureTimeout" in decision.reason:
            decision = self._failure_timeout_hook(row, request, state, decision)
            if isinstance(decision, Result):
                return decision
        self._maybe_alert(state, final=decision.action is not Action.RETRY)
        return self._act(row, decision, state, actions)

    def _maybe_alert(self, state: AttemptState, *, final: bool) -> None:
        """alert_on_error: alert once per message, unless a retry may still succeed within
        the grace period that started at its first failure."""
        if self._first_failure is None:
            self._first_failure = state.ended
        if not self.alert_on_error or self._alerted:
            return
        if final or state.ended - self._first_failure >= self.alert_grace:
            self._alerted = True
            self.host.log_alert(f"attempt {state.attempt} failed"
                                f"{' (giving up)' if final else ''}: {error_text(state.error)}")

    def _reply_actions(self, err: BaseException | None) -> Actions:
        if err is None or isinstance(err, Retry):
            return Actions()
        return self.reply_codes.evaluate(err)

    def _act(self, row: MessageRow, decision: Decision, state: AttemptState,
             actions: Actions) -> Result | None:
        last = error_text(state.error)
        if decision.action is Action.SUSPEND:
            return self._end(row, Result.SUSPENDED, f"{decision.reason}; last error: {last}")
        if decision.action is Action.GIVE_UP:
            if actions.disable:
                return self._disable(row, state.error)
            return self._end(row, Result.ERROR, f"giving up: {decision.reason}; "
                             f"last error: {last}")
        assert decision.at is not None
        return self._wait_for(row, decision.at)

    def _wait_for(self, row: MessageRow, at: float) -> Result | None:
        """Persist the retry state, then wait for ``at`` (blocking) or park (requeue)."""
        delay = max(at - self.clock.monotonic(), 0.0)
        next_at = self.clock.now() + timedelta(seconds=delay)
        self.store.schedule_retry(row.id, next_attempt_at=next_at, release=self.requeue,
                                  token=row.claim_token)
        if self.requeue:
            return Result.PARKED
        if self.clock.sleep(delay, self.stop):
            self.store.release(row.id, token=row.claim_token)
            return Result.RELEASED
        return None

    def _failure_timeout_hook(self, row: MessageRow, request: Any, state: AttemptState,
                              decision: Decision) -> Decision | Result:
        self.host.retry = False
        response = self.host.on_failure_timeout(request)
        if response is not None:
            self.host.log_info("on_failure_timeout supplied a response")
            return self._complete(row, response, state.attempt)
        if self.host.retry:
            at = self.policy.backoff.next_start(state, self.rng)
            return Decision(Action.RETRY, at=state.ended if at is None else at)
        return decision

    def _recover_in_flight(self, row: MessageRow, open_attempt: Any,
                           first_started: float | None) -> Result | float:
        now = self.clock.monotonic()
        self.store.end_attempt(open_attempt.id, ended_at=self.clock.now(), outcome="error",
                               error_text=CRASH_TEXT, token=row.claim_token)
        if open_attempt.attempt == 1:
            self.host.log_error(f"attempt 1 failed: {CRASH_TEXT}")
        first = now if first_started is None else first_started
        if not self.policy.idempotent:
            return self._end(row, Result.SUSPENDED, f"{CRASH_TEXT}; the request may have been "
                             "processed, so it is not re-sent (the item is not idempotent); "
                             "resend or discard it")
        started = now - (self.clock.now() - open_attempt.started_at).total_seconds()
        state = AttemptState(attempt=open_attempt.attempt, first_started=first, started=started,
                             ended=now, error=OutcomeUnknown(CRASH_TEXT))
        decision = self.policy.decide(state, retry_needed=True, rng=self.rng)
        result = self._act(row, decision, state, Actions())
        return first if result is None else result

    # -- endings -------------------------------------------------------------------------
    def _complete(self, row: MessageRow, response: Any, number: int,
                  attempt: _Attempt | None = None) -> Result:
        """``attempt``: the successful attempt, still open; None when it was ended already
        (reply code action C, a response from on_failure_timeout)."""
        body_class, body = encode_response(response)
        if attempt is not None and self.defer is not None:
            assert attempt.started_at is not None and attempt.ended_at is not None
            self.defer(Completion(row.id, row.claim_token, attempt.attempt_id,
                                  attempt.started_at, attempt.ended_at, attempt.server,
                                  body_class, body))
        else:
            end = None if attempt is None or attempt.ended_at is None else AttemptEnd(
                attempt.attempt_id, attempt.ended_at, attempt.server)
            self.store.complete(row, response_class=body_class, response_body=body,
                                now=self.clock.now(), attempt=end, fenced=True)
        if number > 1:
            self.host.log_info(f"completed on attempt {number} after {number - 1} failed "
                               f"attempt{'s' if number > 2 else ''}")
        return Result.COMPLETED

    def _end(self, row: MessageRow, result: Result, text: str) -> Result:
        self.store.finish(row.id, status=result.value, error_text=text, now=self.clock.now(),
                          token=row.claim_token)
        if self.metrics is not None and result is Result.ERROR:
            self.metrics.give_up(self.host.name)
        if result is Result.ERROR:
            self.host.log_error(text)
        else:
            self.host.log_warning(text)
        return result

    def _disable(self, row: MessageRow, err: BaseException | None) -> Result:
        reason = f"disabled by reply code action D after: {error_text(err)}"
        self.store.set_item_enabled(self.host.name, False, reason=reason, now=self.clock.now())
        self.store.release(row.id, token=row.claim_token)
        self.host.log_warning(f"item {reason}; message {row.id} is back at the front of its queue")
        return Result.DISABLED


def idempotency_key(row: MessageRow) -> str:
    """One stable key per message, the same on every attempt and after a restart."""
    return str(uuid.uuid5(uuid.NAMESPACE_OID, f"encore:{row.id}:{row.time_created.isoformat()}"))

