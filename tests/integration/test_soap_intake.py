"""A SoapOperation's requests are checked against its WSDL where they come in: the intake
API, the Testing Service and Python callers refuse an operation or arguments the WSDL does not
have (400 naming the WSDL's operations), creating nothing; on SQLite (dialect-free), against a
real spyne service."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import func, select
from starlette.testclient import TestClient

from engine.client import accept_message, send_messages
from engine.config.production import ProductionConfig, parse_production
from engine.errors import MessageError
from engine.portal import create_app
from engine.store.models import message_header
from engine.store.sql import SqlStore
from tests.portal_support import add_token, bearer
from tests.servers import SoapTestServer

pytestmark = pytest.mark.dialect_free

OFFERS = "the WSDL offers: echo, fail, refuse"


@pytest.fixture(scope="module")
def backend() -> Iterator[SoapTestServer]:
    with SoapTestServer("B") as server:
        yield server


def _production(url: str, wsdl: str) -> ProductionConfig:
    return parse_production(f"""
[production]
name = "Door"

[[items]]
name = "Backend"
class = "operations.soap:SoapOperation"
[items.settings]
wsdl = "{wsdl}"
response_timeout = 5
""", env={"ENCORE_DATABASE_URL": url})


def _count(store: SqlStore) -> int:
    with store.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(message_header)).scalar_one()


@pytest.mark.parametrize(("body", "says"), [
    # an operation the WSDL does not have: refused with the ones it has
    ({"operation": "NoSuchOp"}, f"unknown operation 'NoSuchOp'; {OFFERS}"),
    # an argument echo does not take
    ({"operation": "echo", "args": {"txt": "hi"}}, "arguments do not fit the WSDL's echo"),
])
def test_a_request_the_wsdl_does_not_have_is_refused_and_nothing_is_created(
        store: SqlStore, backend: SoapTestServer, body: dict[str, object], says: str) -> None:
    production = _production(store.url, backend.wsdl)
    with pytest.raises(MessageError) as refused:
        accept_message(store, production, "Backend", body)
    assert str(refused.value).startswith("item 'Backend': ")
    assert says in str(refused.value)
    with pytest.raises(MessageError, match="message 2: item 'Backend'"):
        send_messages(store, production, "Backend",
                      [{"operation": "echo", "args": {"text": "a"}}, body])
    assert _count(store) == 0
    assert backend.posts == []  # nothing was sent either


def test_a_request_that_fits_the_wsdl_is_accepted(store: SqlStore,
                                                  backend: SoapTestServer) -> None:
    production = _production(store.url, backend.wsdl)
    accepted = accept_message(store, production, "Backend",
                              {"operation": "echo", "args": {"text": "hi"}})
    assert accepted.created and _count(store) == 1


def test_a_wsdl_that_cannot_be_loaded_checks_nothing(store: SqlStore) -> None:
    with SoapTestServer("gone") as gone:
        wsdl = gone.wsdl
    production = _production(store.url, wsdl)  # its server stopped: the worker will check
    accepted = accept_message(store, production, "Backend", {"operation": "NoSuchOp"})
    assert accepted.created


def test_intake_and_the_testing_service_answer_400_with_the_wsdls_operations(
        store: SqlStore, backend: SoapTestServer) -> None:
    app = create_app(store, _production(store.url, backend.wsdl), secret="test-secret", env={})
    with TestClient(app) as client:
        intake = client.post("/api/v1/messages/Backend", json={"operation": "NoSuchOp"},
                             headers=bearer(add_token(store, "sender")))
        testing = client.post("/api/v1/items/Backend/test", json={"operation": "NoSuchOp"},
                              headers=bearer(add_token(store, "operator")))
    for answer in (intake, testing):
        assert answer.status_code == 400
        assert OFFERS in answer.json()["error"]
    assert _count(store) == 0
