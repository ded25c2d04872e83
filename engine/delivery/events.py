"""What watches deliveries: the event log, metrics, trace events and alerts — the third of
the worker's parts (docs/retries.md rule 6).

The worker tells every :class:`DeliveryObserver` what happened (an attempt ended, the first
failure, a give-up, ...); each observer acts on what concerns it, and events name the hook
that wrote them as their ``source_method`` (``on_first_failure``, ``on_give_up``, ...), so
a row of ``event_log`` says which rule wrote it.
"""
from __future__ import annotations

from engine.delivery.attempt_runner import AttemptOutcome, error_text
from engine.host import BusinessOperation
from engine.runtime.metrics import Metrics
from engine.store.rows import MessageRow

__all__ = ["AlertObserver", "DeliveryObserver", "EventLogObserver", "MetricsObserver",
           "TraceObserver"]


class DeliveryObserver:
    """Hooks of a delivery; the default methods do nothing."""

    def on_start(self, row: MessageRow, first_failure: float | None) -> None:
        """A delivery of ``row`` begins; ``first_failure``: when (monotonic) its first
        failed attempt ended, if it has one already (a message retried after a restart)."""

    def on_attempt_end(self, row: MessageRow, outcome: AttemptOutcome) -> None:
        """Every attempt, as it ended."""

    def on_failure(self, row: MessageRow, outcome: AttemptOutcome, *, final: bool) -> None:
        """A failed attempt once the policy has decided: ``final`` when no retry follows."""

    def on_first_failure(self, row: MessageRow, text: str,
                         error: BaseException | None = None) -> None:
        """Attempt 1 failed (rule 6: one Error event); ``error`` when the operation's own
        code raised something unexpected (its stack is worth keeping)."""

    def on_reply_warning(self, row: MessageRow, outcome: AttemptOutcome) -> None:
        """A reply code action asked for a warning (``W``)."""

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


class EventLogObserver(DeliveryObserver):
    """The events of rule 6, and the others a delivery writes, in the item's event log."""

    def __init__(self, host: BusinessOperation) -> None:
        self.host = host

    def on_first_failure(self, row: MessageRow, text: str,
                         error: BaseException | None = None) -> None:
        self.host.log_event("Error", text, method="on_first_failure", exc=error)

    def on_reply_warning(self, row: MessageRow, outcome: AttemptOutcome) -> None:
        self.host.log_event("Warning", f"attempt {outcome.number} failed: "
                            f"{error_text(outcome.error)}", method="on_reply_warning")

    def on_complete(self, row: MessageRow, number: int) -> None:
        if number > 1:
            self.host.log_event("Info", f"completed on attempt {number} after {number - 1} "
                                f"failed attempt{'s' if number > 2 else ''}",
                                method="on_complete")

    def on_give_up(self, row: MessageRow, text: str) -> None:
        self.host.log_event("Error", text, method="on_give_up")

    def on_suspend(self, row: MessageRow, text: str) -> None:
        self.host.log_event("Warning", text, method="on_suspend")

    def on_disable(self, row: MessageRow, reason: str) -> None:
        self.host.log_event("Warning", f"item {reason}; message {row.id} is back at the front "
                            "of its queue", method="on_disable")

    def on_failure_timeout_response(self, row: MessageRow) -> None:
        self.host.log_event("Info", "on_failure_timeout supplied a response",
                            method="on_failure_timeout")


class TraceObserver(DeliveryObserver):
    """``trace = true``: one Trace event per attempt."""

    def __init__(self, host: BusinessOperation) -> None:
        self.host = host

    def on_attempt_end(self, row: MessageRow, outcome: AttemptOutcome) -> None:
        to = f" to {outcome.server}" if outcome.server else ""
        self.host.log_event("Trace", f"attempt {outcome.number}{to}: {outcome.outcome} in "
                            f"{outcome.seconds:.3f} s", method="on_attempt_end")


class MetricsObserver(DeliveryObserver):
    """Attempts by outcome and duration, and give-ups, for Prometheus (and completions too
    for the console's per-minute counters, when the daemon keeps them)."""

    def __init__(self, metrics: Metrics, item: str) -> None:
        self.metrics = metrics
        self.item = item

    def on_attempt_end(self, row: MessageRow, outcome: AttemptOutcome) -> None:
        self.metrics.observe_attempt(self.item, outcome.outcome, outcome.seconds)
        if self.metrics.rollup is not None:  # the console's counters (engine.store.rollup)
            self.metrics.rollup.attempt(self.item, outcome.outcome, outcome.seconds,
                                        outcome.number)

    def on_complete(self, row: MessageRow, number: int) -> None:
        if self.metrics.rollup is not None:
            self.metrics.rollup.completed(self.item)

    def on_give_up(self, row: MessageRow, text: str) -> None:
        self.metrics.give_up(self.item)
        if self.metrics.rollup is not None:
            self.metrics.rollup.gave_up(self.item)


class AlertObserver(DeliveryObserver):
    """``alert_on_error``: one Alert per message, unless a retry may still succeed within
    ``grace`` seconds of its first failure."""

    def __init__(self, host: BusinessOperation, *, grace: float) -> None:
        self.host = host
        self.grace = grace  # seconds after the first failure without alerts
        self._first_failure: float | None = None  # of the message in hand
        self._alerted = False

    def on_start(self, row: MessageRow, first_failure: float | None) -> None:
        self._first_failure, self._alerted = first_failure, False

    def on_failure(self, row: MessageRow, outcome: AttemptOutcome, *, final: bool) -> None:
        if self._first_failure is None:
            self._first_failure = outcome.ended
        if self._alerted:
            return
        if final or outcome.ended - self._first_failure >= self.grace:
            self._alerted = True
            self.host.log_event("Alert", f"attempt {outcome.number} failed"
                                f"{' (giving up)' if final else ''}: "
                                f"{error_text(outcome.error)}", method="on_failure")
