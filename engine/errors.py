"""The error hierarchy of Encore.

One root, :class:`EncoreError`, and one family per concern. Adapter errors carry the
classification that the retry engine needs (docs/retries.md): whether the request surely
never reached the server (*not sent*), may have been processed (*outcome unknown*), or was
answered with an error (*answered*).
"""
from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import datetime
from typing import Any


class EncoreError(Exception):
    """Root of every error Encore raises on purpose."""


class ConfigurationError(EncoreError):
    """A production file, item or setting is wrong. The text says where and how to fix it."""

    def __init__(self, text: str, *, item: str | None = None, key: str | None = None) -> None:
        where = []
        if item is not None:
            where.append(f"item {item!r}")
        if key is not None:
            where.append(f"setting {key!r}")
        prefix = (", ".join(where) + ": ") if where else ""
        super().__init__(prefix + text)
        self.item = item
        self.key = key


class StoreError(EncoreError):
    """The database refused or lost an operation."""


class AttemptHeld(EncoreError):
    """An attempt observer keeps the message from being sent now (an open circuit breaker):
    the worker puts it back in its queue, due at ``until`` (aware UTC) if given. Control
    flow, not a failure: the attempt never started."""

    def __init__(self, reason: str, *, until: datetime | None = None) -> None:
        super().__init__(reason)
        self.until = until


class ClaimLost(StoreError):
    """A worker's claim on a message is gone (its lease expired and another daemon took the
    message over): the worker must abandon it at once and send nothing more."""


class MessageError(EncoreError):
    """A message body is malformed or its target is unknown; nothing was enqueued."""


class OperatorError(EncoreError):
    """An operator action does not fit the message's current status."""


class NotFound(OperatorError):
    """What an operator action names does not exist (an item, a message, a session): the
    portal answers 404, where it answers any other refused action with 409 (a conflict)."""


class ItemNotFound(NotFound):
    """No item of that name in the production."""


class MessageNotFound(NotFound):
    """No message of that id."""


class Delivery(str, enum.Enum):
    """How far a failed request got. Decides whether re-sending it is safe."""

    NOT_SENT = "not_sent"  # surely never reached the server
    UNKNOWN = "outcome_unknown"  # left us; the server may have processed it
    ANSWERED = "answered"  # the server answered with an error


class AdapterError(EncoreError):
    """A failed call through an outbound adapter.

    ``outcome`` is the value stored in ``message_attempt.outcome``; ``retryable`` is the
    adapter's request for a retry (it sets the message's retry-needed flag); ``code`` is what
    ``E#<code>`` in ``reply_code_actions`` matches (an HTTP status, a SOAP fault code).
    """

    outcome = "error"
    delivery = Delivery.ANSWERED
    retryable = False

    def __init__(
        self,
        text: str,
        *,
        server: str | None = None,
        code: str | None = None,
        status_code: int | None = None,
        headers: Mapping[str, str] | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(text)
        self.text = text
        self.server = server
        self.code = code
        self.status_code = status_code
        self.headers: Mapping[str, str] = dict(headers or {})
        if retryable is not None:
            self.retryable = retryable

    def __reduce__(self) -> tuple[Any, ...]:  # keep keyword context when pickled
        return (_rebuild, (type(self), self.text, self.__dict__))


def _rebuild(cls: type[AdapterError], text: str, state: dict[str, Any]) -> AdapterError:
    err = cls.__new__(cls)
    Exception.__init__(err, text)
    err.__dict__.update(state)
    return err


class NotSent(AdapterError):
    """The request surely never reached the server; re-sending is always safe."""

    delivery = Delivery.NOT_SENT
    retryable = True


class ConnectFailed(NotSent):
    """DNS failure, connection refused, connect timeout or TLS handshake failure."""

    outcome = "connect_error"


class OutcomeUnknown(AdapterError):
    """The request left; no complete answer came back. The server may have processed it."""

    delivery = Delivery.UNKNOWN
    retryable = True


# The error text of an attempt left open by a delivery cut short (its daemon stopped, died or
# lost its database), ended as outcome unknown when the message is next delivered. No column
# marks such an attempt: ``message_attempt.error_text`` holds this text, so the text is the
# stored contract (a business process chains the run of its calls' keys through such
# attempts, engine.process; attempts stored years ago carry it as well).
CRASH_TEXT = ("outcome unknown: the delivery was cut short (the daemon stopped, or lost its "
              "database) while this attempt was in flight")
# Every text an attempt cut short has been stored with: CRASH_TEXT and what it said before it
# named a lost database (attempts recorded then still read as cut short after an upgrade).
CRASH_TEXTS = frozenset({
    CRASH_TEXT, "outcome unknown: the daemon stopped while this attempt was in flight"})


class ResponseTimeout(OutcomeUnknown):
    """No complete response before the attempt's deadline (ResponseTimeout)."""

    outcome = "timeout"


class ConnectionReset(OutcomeUnknown):
    """The connection broke after the request was sent."""

    outcome = "reset"


class Answered(AdapterError):
    """The server answered, with an error."""

    delivery = Delivery.ANSWERED


class HttpStatusError(Answered):
    """An HTTP status the operation does not accept. Retryable when in ``retry_on_status``."""

    outcome = "http_status"


class RemoteFault(Answered):
    """A SOAP fault. Never retried as if it were a transport error."""

    outcome = "fault"

    def __init__(self, text: str, *, fault_code: str | None = None, **kw: Any) -> None:
        kw.setdefault("code", fault_code)
        super().__init__(text, **kw)
        self.fault_code = fault_code


class ResponseRejected(Answered):
    """A response refused for safety: too large, or XML with a DTD or entities."""

    outcome = "error"


class Retry(Exception):
    """Raised by an operation to ask for a retry. Control flow, not an error."""

    def __init__(self, reason: str = "retry requested by the operation") -> None:
        super().__init__(reason)
        self.reason = reason


class CallFailed(EncoreError):
    """A request sent and waited for — by :meth:`BusinessService.call` or
    :meth:`BusinessProcess.send_request_sync` — ended without a response: ``status`` is its
    final status (``Error``, ``Suspended``, ``Discarded``, ``Aborted``), ``error_text`` the
    target's own error text, ``target`` the item it was sent to."""

    def __init__(self, text: str, *, message_id: int, status: str | None,
                 target: str | None = None, error_text: str | None = None) -> None:
        super().__init__(text)
        self.message_id = message_id
        self.status = status
        self.target = target
        self.error_text = error_text


class CallTimedOut(CallFailed):
    """A request sent and waited for had not finished within the timeout. It goes on;
    ``status`` is the status it had when the wait ended."""


class ProcessError(EncoreError):
    """A business process cannot make a call: it is not bound to a production, it would
    wait for its own queue, or (a router) no rule matches the request."""


class NoRoute(ProcessError):
    """A router found no rule that matches the request and has no ``default_target``."""


class Interrupted(BaseException):
    """The daemon is stopping while a process waits for a target.

    A ``BaseException``, like ``asyncio.CancelledError``: user code that catches
    ``Exception`` around a sync call cannot swallow it. The worker puts the process's
    message back in its queue with its attempt open; the next start runs the process again
    and it re-attaches to the requests it had sent (see :class:`engine.BusinessProcess`).
    """


class AdapterNotReady(EncoreError):
    """An adapter could not start (e.g. its WSDL cannot be loaded). The item keeps its
    messages queued and tries again every ``retry_interval``."""


class DocumentRefused(AdapterNotReady):
    """A WSDL or schema document refused before it was read: another host, a scheme other
    than http(s), a local file outside a local WSDL's directory or not a regular file, a
    redirect away from the WSDL's host, or a document over the size limit. ``url`` is the
    refused location; the text names it and says why."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{url} refused: {reason}")
        self.url = url
        self.reason = reason
