"""Every portal action leaves exactly one ``Info`` event naming the user (docs/security.md,
docs/portal.md), and the administration pages act for admins only, on SQLite (dialect-free)."""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import func, select
from starlette.testclient import TestClient

from engine.portal import create_app
from engine.store import accounts
from engine.store.models import api_token, event_log, message_header
from engine.store.sql import SqlStore
from tests.portal_support import PASSWORD, PING, add_user, csrf_of, login, production

pytestmark = pytest.mark.dialect_free

NEW_PASSWORD = "a brand new password"


@pytest.fixture
def client(store: SqlStore) -> Iterator[TestClient]:
    for name, role in (("olga", "operator"), ("vera", "viewer"), ("adam", "admin")):
        add_user(store, name, role)
    with TestClient(create_app(store, production(store.url), secret="s", env={})) as c:
        yield c


def send(store: SqlStore) -> int:
    return store.enqueue(target="Echo", body_class=PING, body='{"text": "hi"}', source="cli")


def info_events(store: SqlStore, after: int) -> list[Any]:
    with store.engine.connect() as conn:
        return conn.execute(select(event_log).where(event_log.c.id > after,
                                                    event_log.c.type == "Info")
                            .order_by(event_log.c.id)).all()


def last_event_id(store: SqlStore) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.coalesce(func.max(event_log.c.id), 0))).scalar())


def post(client: TestClient, path: str, **data: str) -> Any:
    return client.post(path, data={"csrf_token": csrf_of(client), "confirmed": "yes", **data},
                       follow_redirects=False)


def _finished(store: SqlStore) -> int:
    mid = send(store)
    store.finish(mid, status="Error", error_text="failed", now=store.db_now())
    return mid


def _token_id(store: SqlStore) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.max(api_token.c.id))).scalar())


# (who acts, what they do, what the one event says) — one row per kind of action
ACTIONS: list[tuple[str, Callable[[TestClient, SqlStore], Any], str]] = [
    ("olga", lambda c, s: post(c, f"/messages/{_finished(s)}/resend"), "resent by"),
    ("olga", lambda c, s: post(c, f"/messages/{send(s)}/suspend"), "suspended by"),
    ("olga", lambda c, s: post(c, f"/messages/{send(s)}/discard"), "discarded by"),
    ("olga", lambda c, s: post(c, "/items/Echo/disable"), "item disabled by"),
    ("olga", lambda c, s: post(c, "/items/Echo/enable"), "item enabled by"),
    ("adam", lambda c, s: post(c, "/admin/users", name="nina", role="viewer",
                               password=NEW_PASSWORD), "portal user 'nina' added"),
    ("adam", lambda c, s: post(c, "/admin/users/vera/password", password=NEW_PASSWORD),
     "password of portal user 'vera' reset"),
    ("adam", lambda c, s: post(c, "/admin/users/vera/remove"), "portal user 'vera' removed"),
    ("adam", lambda c, s: post(c, "/admin/tokens", name="ci-bot", role="sender"),
     "API token"),
    ("adam", lambda c, s: (post(c, "/admin/tokens", name="x", role="viewer"),
                           _mark(s), post(c, f"/admin/tokens/{_token_id(s)}/revoke")),
     "revoked"),
    ("adam", lambda c, s: post(c, "/admin/purge", days="0", count=_purge_count(c)),
     "purge of messages"),
]


_MARK: dict[str, int] = {}


def _mark(store: SqlStore) -> None:
    """Events before this point belong to the setup of the action, not to it."""
    _MARK["after"] = last_event_id(store)


def _purge_count(client: TestClient) -> str:
    page = client.get("/admin/purge?days=0").text
    match = re.search(r"removes <strong>(\d+)</strong>", page)
    assert match, page
    return match.group(1)


@pytest.mark.parametrize("who, act, says", ACTIONS, ids=[a[2] for a in ACTIONS])
def test_each_portal_action_writes_exactly_one_info_event_naming_the_user(
        client: TestClient, store: SqlStore, who: str,
        act: Callable[[TestClient, SqlStore], Any], says: str) -> None:
    login(client, who)
    _MARK.clear()
    before = last_event_id(store)
    outcome = act(client, store)
    responses = outcome if isinstance(outcome, tuple) else (outcome,)
    assert all(r is None or r.status_code in (200, 303) for r in responses), \
        [r.text[:300] for r in responses if r is not None]
    events = info_events(store, _MARK.get("after", before))
    assert len(events) == 1, [e.text for e in events]
    assert says in events[0].text
    assert f"user '{who}'" in events[0].text and "through the portal" in events[0].text


def test_a_bulk_resend_names_the_user_on_each_message_and_once_for_the_whole(
        client: TestClient, store: SqlStore) -> None:
    ids = [_finished(store) for _ in range(3)]
    login(client, "olga")
    before = last_event_id(store)
    done = post(client, "/messages/resend", status="Error", count="3")
    assert done.status_code == 200
    events = info_events(store, before)
    assert sorted(e.message_id for e in events if e.message_id) == ids
    assert len([e for e in events if e.message_id is None]) == 1
    assert all("user 'olga' (operator) through the portal" in e.text for e in events)


# -- administration ----------------------------------------------------------------------
def test_an_admin_adds_a_user_who_can_then_log_in_and_a_short_password_is_refused(
        client: TestClient, store: SqlStore) -> None:
    login(client, "adam")
    short = post(client, "/admin/users", name="nina", role="viewer", password="too short")
    assert short.status_code == 409 and "it needs at least 12" in short.text
    assert accounts.get_user(store, "nina") is None
    post(client, "/admin/users", name="nina", role="operator", password=NEW_PASSWORD)
    assert accounts.get_user(store, "nina").role == "operator"
    with TestClient(client.app) as other:
        assert login(other, "nina", NEW_PASSWORD).status_code == 303


def test_a_token_is_shown_once_works_and_is_refused_once_revoked(
        client: TestClient, store: SqlStore) -> None:
    login(client, "adam")
    created = post(client, "/admin/tokens", name="ci-bot", role="viewer")
    secret = re.search(r'id="new-token">([^<]+)<', created.text).group(1)
    auth = {"Authorization": f"Bearer {secret}"}
    assert client.get("/api/v1/status", headers=auth).status_code == 200
    assert secret not in client.get("/admin/tokens").text  # shown once only
    post(client, f"/admin/tokens/{_token_id(store)}/revoke")
    import time
    time.sleep(1.1)  # the token cache remembers a valid holder for one second
    assert client.get("/api/v1/status", headers=auth).status_code == 401


def test_the_purge_shows_its_count_before_it_removes_and_refuses_a_wrong_count(
        client: TestClient, store: SqlStore) -> None:
    for _ in range(4):
        _finished(store)
    send(store)  # queued: kept
    login(client, "adam")
    assert _purge_count(client) == "4"
    wrong = post(client, "/admin/purge", days="0", count="5")
    assert wrong.status_code == 409 and "now removes 4" in wrong.text
    done = post(client, "/admin/purge", days="0", count="4")
    assert done.status_code == 200 and "Purged: 4 message(s)" in done.text
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(message_header)).scalar() == 1


@pytest.mark.parametrize("who", ["vera", "olga"])  # a viewer, an operator
def test_below_admin_the_administration_is_refused_and_changes_nothing(
        client: TestClient, store: SqlStore, who: str) -> None:
    login(client, who)
    for path in ("/admin/users", "/admin/tokens", "/admin/purge"):
        assert client.get(path).status_code == 403, path
    assert "/admin/users" not in client.get("/messages").text
    refused = post(client, "/admin/users", name="mallory", role="admin",
                   password=NEW_PASSWORD)
    assert refused.status_code == 403 and accounts.get_user(store, "mallory") is None


def test_a_forged_admin_post_is_refused_before_anything_happens(
        client: TestClient, store: SqlStore) -> None:
    login(client, "adam")
    for data in ({}, {"csrf_token": "forged"}):
        response = client.post("/admin/users/vera/remove", data={**data, "confirmed": "yes"})
        assert response.status_code == 403
    assert accounts.get_user(store, "vera") is not None


def test_each_user_chooses_utc_or_local_time_and_every_page_says_which(
        client: TestClient, store: SqlStore) -> None:
    send(store)
    login(client, "vera")
    page = client.get("/messages").text
    assert 'data-time-zone="UTC"' in page and '<time datetime="' in page
    assert '<span class="tz">UTC</span>' in page
    client.post("/account/time-zone", data={"csrf_token": csrf_of(client),
                                            "time_zone": "local"})
    assert accounts.get_user(store, "vera").time_zone == "local"
    assert 'data-time-zone="local"' in client.get("/events").text
    bad = client.post("/account/time-zone", data={"csrf_token": csrf_of(client),
                                                  "time_zone": "Mars"})
    assert bad.status_code == 409 and "UTC, local" in bad.text
    assert PASSWORD  # the fixture's users keep the shared password
