"""Bodies and names at and past their bounds, through the Python API, on every store (issue
12 docs/architecture.md): what is refused says why and enqueues nothing; what is accepted fits the
columns."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from engine import Message
from engine.client import send_message, send_messages
from engine.clock import utcnow
from engine.config.production import MAX_ITEM_NAME, parse_outline
from engine.errors import MessageError
from engine.message import MAX_BODY_DEPTH
from engine.runtime.cluster import item_lease_name
from engine.store import queries
from engine.store.sql import SqlStore

LONGEST = "L" * MAX_ITEM_NAME
PRODUCTION = parse_outline(f'[[items]]\nname = "Http"\nclass = "operations.http:HttpOperation"\n'
                           f'[[items]]\nname = "{LONGEST}"\n'
                           f'class = "tests.unit.sample_ops:StubOperation"\n', env={})


@dataclass
class Reading(Message):
    value: float


def nested(levels: int) -> Any:
    """A list nested ``levels`` deep (``[[...]]``)."""
    body: Any = []
    for _ in range(levels - 1):
        body = [body]
    return body


@pytest.mark.parametrize("body", [
    {"method": "POST", "json": {"amount": float("nan")}},  # NaN deep in a dict body
    {"method": "POST", "json": [1.0, float("inf")]},  # an infinity in a list
    '{"method": "POST", "json": {"amount": NaN}}',  # NaN in JSON text (Python's extension)
    Reading(value=float("-inf")),  # a message instance
])
def test_a_body_holding_nan_or_infinity_is_refused_and_nothing_is_enqueued(
        store: SqlStore, body: Any) -> None:
    with pytest.raises(MessageError, match="body holds NaN or an infinity, which JSON does "
                                           "not have"):
        send_message(store, PRODUCTION, "Http", body)
    assert queries.messages(store) == []


def test_a_batch_with_one_nan_body_is_refused_by_its_position(store: SqlStore) -> None:
    bodies = [{"method": "GET"}, {"method": "POST", "json": {"x": float("nan")}}]
    with pytest.raises(MessageError, match="^message 2: body holds NaN"):
        send_messages(store, PRODUCTION, "Http", bodies)
    assert queries.messages(store) == []


def test_a_body_nested_deeper_than_the_limit_is_refused(store: SqlStore) -> None:
    send_message(store, PRODUCTION, "Http", {"method": "POST", "json": nested(MAX_BODY_DEPTH - 1)})
    too_deep = {"method": "POST", "json": nested(MAX_BODY_DEPTH)}
    with pytest.raises(MessageError, match=f"more than {MAX_BODY_DEPTH} levels deep"):
        send_message(store, PRODUCTION, "Http", too_deep)
    text = '{"method": "POST", "json": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(MessageError, match="levels deep"):  # too deep for the decoder
        send_message(store, PRODUCTION, "Http", text)
    assert len(queries.messages(store)) == 1


def test_a_body_that_holds_itself_is_refused(store: SqlStore) -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(MessageError, match="levels deep"):
        send_message(store, PRODUCTION, "Http", {"method": "POST", "json": loop})


def test_the_longest_item_name_the_loader_accepts_fits_every_column(store: SqlStore) -> None:
    message_id = send_message(store, PRODUCTION, LONGEST, {"text": "hi"})
    assert store.get_message(message_id).target == LONGEST
    store.events.write("Info", "named", config_name=LONGEST)
    assert store.leases.acquire(item_lease_name(LONGEST), "d", now=utcnow(), lease_seconds=10)
    store.set_item_enabled(LONGEST, False, reason="test", now=utcnow())
    assert store.item_overrides() == {LONGEST: False}
