"""Running one attempt: middleware, the recorded start, ``on_message`` once (docs/retries.md)."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engine.attempt import AttemptContext, AttemptReport, error_text, idempotency_key
from engine.clock import Clock
from engine.delivery.middleware import Hooks
from engine.errors import AdapterError
from engine.host import BusinessOperation
from engine.retry import RetryPolicy
from engine.store.rows import MessageRow
from engine.store.sql import SqlStore
from engine.store.transition import AttemptEnd

__all__ = ["AttemptOutcome", "AttemptRunner", "error_text", "idempotency_key", "outcome_of"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class AttemptOutcome:
    """How one attempt ended: ``started``/``ended`` monotonic, ``*_at`` aware UTC."""

    number: int  # 1 for the first attempt of the message
    attempt_id: int  # its message_attempt row
    started: float
    ended: float
    started_at: datetime
    ended_at: datetime
    response: Any = None
    error: BaseException | None = None
    server: str | None = None
    retry_asked: bool = False  # the operation set self.retry
    suspend_asked: bool = False  # the operation set self.suspend_message

    @property
    def failed(self) -> bool:
        return self.error is not None or self.retry_asked or self.suspend_asked

    @property
    def outcome(self) -> str:
        """``ok``, or the ``message_attempt.outcome`` of the failure."""
        return outcome_of(self.error) if self.failed else "ok"

    @property
    def seconds(self) -> float:
        return self.ended - self.started

    def end(self) -> AttemptEnd:
        """The attempt's end, as the transition that follows it records it."""
        failed = self.failed
        return AttemptEnd(self.attempt_id, self.ended_at, self.server, self.outcome,
                          getattr(self.error, "status_code", None),
                          error_text(self.error) if failed else None, self.started_at)


def outcome_of(error: BaseException | None) -> str:
    return error.outcome if isinstance(error, AdapterError) else "error"


class AttemptRunner:
    """Runs the attempts of one host instance."""

    def __init__(self, host: BusinessOperation, *, store: SqlStore, clock: Clock,
                 policy: RetryPolicy, hooks: Hooks | None = None) -> None:
        self.host = host
        self.store = store
        self.clock = clock
        self.policy = policy
        self.hooks = hooks or Hooks(())

    def run(self, row: MessageRow, request: Any, number: int, first_started: float | None,
            begun: int | None = None, begun_server: str | None = None) -> AttemptOutcome:
        """Attempt ``number`` of the claimed ``row``. ``first_started``: s_1 (None: first).
        ``begun``: the attempt the batch claim began, to ``begun_server``. Raises AttemptHeld or
        ClaimLost (nothing sent then). The attempt's end is written by the transition that
        follows it (:meth:`AttemptOutcome.end`)."""
        host, adapter = self.host, self.host.adapter
        headers = self._before(row, number)
        host.retry, host.suspend_message, host.retry_count = False, False, number
        started, started_at = self.clock.monotonic(), self.clock.now()
        server = begun_server if begun is not None else (
            adapter.next_server() if adapter is not None else None)
        attempt_id = begun if begun is not None else self.store.begin_attempt(
            row.id, number, started_at=started_at, token=row.claim_token, server=server)
        if adapter is not None:
            s_1 = started if first_started is None else first_started
            deadline = self.policy.deadline(first_started=s_1, started=started,
                                            response_timeout=adapter.response_timeout)
            adapter.begin_attempt(AttemptContext(
                deadline=deadline, message_id=row.id, idempotency_key=idempotency_key(row),
                headers=headers, server=server,
                record_server=lambda text: self.store.note_attempt_server(
                    attempt_id, text, token=row.claim_token)))
        response, error = None, None
        try:
            response = host.on_message(request)
        except Exception as exc:
            error = exc
        finally:
            server = adapter.end_attempt() if adapter is not None else None
        outcome = AttemptOutcome(
            number=number, attempt_id=attempt_id, started=started, ended=self.clock.monotonic(),
            started_at=started_at, ended_at=self.clock.now(), response=response, error=error,
            server=server, retry_asked=host.retry, suspend_asked=host.suspend_message)
        self._after(row, outcome)
        return outcome

    def _before(self, row: MessageRow, number: int) -> dict[str, str]:
        headers: dict[str, str] = {}
        for before in self.hooks.before_attempt:
            extra = before(row, number)
            if extra:
                headers.update(extra)
        return headers

    def _after(self, row: MessageRow, outcome: AttemptOutcome) -> None:
        adapter = self.host.adapter
        report = AttemptReport(
            number=outcome.number, outcome=outcome.outcome, seconds=outcome.seconds,
            server=outcome.server, status_code=getattr(outcome.error, "status_code", None),
            error=outcome.error, exchange=adapter.exchange() if adapter is not None else None)
        for after in self.hooks.after_attempt:
            try:
                after(row, report)
            except Exception:
                log.exception("item %s: middleware %s failed after an attempt",
                              self.host.name, type(getattr(after, "__self__", after)).__name__)
