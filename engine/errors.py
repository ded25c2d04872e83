"""The error hierarchy of Encore: one root, :class:`EncoreError`; adapter errors carry how
far the request got (docs/retries.md)."""
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
    """An observer holds the message back until ``until`` (aware UTC); the attempt never
    started."""

    def __init__(self, reason: str, *, until: datetime | None = None) -> None:
        super().__init__(reason)
        self.until = until


class ClaimLost(StoreError):
    """A worker's claim on a message is gone; it must abandon the message at once."""


class MessageError(EncoreError):
    """A message body is malformed or its target is unknown; nothing was enqueued."""


class OperatorError(EncoreError):
    """An operator action does not fit the message's current status."""


class NotFound(OperatorError):
    """What an operator action names does not exist (the portal answers 404, not 409)."""


class ItemNotFound(NotFound):
    """No item of that name in the production."""


class MessageNotFound(NotFound):
    """No message of that id."""


class Delivery(str, enum.Enum):
    """How far a failed request got. Decides whether re-sending it is safe."""

    NOT_SENT = "not_sent"
    UNKNOWN = "outcome_unknown"
    ANSWERED = "answered"


class AdapterError(EncoreError):
    """A failed call through an outbound adapter; ``outcome`` goes to
    ``message_attempt.outcome``, ``code`` is what ``E#<code>`` matches."""

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

    def __reduce__(self) -> tuple[Any, ...]:
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
    """The request left; no complete answer came back."""

    delivery = Delivery.UNKNOWN
    retryable = True


# No column marks an attempt cut short: this stored error text is the contract.
CRASH_TEXT = ("outcome unknown: the delivery was cut short (the daemon stopped, or lost its "
              "database) while this attempt was in flight")
# every text such an attempt has ever been stored with
CRASH_TEXTS = frozenset({
    CRASH_TEXT, "outcome unknown: the daemon stopped while this attempt was in flight"})


class ResponseTimeout(OutcomeUnknown):
    """No complete response before the attempt's deadline."""

    outcome = "timeout"


class ConnectionReset(OutcomeUnknown):
    """The connection broke after the request was sent."""

    outcome = "reset"


class Answered(AdapterError):
    """The server answered, with an error."""

    delivery = Delivery.ANSWERED


class HttpStatusError(Answered):
    """An HTTP status the operation does not accept."""

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
    """A request waited for ended without a response, in ``status``."""

    def __init__(self, text: str, *, message_id: int, status: str | None,
                 target: str | None = None, error_text: str | None = None) -> None:
        super().__init__(text)
        self.message_id = message_id
        self.status = status
        self.target = target
        self.error_text = error_text


class CallTimedOut(CallFailed):
    """A request waited for did not finish within the timeout (it goes on)."""


class ProcessError(EncoreError):
    """A business process cannot make a call."""


class NoRoute(ProcessError):
    """A router found no rule that matches the request and has no ``default_target``."""


class Interrupted(BaseException):
    """The daemon stops while a process waits; a BaseException, so ``except Exception``
    cannot swallow it."""


class AdapterNotReady(EncoreError):
    """An adapter could not start; the item retries every ``retry_interval``."""


class DocumentRefused(AdapterNotReady):
    """A WSDL or schema document at ``url`` refused before it was read, for ``reason``."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{url} refused: {reason}")
        self.url = url
        self.reason = reason
