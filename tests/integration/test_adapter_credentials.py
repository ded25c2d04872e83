"""Credentials by name: where they are looked up, how they are sent, and that the password
never shows in an error, a repr or a log line."""
from __future__ import annotations

import base64
import logging
import time
from pathlib import Path

import pytest

from adapters.base import AttemptContext
from adapters.credentials import resolve_credentials
from adapters.http import HttpAdapter
from adapters.soap import SoapAdapter
from engine.errors import (
    AdapterError,
    ConfigurationError,
    ConnectionReset,
    HttpStatusError,
    RemoteFault,
)
from tests.servers import HttpTestServer, SoapTestServer, reset_after_request, respond

PASSWORD = "s3cr3t-Pa55-do-not-leak"
ENV = {"ENCORE_CREDENTIALS_PAYMENTS_EU_USERNAME": "alice",
       "ENCORE_CREDENTIALS_PAYMENTS_EU_PASSWORD": PASSWORD}
DEADLINE = 10.0  # seconds an attempt may take: no test here asserts a time (a loaded machine)


def attempt(adapter) -> None:
    adapter.begin_attempt(AttemptContext(deadline=time.monotonic() + DEADLINE,
                                         idempotency_key="k"))


def credentials_file(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "credentials.toml"
    path.write_text(f'[ledger]\nusername = "bob"\npassword = "{PASSWORD}"\n')
    return {"ENCORE_CREDENTIALS_FILE": str(path)}


def test_credentials_come_from_the_environment_with_the_name_upper_cased():
    found = resolve_credentials("payments-eu", ENV)
    assert (found.username, found.password) == ("alice", PASSWORD)
    assert PASSWORD not in repr(found)


def test_credentials_come_from_the_credentials_file_when_not_in_the_environment(tmp_path):
    found = resolve_credentials("ledger", credentials_file(tmp_path))
    assert (found.username, found.password) == ("bob", PASSWORD)


def test_missing_credentials_name_the_name_and_both_places_looked(tmp_path):
    env = credentials_file(tmp_path)
    with pytest.raises(ConfigurationError) as caught:
        HttpAdapter({"url": "http://x", "credentials": "billing"}, item_name="Payments",
                    env=env).start()
    text = str(caught.value)
    assert "'billing'" in text and "ENCORE_CREDENTIALS_BILLING_USERNAME" in text
    assert env["ENCORE_CREDENTIALS_FILE"] in text and "Payments" in text
    assert PASSWORD not in text


def test_http_basic_authentication_is_sent_and_the_password_never_leaks(caplog):
    caplog.set_level(logging.DEBUG)
    with HttpTestServer({"/ok": respond(200, "in"), "/busy": respond(503, "busy"),
                         "/reset": reset_after_request()}) as srv:
        adapter = HttpAdapter({"url": srv.url, "credentials": "payments-eu"},
                              item_name="Payments", env=ENV)
        adapter.start()
        attempt(adapter)
        assert adapter.send("GET", "/ok").body == "in"
        errors: list[AdapterError] = []
        for path, kind in (("/busy", HttpStatusError), ("/reset", ConnectionReset)):
            attempt(adapter)
            with pytest.raises(kind) as caught:
                adapter.send("POST", path, json={})
            errors.append(caught.value)
    sent = srv.requests[0].headers["Authorization"]
    assert base64.b64decode(sent.split()[1]).decode() == f"alice:{PASSWORD}"
    for err in errors:
        assert PASSWORD not in f"{err} {err!r} {err.text} {err.__cause__}"
    assert PASSWORD not in f"{adapter!r} {adapter.settings!r} {adapter.credentials!r}"
    assert PASSWORD not in caplog.text


def test_soap_sends_a_ws_security_username_token_and_the_password_never_leaks(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    with SoapTestServer("A") as srv:
        adapter = SoapAdapter({"wsdl": srv.wsdl, "credentials": "ledger"},
                              item_name="Ledger", env=credentials_file(tmp_path))
        adapter.start()
        attempt(adapter)
        with pytest.raises(RemoteFault) as caught:
            adapter.invoke("refuse", {"text": "no"})
    envelope = srv.posts[0].body.decode()
    assert "UsernameToken" in envelope and "<wsse:Username>bob</wsse:Username>" in envelope
    err = caught.value
    assert PASSWORD not in f"{err} {err!r} {err.__cause__}"
    assert PASSWORD not in caplog.text


def test_soap_can_send_credentials_as_http_basic_instead(tmp_path):
    with SoapTestServer("A") as srv:
        adapter = SoapAdapter({"wsdl": srv.wsdl, "credentials": "ledger", "auth": "basic"},
                              env=credentials_file(tmp_path))
        adapter.start()
        attempt(adapter)
        adapter.invoke("echo", {"text": "x"})
    assert srv.posts[0].headers["Authorization"].startswith("Basic ")
    assert "UsernameToken" not in srv.posts[0].body.decode()


def echo_authorization(handler, record) -> None:
    """A 401 page that echoes the request's Authorization header, as some servers do."""
    echoed = f"denied: Authorization: {record.headers.get('Authorization')}; pw={PASSWORD}"
    respond(401, echoed)(handler, record)


def test_a_401_page_echoing_the_basic_header_leaks_no_form_of_the_secret():
    with HttpTestServer({"/echo": echo_authorization}) as srv:
        adapter = HttpAdapter({"url": srv.url, "credentials": "payments-eu"}, item_name="Pay",
                              env=ENV)
        adapter.start()
        attempt(adapter)
        with pytest.raises(HttpStatusError) as caught:
            adapter.send("GET", "/echo")
        adapter.end_attempt()
        sent = srv.requests[0].headers["Authorization"]
    basic = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    assert sent == f"Basic {basic}"  # the server did get the credentials
    text = str(caught.value)
    assert "denied" in text and "***" in text
    for secret in (PASSWORD, basic, basic.rstrip("="), basic[:-4]):
        assert secret not in text
