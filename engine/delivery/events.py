"""The events a delivery writes (docs/retries.md rule 6): event log, trace events, alerts."""
from __future__ import annotations

import traceback
from typing import ClassVar

from engine.attempt import AttemptReport, error_text
from engine.delivery.middleware import EndedAttempt, Middleware
from engine.host import OPERATION_SETTINGS, BusinessOperation
from engine.settings import Setting
from engine.store.eventlog import Event, event
from engine.store.rows import MessageRow

__all__ = ["AlertObserver", "EventLogObserver", "TraceObserver"]


def _declared(*names: str) -> tuple[Setting, ...]:
    return tuple(s for s in OPERATION_SETTINGS if s.name in names)


class EventLogObserver(Middleware):
    """The events of rule 6, and the others reporting a change of the message in hand: made
    as the worker decides the change, taken (:meth:`take`) into its
    :class:`~engine.store.transition.Transition`, so they are written with it or not at all."""

    def __init__(self, host: BusinessOperation) -> None:
        self.host = host
        self._events: list[Event] = []

    def take(self) -> tuple[Event, ...]:
        """The events made since the last take."""
        events, self._events = tuple(self._events), []
        return events

    def _write(self, type_: str, text: str, method: str,
             error: BaseException | None = None) -> None:
        host = self.host
        stack = "".join(traceback.format_exception(error)) if error is not None else None
        self._events.append(event(type_, text, config_name=host.name,
                                  message_id=host.message_id, session_id=host.session_id,
                                  source_class=type(host).__qualname__, source_method=method,
                                  stack=stack))

    def on_first_failure(self, row: MessageRow, text: str,
                         error: BaseException | None = None) -> None:
        self._write("Error", text, "on_first_failure", error)

    def on_reply_warning(self, row: MessageRow, outcome: EndedAttempt) -> None:
        self._write("Warning", f"attempt {outcome.number} failed: {error_text(outcome.error)}",
                  "on_reply_warning")

    def on_complete(self, row: MessageRow, number: int) -> None:
        if number > 1:
            self._write("Info", f"completed on attempt {number} after {number - 1} failed "
                      f"attempt{'s' if number > 2 else ''}", "on_complete")

    def on_give_up(self, row: MessageRow, text: str) -> None:
        self._write("Error", text, "on_give_up")

    def on_suspend(self, row: MessageRow, text: str) -> None:
        self._write("Warning", text, "on_suspend")

    def on_disable(self, row: MessageRow, reason: str) -> None:
        self._write("Warning", f"item {reason}; message {row.id} is back at the front of its "
                  "queue", "on_disable")

    def on_failure_timeout_response(self, row: MessageRow) -> None:
        self._write("Info", "on_failure_timeout supplied a response", "on_failure_timeout")


class TraceObserver(Middleware):
    """``trace = true``: one Trace event per attempt."""

    SETTINGS: ClassVar[tuple[Setting, ...]] = _declared("trace")

    def __init__(self, host: BusinessOperation) -> None:
        self.host = host

    def after_attempt(self, row: MessageRow, report: AttemptReport) -> None:
        to = f" to {report.server}" if report.server else ""
        self.host.log_event("Trace", f"attempt {report.number}{to}: {report.outcome} in "
                            f"{report.seconds:.3f} s", method="on_attempt_end")


class AlertObserver(Middleware):
    """``alert_on_error``: one Alert per message, after ``grace`` seconds of failing."""

    SETTINGS: ClassVar[tuple[Setting, ...]] = _declared("alert_on_error",
                                                         "alert_retry_grace_period")

    def __init__(self, host: BusinessOperation, *, grace: float) -> None:
        self.host = host
        self.grace = grace  # seconds after the first failure without alerts
        self._first_failure: float | None = None  # of the message in hand
        self._alerted = False

    def on_start(self, row: MessageRow, first_failure: float | None) -> None:
        self._first_failure, self._alerted = first_failure, False

    def on_failure(self, row: MessageRow, outcome: EndedAttempt, *, final: bool) -> None:
        if self._first_failure is None:
            self._first_failure = outcome.ended
        if self._alerted:
            return
        if final or outcome.ended - self._first_failure >= self.grace:
            self._alerted = True
            self.host.log_event("Alert", f"attempt {outcome.number} failed"
                                f"{' (giving up)' if final else ''}: "
                                f"{error_text(outcome.error)}", method="on_failure")
