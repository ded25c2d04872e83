"""The ``inbound_call`` table: what inbound services (:mod:`engine.inbound`) were asked and
answered, for the Visual Trace. Written in batches after the answer; no promise rests on it."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import RowMapping, insert, select

from engine.clock import as_utc
from engine.store.models import inbound_call
from engine.store.text import storable

if TYPE_CHECKING:
    from engine.store.sql import SqlStore

TEXT_LIMIT = 200  # String(200)


@dataclass(frozen=True, kw_only=True)
class InboundCall:
    """One call of an inbound service that put message ``message_id`` in: the client's
    address, its authenticated ``principal`` (or None), the ``request`` and the ``answer``."""

    message_id: int
    service: str
    caller: str
    principal: str | None
    request: str
    received_at: datetime
    answered_at: datetime | None
    answer: str | None


def record_calls(store: SqlStore, calls: Sequence[InboundCall]) -> None:
    """Insert ``calls`` in one transaction."""
    if not calls:
        return
    rows = [{"message_id": c.message_id, "service": _cut(c.service), "caller": _cut(c.caller),
             "principal": _cut(c.principal), "request": _cut(c.request),
             "received_at": c.received_at, "answered_at": c.answered_at,
             "answer": _cut(c.answer)} for c in calls]
    with store.engine.begin() as conn:
        conn.execute(insert(inbound_call), rows)


def calls_of(store: SqlStore, message_ids: Iterable[int]) -> dict[int, InboundCall]:
    """The first recorded call of each of ``message_ids`` that has one."""
    ids = sorted(set(message_ids))
    if not ids:
        return {}
    query = select(inbound_call).where(inbound_call.c.message_id.in_(ids)) \
        .order_by(inbound_call.c.id)
    with store.engine.connect() as conn:
        rows = conn.execute(query).mappings().all()
    found: dict[int, InboundCall] = {}
    for row in rows:
        found.setdefault(row["message_id"], _call(row))
    return found


def _call(row: RowMapping) -> InboundCall:
    return InboundCall(message_id=row["message_id"], service=row["service"],
                       caller=row["caller"], principal=row["principal"],
                       request=row["request"], received_at=as_utc(row["received_at"]),
                       answered_at=as_utc(row["answered_at"]), answer=row["answer"])


def _cut(text: str | None) -> str | None:
    if text is None:
        return None
    text = storable(text)
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT - 1] + "…"
