"""One attempt as the engine sees it: its context, its report, and the observers of an
item's attempts (here, below delivery, so that tracing and metrics need not import it)."""
from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.store.rows import MessageRow

__all__ = ["SERVER_SEPARATOR", "AttemptContext", "AttemptObserver", "AttemptReport",
           "HttpExchange", "error_text", "idempotency_key", "servers_of", "servers_text"]

SERVER_SEPARATOR = " → "
SERVER_TEXT_LIMIT = 500


def servers_text(servers: Sequence[str]) -> str | None:
    """``message_attempt.server`` for ``servers``, cut to the column's width."""
    if not servers:
        return None
    text = SERVER_SEPARATOR.join(servers)
    return text if len(text) <= SERVER_TEXT_LIMIT else text[:SERVER_TEXT_LIMIT - 1] + "…"


def servers_of(text: str | None) -> list[str]:
    """The servers an attempt went to, from its ``message_attempt.server``."""
    return text.split(SERVER_SEPARATOR) if text else []


@dataclass(frozen=True)
class AttemptContext:
    """What the worker tells the adapter about the attempt in progress."""

    deadline: float  # monotonic seconds
    idempotency_key: str
    message_id: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    # record_server records a failover before a request goes to the new server
    server: str | None = None
    record_server: Callable[[str], None] | None = None


@dataclass(frozen=True)
class HttpExchange:
    """The last HTTP request of an attempt, as the adapter sent it (HTTP and SOAP alike)."""

    method: str
    url: str  # the last hop of a redirect chain
    status_code: int | None = None


@dataclass(frozen=True)
class AttemptReport:
    """How an attempt ended, as observers are told."""

    number: int
    outcome: str  # "ok", or message_attempt.outcome of the failure
    seconds: float
    server: str | None = None
    status_code: int | None = None  # of the failure; a success's is in ``exchange``
    error: BaseException | None = None
    exchange: HttpExchange | None = None


class AttemptObserver:
    """Watches every attempt of one item. ``before_attempt`` may wait, raise
    :class:`~engine.errors.AttemptHeld`, and return headers; the defaults do nothing."""

    def before_attempt(self, row: MessageRow, number: int) -> Mapping[str, str] | None:
        return None

    def after_attempt(self, row: MessageRow, report: AttemptReport) -> None:
        return None


def error_text(error: BaseException | None) -> str:
    """An attempt's error as stored and logged (None: the operation asked for a retry)."""
    if error is None:
        return "the operation asked for a retry"
    return f"{type(error).__name__}: {error}"


_KEY_NAMESPACE = uuid.NAMESPACE_OID.bytes


def idempotency_key(row: MessageRow) -> str:
    """``uuid5(NAMESPACE_OID, "encore:<id>:<time_created>")``, built without ``uuid.uuid5``
    (half the cost)."""
    name = f"encore:{row.id}:{row.time_created.isoformat()}".encode()
    digest = bytearray(hashlib.sha1(_KEY_NAMESPACE + name).digest()[:16])
    digest[6] = digest[6] & 0x0F | 0x50  # version 5
    digest[8] = digest[8] & 0x3F | 0x80  # the RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
