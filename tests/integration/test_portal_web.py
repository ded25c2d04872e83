"""The portal's pages through Starlette's TestClient, on SQLite and PostgreSQL (what is only
the portal's, on SQLite): logins, sessions, roles, CSRF, confirmations, the Message Viewer's
filters and keyset paging, escaping, operator actions and the events they write."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, func, select
from starlette.testclient import TestClient

from engine.portal import create_app
from engine.portal.auth import SESSION_COOKIE
from engine.serving.auth import LOGIN_FAILURES
from engine.store import viewer
from engine.store.models import event_log, message_header
from engine.store.sql import SqlStore
from tests.portal_support import PING, add_user, csrf_of, form_token, login, production

pytestmark = pytest.mark.dialect_free


@pytest.fixture
def client(store: SqlStore) -> Iterator[TestClient]:
    for name, role in (("olga", "operator"), ("vera", "viewer"), ("adam", "admin")):
        add_user(store, name, role)
    app = create_app(store, production(store.url), secret="test-secret", env={})
    with TestClient(app) as c:
        yield c


def send(store: SqlStore, text: str = "hi", target: str = "Echo") -> int:
    return store.enqueue(target=target, body_class=PING, body=f'{{"text": "{text}"}}',
                         source="cli")


def finish(store: SqlStore, message_id: int, status: str = "Error") -> None:
    store.finish(message_id, status=status, error_text=f"ended {status} on purpose",
                 now=store.db_now())


def statuses(store: SqlStore) -> dict[int, str]:
    with store.engine.connect() as conn:
        return dict(conn.execute(select(message_header.c.id, message_header.c.status)).all())


def events_by(store: SqlStore, source_class: str) -> list[Any]:
    with store.engine.connect() as conn:
        return conn.execute(select(event_log).where(event_log.c.source_class == source_class)
                            .order_by(event_log.c.id)).all()


# -- logging in --------------------------------------------------------------------------
def test_every_page_sends_a_stranger_to_the_login_form(client: TestClient) -> None:
    for path in ("/", "/messages", "/messages/1", "/trace/1", "/events", "/suspended"):
        response = client.get(path, follow_redirects=False)
        assert response.status_code == 303, path
        assert response.headers["location"].startswith("/login?next=")


def test_a_user_logs_in_with_the_right_password_and_gets_a_strict_http_only_cookie(
        client: TestClient) -> None:
    response = login(client, "olga")
    assert response.status_code == 303 and response.headers["location"] == "/"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{SESSION_COOKIE}=")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Secure" not in cookie
    assert client.get("/").status_code == 200


def test_a_wrong_password_or_an_unknown_user_is_refused_alike(client: TestClient) -> None:
    wrong = login(client, "olga", "nope")
    unknown = login(client, "nobody", "nope")
    assert wrong.status_code == unknown.status_code == 401
    assert "wrong user name or password" in wrong.text and "wrong user name" in unknown.text
    assert client.get("/", follow_redirects=False).status_code == 303


@pytest.mark.parametrize("database_url", ["sqlite", "postgresql"], indirect=True)
def test_logins_stop_after_too_many_failures_even_with_the_right_password(
        client: TestClient) -> None:
    for _ in range(LOGIN_FAILURES):
        assert login(client, "olga", "guess").status_code == 401
    throttled = login(client, "olga")
    assert throttled.status_code == 429 and "too many failed logins" in throttled.text
    assert client.get("/", follow_redirects=False).status_code == 303


def test_a_login_without_the_form_s_token_is_refused(client: TestClient) -> None:
    response = client.post("/login", data={"username": "olga", "password": "x"},
                           follow_redirects=False)
    assert response.status_code == 403


def test_the_cookie_is_secure_when_the_portal_serves_tls(store: SqlStore) -> None:
    add_user(store, "olga", "operator")
    app = create_app(store, production(store.url), secret="s", tls=True, env={})
    with TestClient(app, base_url="https://testserver") as c:
        assert "Secure" in login(c, "olga").headers["set-cookie"]


def test_a_removed_user_s_session_ends_at_once(client: TestClient, store: SqlStore) -> None:
    from engine.store import accounts

    login(client, "olga")
    accounts.remove_user(store, "olga")
    assert client.get("/", follow_redirects=False).status_code == 303


def test_a_forged_or_tampered_session_cookie_is_ignored(client: TestClient) -> None:
    from itsdangerous import URLSafeTimedSerializer

    login(client, "vera")
    value = client.cookies.get(SESSION_COOKIE)
    forged = URLSafeTimedSerializer("another-secret", salt="encore-portal-session").dumps(
        {"u": "adam", "c": "x"})
    tampered = value[:-2] + ("AA" if not value.endswith("AA") else "BB")
    for cookie in (forged, tampered):
        client.cookies.clear()
        client.cookies.set(SESSION_COOKIE, cookie)
        assert client.get("/", follow_redirects=False).status_code == 303
    client.cookies.clear()
    client.cookies.set(SESSION_COOKIE, value)
    assert client.get("/", follow_redirects=False).status_code == 200


def test_pages_carry_a_content_security_policy_that_loads_nothing_from_elsewhere(
        client: TestClient) -> None:
    login(client, "olga")
    policy = client.get("/").headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src 'self'" in policy
    assert client.get("/static/portal.js").status_code == 200


# -- actions, roles, CSRF ----------------------------------------------------------------
def test_an_operator_resends_a_message_after_confirming_and_an_event_names_them(
        client: TestClient, store: SqlStore) -> None:
    mid = send(store)
    finish(store, mid)
    login(client, "olga")
    token = csrf_of(client)
    asked = client.post(f"/messages/{mid}/resend", data={"csrf_token": token})
    assert asked.status_code == 200 and "Resend message" in asked.text
    assert len(statuses(store)) == 1  # not confirmed: nothing happened
    done = client.post(f"/messages/{mid}/resend", data={"csrf_token": token,
                                                         "confirmed": "yes"},
                       follow_redirects=False)
    new_id = int(done.headers["location"].rsplit("/", 1)[1])
    assert statuses(store)[new_id] == "Queued"
    audit = events_by(store, "Operator")
    assert [e.type for e in audit] == ["Info"]
    assert "olga" in audit[0].text and audit[0].message_id == mid


def test_a_form_without_the_session_s_csrf_token_changes_nothing(
        client: TestClient, store: SqlStore) -> None:
    mid = send(store)
    login(client, "olga")
    for data in ({"confirmed": "yes"}, {"confirmed": "yes", "csrf_token": "forged"}):
        response = client.post(f"/messages/{mid}/suspend", data=data)
        assert response.status_code == 403
    assert statuses(store)[mid] == "Queued"


def test_a_viewer_sees_no_action_and_is_refused_one_even_with_a_good_token(
        client: TestClient, store: SqlStore) -> None:
    mid = send(store)
    login(client, "vera")
    page = client.get(f"/messages/{mid}").text
    assert 'data-confirm' not in page and f'action="/messages/{mid}/' not in page
    assert "/disable" not in client.get("/").text
    token = csrf_of(client)
    response = client.post(f"/messages/{mid}/suspend",
                           data={"csrf_token": token, "confirmed": "yes"})
    assert response.status_code == 403
    assert client.post("/items/Echo/disable", data={"csrf_token": token,
                                                    "confirmed": "yes"}).status_code == 403
    assert statuses(store)[mid] == "Queued" and store.item_overrides() == {}


def test_an_operator_disables_and_enables_an_item(client: TestClient, store: SqlStore) -> None:
    login(client, "olga")
    token = csrf_of(client)
    client.post("/items/Echo/disable", data={"csrf_token": token, "confirmed": "yes"})
    assert store.item_overrides() == {"Echo": False}
    assert "/items/Echo/enable" in client.get("/").text
    client.post("/items/Echo/enable", data={"csrf_token": token, "confirmed": "yes"})
    assert store.item_overrides() == {"Echo": True}
    assert [e.source_method for e in events_by(store, "Operator")] == ["disable", "enable"]


def test_an_action_the_status_does_not_allow_is_refused_with_the_reason(
        client: TestClient, store: SqlStore) -> None:
    mid = send(store)
    finish(store, mid, "Completed")
    login(client, "olga")
    response = client.post(f"/messages/{mid}/discard",
                           data={"csrf_token": csrf_of(client), "confirmed": "yes"})
    assert response.status_code == 409 and "only Queued or Suspended" in response.text


@pytest.mark.parametrize("database_url", ["sqlite", "postgresql"], indirect=True)
def test_bulk_resend_needs_the_count_typed_and_resends_exactly_what_the_filter_selects(
        client: TestClient, store: SqlStore) -> None:
    failed = [send(store, f"m{i}") for i in range(3)]
    for mid in failed:
        finish(store, mid)
    kept = send(store, "queued")  # Queued: selected by no Error filter
    login(client, "olga")
    confirm = client.get("/messages/resend?status=Error")
    assert '<strong id="bulk-count">3</strong>' in confirm.text
    token = form_token(confirm.text)
    wrong = client.post("/messages/resend", data={"csrf_token": token, "status": "Error",
                                                  "count": "2"})
    assert wrong.status_code == 409 and len(statuses(store)) == 4
    right = client.post("/messages/resend", data={"csrf_token": token, "status": "Error",
                                                  "count": "3"})
    assert right.status_code == 200 and "3 message(s) resent" in right.text
    now = statuses(store)
    assert len(now) == 7 and now[kept] == "Queued"
    assert sorted(s for i, s in now.items() if i > kept) == ["Queued"] * 3


# -- reading -----------------------------------------------------------------------------
def test_a_body_holding_markup_is_shown_as_text(client: TestClient, store: SqlStore) -> None:
    mid = send(store, "<script>alert(1)</script>")
    finish(store, mid)
    login(client, "vera")
    for path in (f"/messages/{mid}", f"/trace/{mid}", "/messages?q=script"):
        page = client.get(path).text
        assert "<script>alert" not in page, path
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in client.get(f"/messages/{mid}").text


@pytest.mark.parametrize("database_url", ["sqlite", "postgresql"], indirect=True)
def test_the_message_viewer_pages_by_keyset_without_offset(client: TestClient,
                                                           store: SqlStore) -> None:
    ids = [send(store, f"m{i}") for i in range(120)]
    offsets: list[Any] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        if "OFFSET" in statement.upper():  # SQLite writes LIMIT ? OFFSET ? with 0 for none
            offsets.append(parameters[-1] if isinstance(parameters, tuple) else parameters)

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        login(client, "vera")
        seen: list[int] = []
        path: str | None = "/messages?target=Echo"
        while path:
            page = client.get(path).text
            seen += [int(i) for i in _row_ids(page)]
            path = _older_link(page)
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    assert seen == ids[::-1]  # newest first, every message once
    assert all(offset == 0 for offset in offsets), offsets


def _row_ids(page: str) -> list[str]:
    import re

    return re.findall(r'data-message-row="(\d+)"', page)


def _older_link(page: str) -> str | None:
    import html
    import re

    match = re.search(r'rel="next" href="([^"]+)"', page)
    return html.unescape(match.group(1)) if match else None


@pytest.mark.parametrize("query, expected", [
    ("status=Error", {"err"}),                 # one status
    ("errors=1", {"err"}),                     # the errors switch
    ("target=Other", {"other"}),               # one item
    ("q=NEEDLE", {"needle"}),                  # text in the body, any case
    ("q=on+purpose", {"err"}),                 # text in the error
    ("status=Queued&target=Echo", {"needle", "plain"}),  # two filters at once
])
def test_the_message_viewer_filters(client: TestClient, store: SqlStore, query: str,
                                    expected: set[str]) -> None:
    names = {"err": send(store, "err"), "other": send(store, "other", "Other"),
             "needle": send(store, "a needle here"), "plain": send(store, "plain")}
    finish(store, names["err"])
    login(client, "vera")
    shown = {int(i) for i in _row_ids(client.get(f"/messages?{query}").text)}
    assert shown == {names[n] for n in expected}


@pytest.mark.parametrize("database_url", ["sqlite", "postgresql"], indirect=True)
def test_the_session_and_time_filters_select_by_session_and_creation_time(
        client: TestClient, store: SqlStore) -> None:
    first = send(store, "first")
    cut = store.db_now().isoformat()
    second = send(store, "second")
    login(client, "vera")
    from urllib.parse import quote

    assert _row_ids(client.get(f"/messages?since={quote(cut)}").text) == [str(second)]
    assert _row_ids(client.get(f"/messages?until={quote(cut)}").text) == [str(first)]
    assert _row_ids(client.get(f"/messages?session={first}").text) == [str(first)]
    bad = client.get("/messages?since=yesterday")
    assert bad.status_code == 400 and "since" in bad.text


def test_the_production_page_counts_each_item_s_queue(client: TestClient,
                                                      store: SqlStore) -> None:
    for _ in range(3):
        send(store)
    finish(store, send(store))
    login(client, "vera")
    status = viewer.production_status(store, ["Echo", "Other"], now=store.db_now())
    assert status.items["Echo"].queued == 3 and status.items["Other"].queued == 0
    assert status.items["Echo"].last_error is None  # finish() writes no event
    page = client.get("/?fragment=1").text
    assert 'data-item="Echo"' in page and "No daemon is running" in page


@pytest.mark.parametrize("database_url", ["sqlite", "postgresql"], indirect=True)
def test_the_event_log_filters_and_follows_from_an_id(client: TestClient,
                                                       store: SqlStore) -> None:
    store.events.write("Info", "one", config_name="Echo")
    store.events.write("Error", "two", config_name="Echo")
    store.events.write("Info", "three", config_name="Other")
    login(client, "vera")
    page = client.get("/events?item=Echo").text
    assert "two" in page and "three" not in page
    with store.engine.connect() as conn:
        first = conn.execute(select(func.min(event_log.c.id))).scalar_one()
    rows = client.get(f"/events?fragment=1&after={first}").text
    assert "two" in rows and "three" in rows and ">one<" not in rows
