"""HttpAdapter and redirects (docs/settings.md), against real loopback servers: two ports are two
hosts. Not followed by default; followed on the server's own origin or to a listed host;
credentials never reach a host that is not a configured server."""
from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from adapters.base import AttemptContext
from adapters.http import HttpAdapter
from engine.config.production import parse_production
from engine.errors import ConfigurationError, Delivery, HttpStatusError
from tests.servers import HttpTestServer, respond

TIMEOUT = 2.0  # seconds: the response timeout of every attempt here
PASSWORD = "r3direct-Pa55-not-for-strangers"
ENV = {"ENCORE_CREDENTIALS_SHOP_USERNAME": "alice",
       "ENCORE_CREDENTIALS_SHOP_PASSWORD": PASSWORD}


def moved(location: str, status: int = 302, **headers: str) -> object:
    return respond(status, "moved", headers={"Location": location, **headers})


def started(settings: dict) -> HttpAdapter:
    adapter = HttpAdapter(settings, item_name="Shop", env=ENV)
    adapter.start()
    adapter.begin_attempt(AttemptContext(deadline=time.monotonic() + TIMEOUT,
                                         idempotency_key="k"))
    return adapter


@pytest.fixture
def other() -> Iterator[HttpTestServer]:
    """Host B: somewhere a redirect may point to."""
    with HttpTestServer({"/landing": respond(200, "on B")}) as srv:
        yield srv


# -- not followed ---------------------------------------------------------------------------

def test_a_redirect_is_not_followed_by_default_and_ends_as_http_status_naming_location():
    with HttpTestServer({"/old": moved("/new"), "/new": respond(200, "new")}) as srv:
        adapter = started({"url": srv.url})
        with pytest.raises(HttpStatusError) as caught:
            adapter.send("GET", "/old")
    err = caught.value
    assert (err.outcome, err.status_code, err.code) == ("http_status", 302, "302")
    assert not err.retryable and err.delivery is Delivery.ANSWERED
    assert "redirects to /new" in str(err) and "follow_redirects = false" in str(err)
    assert [r.path for r in srv.requests] == ["/old"]


def test_a_redirect_status_listed_in_retry_on_status_asks_for_a_retry():
    with HttpTestServer({"/old": moved("/new", 307)}) as srv:
        adapter = started({"url": srv.url, "retry_on_status": [307, 503]})
        with pytest.raises(HttpStatusError) as caught:
            adapter.send("GET", "/old")
    assert caught.value.retryable and caught.value.status_code == 307


def test_304_not_modified_is_an_answer_not_a_redirect():
    with HttpTestServer({"/doc": respond(304)}) as srv:
        adapter = started({"url": srv.url})
        assert adapter.send("GET", "/doc").status == 304


# -- followed on the same origin ------------------------------------------------------------

def test_a_redirect_on_the_same_host_is_followed_when_asked():
    with HttpTestServer({"/old": moved("/new", 301), "/new": respond(200, "new")}) as srv:
        adapter = started({"url": srv.url, "follow_redirects": True})
        reply = adapter.send("GET", "/old")
        assert adapter.end_attempt() == srv.url  # the attempt's server: the configured one
    assert (reply.status, reply.text) == (200, "new")
    assert [r.path for r in srv.requests] == ["/old", "/new"]


@pytest.mark.parametrize(("status", "method", "body"), [
    (307, "POST", b'{"n": 1}'),  # 307 repeats the request as it was
    (308, "PUT", b'{"n": 1}'),  # so does 308
    (303, "GET", b""),  # 303: continue with a GET, without the body
    (302, "GET", b""),  # 302 answering a POST: a GET, as browsers and requests do
])
def test_the_method_and_body_after_a_redirect(status, method, body):
    first = "PUT" if status == 308 else "POST"
    with HttpTestServer({f"{first} /old": moved("/new", status),
                         "/new": respond(200, "new")}) as srv:
        adapter = started({"url": srv.url, "follow_redirects": True})
        adapter.send(first, "/old", json={"n": 1})
    hop = srv.requests[1]
    assert (hop.method, hop.path, hop.body) == (method, "/new", body)
    assert ("Content-Type" in hop.headers) is bool(body)


def test_more_than_max_redirects_ends_the_attempt():
    with HttpTestServer({"/loop": moved("/loop")}) as srv:
        adapter = started({"url": srv.url, "follow_redirects": True, "max_redirects": 3})
        with pytest.raises(HttpStatusError, match="more than max_redirects = 3") as caught:
            adapter.send("GET", "/loop")
    assert caught.value.status_code == 302 and len(srv.requests) == 4  # the first + 3 hops


# -- other hosts ----------------------------------------------------------------------------

def test_a_redirect_to_another_host_is_refused_unless_listed(other):
    with HttpTestServer({"/old": moved(other.url + "/landing")}) as srv:
        adapter = started({"url": srv.url, "follow_redirects": True})
        with pytest.raises(HttpStatusError) as caught:
            adapter.send("GET", "/old")
    assert "not listed in redirect_hosts" in str(caught.value)
    assert other.url + "/landing" in str(caught.value) and not caught.value.retryable
    assert other.requests == []  # a different port is a different host


@pytest.mark.parametrize(("settings", "headers"), [
    ({"credentials": "shop"}, {}),  # the item's Basic credentials
    ({}, {"Authorization": "Bearer user-token"}),  # an Authorization header in the request
])
def test_a_listed_host_is_followed_without_the_credentials(other, settings, headers):
    location = other.url + "/landing"
    with HttpTestServer({"/old": moved(location, **{"Set-Cookie": "session=abc"})}) as srv:
        adapter = started({"url": srv.url, "follow_redirects": True, **settings,
                           "redirect_hosts": [f"127.0.0.1:{other.port}"]})
        reply = adapter.send("GET", "/old", headers=headers)
    assert reply.text == "on B"
    assert "Authorization" in srv.requests[0].headers  # the configured server gets them
    (landed,) = other.requests
    assert "Authorization" not in landed.headers and "Cookie" not in landed.headers
    assert PASSWORD not in repr(landed)


def test_the_configured_server_gets_its_credentials_on_every_hop():
    with HttpTestServer({"/old": moved("/new"), "/new": respond(200, "new")}) as srv:
        adapter = started({"url": srv.url, "follow_redirects": True, "credentials": "shop"})
        adapter.send("GET", "/old")
    assert all(r.headers.get("Authorization", "").startswith("Basic ") for r in srv.requests)


def test_a_host_listed_without_a_port_allows_any_port(other):
    with HttpTestServer({"/old": moved(other.url + "/landing")}) as srv:
        adapter = started({"url": srv.url, "follow_redirects": True,
                           "redirect_hosts": ["127.0.0.1"]})
        assert adapter.send("GET", "/old").text == "on B"


def test_a_listed_host_on_another_port_is_still_refused(other):
    with HttpTestServer({"/old": moved(other.url + "/landing")}) as srv:
        adapter = started({"url": srv.url, "follow_redirects": True,
                           "redirect_hosts": [f"127.0.0.1:{other.port + 1}"]})
        with pytest.raises(HttpStatusError, match="not listed"):
            adapter.send("GET", "/old")
    assert other.requests == []


# -- settings -------------------------------------------------------------------------------

@pytest.mark.parametrize(("settings", "key", "allowed"), [
    ({"follow_redirects": "yes"}, "follow_redirects", "true/false"),  # not a boolean
    ({"max_redirects": -1}, "max_redirects", "≥ 0"),  # negative
    ({"max_redirects": 2.5}, "max_redirects", "integer"),  # not a whole number
    ({"redirect_hosts": "a.example"}, "redirect_hosts", "list"),  # not a list
    ({"redirect_hosts": ["https://a.example"]}, "redirect_hosts", "no scheme"),  # a URL
    ({"redirect_hosts": ["a.example:http"]}, "redirect_hosts", "bad port"),  # a bad port
    ({"MaxRedirects": True}, "max_redirects", "integer"),  # CamelCase alias, a boolean
])
def test_a_wrong_redirect_setting_is_refused_naming_the_item_and_the_key(settings, key,
                                                                         allowed):
    with pytest.raises(ConfigurationError) as caught:
        HttpAdapter({"url": "http://x", **settings}, item_name="Shop")
    (spelled,) = settings  # named as the file spells it (Ensemble's MaxRedirects too)
    assert f"item 'Shop', setting '{spelled}'" in str(caught.value)
    assert spelled.lower().replace("_", "") == key.replace("_", "")
    assert allowed in str(caught.value)


def test_a_wrong_redirect_setting_is_refused_when_the_production_file_is_loaded():
    text = ('[production]\nname = "P"\n[[items]]\nname = "Shop"\n'
            'class = "operations.http:HttpOperation"\n[items.settings]\n'
            'url = "http://x"\nfollow_redirects = "yes"\n')
    with pytest.raises(ConfigurationError, match="item 'Shop', setting 'follow_redirects'"):
        parse_production(text, env={})
