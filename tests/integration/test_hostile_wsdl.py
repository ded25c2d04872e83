"""SoapAdapter against hostile WSDLs (issue 12, item 2): imports of local files, devices and
other hosts, endless documents, redirects to another host, and service addresses that would
draw the item's credentials away from the configured hosts. Real loopback servers only."""
from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from adapters import soap_transport
from adapters.base import AttemptContext
from adapters.soap import SoapAdapter
from engine.client import send_message, wait_for
from engine.config.production import parse_production
from engine.errors import AdapterNotReady, ConfigurationError, DocumentRefused
from engine.runtime.daemon import Daemon
from engine.store import queries
from engine.store.sql import SqlStore
from tests.servers import ECHO_WSDL, HttpTestServer, SoapTestServer, respond, soap_reply, soap_xml

TIMEOUT = 2.0  # seconds: response timeout; generous, no test here asserts a time
READ_BUDGET = 1024 * 1024  # bytes the process may read while refusing a WSDL
MEMORY_HEADROOM = 512 * 1024 * 1024  # bytes of address space a refused load may add
USER, PASSWORD = "clerk", "s3cret-pw"
ENV = {"ENCORE_CREDENTIALS_LEDGER_USERNAME": USER, "ENCORE_CREDENTIALS_LEDGER_PASSWORD": PASSWORD}

SCHEMA_NS = "urn:encore:extra"
SCHEMA = """<?xml version="1.0" encoding="UTF-8"?>
<xsd:schema xmlns:xsd="http://www.w3.org/2001/XMLSchema" targetNamespace="urn:encore:extra">
  <xsd:element name="note" type="xsd:string"/>
</xsd:schema>
"""



def echo_wsdl(address: str, *, xsd_import: str | list[str] = (),
              wsdl_import: str | None = None) -> str:
    """The echo WSDL calling ``address``, importing schemas from the given locations (the
    n-th ``xsd_import`` with the namespace of ``schema(n)``)."""
    xsd_imports = [xsd_import] if isinstance(xsd_import, str) else list(xsd_import)
    return ECHO_WSDL.format(
        address=address,
        xsd_import="".join(f'<xsd:import namespace="{SCHEMA_NS}{n or ""}" '
                           f'schemaLocation="{location}"/>'
                           for n, location in enumerate(xsd_imports)),
        wsdl_import=(f'<import namespace="{SCHEMA_NS}" location="{wsdl_import}"/>'
                     if wsdl_import else ""))


def schema(n: int = 0, *, padding: int = 0) -> str:
    """A schema in the namespace the n-th import names, ``padding`` bytes longer."""
    return SCHEMA.replace(SCHEMA_NS, f"{SCHEMA_NS}{n or ''}") + " " * padding


def xml(body: str) -> Any:
    return respond(200, body, content_type="text/xml; charset=utf-8")


def endless(handler: Any, record: Any) -> None:
    """A 200 whose body never ends (no Content-Length; closed only by the client)."""
    handler.close_connection = True
    try:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/xml")
        handler.end_headers()
        handler.wfile.write(b"<definitions>")
        while not handler.server.owner.stopping.is_set():
            handler.wfile.write(b"<x/>" * 4096)
    except OSError:
        return  # the client gave up, as it should


def bytes_read() -> int:
    """Bytes this process has read through read() calls so far (files, devices, sockets)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


@contextmanager
def address_space_ceiling(extra: int) -> Iterator[None]:
    """At most ``extra`` more bytes of address space: a regression that reads a device ends
    in a MemoryError here instead of exhausting the shared machine."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    status = Path("/proc/self/status").read_text()
    size = next(int(line.split()[1]) * 1024 for line in status.splitlines()
                if line.startswith("VmSize:"))
    ceiling = size + extra if hard == resource.RLIM_INFINITY else min(size + extra, hard)
    resource.setrlimit(resource.RLIMIT_AS, (ceiling, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def adapter_for(wsdl: str, **settings: object) -> SoapAdapter:
    return SoapAdapter({"wsdl": wsdl, "response_timeout": TIMEOUT, **settings},
                       item_name="Ledger", env=ENV)


def refusal(wsdl: str, **settings: object) -> str:
    """The text of the AdapterNotReady that starting an adapter on ``wsdl`` raises."""
    with pytest.raises(AdapterNotReady) as caught:
        adapter_for(wsdl, **settings).start()
    return str(caught.value)


def call_echo(adapter: SoapAdapter) -> object:
    adapter.begin_attempt(AttemptContext(deadline=time.monotonic() + TIMEOUT,
                                         idempotency_key="m-1"))
    try:
        return adapter.invoke("echo", {"text": "x"})
    finally:
        adapter.end_attempt()


@pytest.fixture
def wsdl_server() -> Iterator[HttpTestServer]:
    """Serves ``/soap?wsdl`` (set by the test) and answers echo calls at ``/soap``."""
    with HttpTestServer({"POST /soap": soap_xml(200, soap_reply("ok"))}) as srv:
        yield srv


@pytest.fixture
def other_server() -> Iterator[HttpTestServer]:
    """Another loopback server (another port is another host): a schema and echo calls."""
    with HttpTestServer({"GET /types.xsd": xml(SCHEMA),
                         "POST /soap": soap_xml(200, soap_reply("other"))}) as srv:
        yield srv


@pytest.fixture
def local_wsdl(tmp_path: Path) -> Iterator[Path]:
    """A directory for a local WSDL, with a schema beside it and a secret one level up."""
    folder = tmp_path / "wsdl"
    folder.mkdir()
    (folder / "types.xsd").write_text(SCHEMA)
    (tmp_path / "secret.xsd").write_text(SCHEMA)
    yield folder


# -- local files and devices ------------------------------------------------------------------

@pytest.mark.parametrize("where, location", [
    ("http", "file:///dev/zero"),  # the attacker's WSDL, served over http
    ("local", "file:///dev/zero"),  # a local WSDL naming the device by URL
    ("local", "/dev/zero"),  # ... and by path
])
@pytest.mark.parametrize("kind", ["xsd_import", "wsdl_import"])
def test_an_import_of_dev_zero_is_refused_without_reading_it(where, location, kind, wsdl_server,
                                                             local_wsdl):
    wsdl_text = echo_wsdl(wsdl_server.url + "/soap", **{kind: location})
    if where == "http":
        wsdl_server.routes["GET /soap"] = xml(wsdl_text)
        wsdl = wsdl_server.url + "/soap?wsdl"
    else:
        (local_wsdl / "service.wsdl").write_text(wsdl_text)
        wsdl = str(local_wsdl / "service.wsdl")
    before = bytes_read()
    with address_space_ceiling(MEMORY_HEADROOM):
        with pytest.raises(AdapterNotReady) as caught:  # the item lives; messages stay queued
            adapter_for(wsdl).start()
    assert bytes_read() - before < READ_BUDGET  # /dev/zero was never read
    assert f"cannot load the WSDL {wsdl}: {location} refused" in str(caught.value)
    refused = caught.value.__cause__
    assert isinstance(refused, DocumentRefused) and refused.url == location


@pytest.mark.parametrize("location, reason", [
    ("file:///etc/passwd", "never local files"),  # a local file by URL
    ("file://localhost/etc/passwd", "never local files"),  # ... with the localhost form
    ("ftp://127.0.0.1/types.xsd", "scheme 'ftp' is not allowed"),  # another scheme
    ("data:text/xml;base64,PHgvPg==", "scheme 'data' is not allowed"),  # an inline document
])
def test_an_http_wsdl_may_not_import_local_files_or_other_schemes(location, reason, wsdl_server):
    wsdl_server.routes["GET /soap"] = xml(echo_wsdl(wsdl_server.url + "/soap",
                                                    xsd_import=location))
    text = refusal(wsdl_server.url + "/soap?wsdl")
    assert f"{location} refused" in text and reason in text
    assert "root:" not in text


@pytest.mark.parametrize("location, reason", [
    ("file:///etc/passwd", "outside the WSDL's directory"),  # another local file
    ("../secret.xsd", "outside the WSDL's directory"),  # a sibling of the WSDL's directory
    ("/proc/self/environ", "never read"),  # a special file that stat calls regular
    ("link.xsd", "/etc/passwd is outside"),  # a symbolic link out of the directory
    ("pipe.xsd", "not a regular file"),  # a FIFO: opening it would block
])
def test_a_local_wsdl_may_import_only_regular_files_in_its_directory(location, reason,
                                                                       local_wsdl):
    (local_wsdl / "link.xsd").symlink_to("/etc/passwd")
    os.mkfifo(local_wsdl / "pipe.xsd")
    (local_wsdl / "service.wsdl").write_text(echo_wsdl("http://127.0.0.1:9/soap",
                                                       xsd_import=location))
    text = refusal(str(local_wsdl / "service.wsdl"))
    assert reason in text and "root:" not in text


def test_a_local_wsdl_may_not_import_over_http(local_wsdl, other_server):
    location = other_server.url + "/types.xsd"
    (local_wsdl / "service.wsdl").write_text(echo_wsdl(other_server.url + "/soap",
                                                       xsd_import=location))
    text = refusal(str(local_wsdl / "service.wsdl"))
    assert f"{location} refused: a local WSDL may import only files under its directory" in text
    assert other_server.requests == []


@pytest.mark.parametrize("form", ["path", "file URL"])
def test_a_local_wsdl_with_a_schema_beside_it_still_loads(form, local_wsdl, other_server):
    (local_wsdl / "service.wsdl").write_text(echo_wsdl(other_server.url + "/soap",
                                                       xsd_import="types.xsd"))
    path = local_wsdl / "service.wsdl"
    adapter = adapter_for(str(path) if form == "path" else path.as_uri())
    adapter.start()
    assert adapter.operations == ("echo",)
    assert call_echo(adapter) == "other"


# -- other hosts, size --------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["xsd_import", "wsdl_import"])
def test_an_import_from_another_port_is_refused_with_its_url_and_not_called_a_dtd(
        kind, wsdl_server, other_server):
    location = other_server.url + "/types.xsd"
    wsdl_server.routes["GET /soap"] = xml(echo_wsdl(wsdl_server.url + "/soap",
                                                    **{kind: location}))
    text = refusal(wsdl_server.url + "/soap?wsdl")
    assert f"{location} refused: an import from another host than the WSDL's" in text
    assert "DTD" not in text and "entities" not in text
    assert other_server.requests == []


def test_an_import_from_the_wsdl_s_own_host_loads(wsdl_server):
    wsdl_server.routes["GET /types.xsd"] = xml(SCHEMA)
    wsdl_server.routes["GET /soap"] = xml(echo_wsdl(wsdl_server.url + "/soap",
                                                    xsd_import=wsdl_server.url + "/types.xsd"))
    adapter = adapter_for(wsdl_server.url + "/soap?wsdl")
    adapter.start()
    assert call_echo(adapter) == "ok"


@pytest.mark.parametrize("route", ["GET /soap", "GET /types.xsd"])  # the WSDL, an import
@pytest.mark.parametrize("body", [
    "declared",  # Content-Length over the limit: refused before reading
    "endless",  # no length, never ends: refused at the limit
])
def test_a_document_over_max_response_bytes_is_refused(route, body, wsdl_server):
    wsdl_server.routes["GET /soap"] = xml(echo_wsdl(wsdl_server.url + "/soap",
                                                    xsd_import=wsdl_server.url + "/types.xsd"))
    wsdl_server.routes["GET /types.xsd"] = xml(SCHEMA)
    wsdl_server.routes[route] = endless if body == "endless" else xml(SCHEMA + " " * 60_000)
    text = refusal(wsdl_server.url + "/soap?wsdl", max_response_bytes=50_000)
    assert f"{route.split()[1]}" in text and "larger than max_response_bytes 50000" in text


def test_all_documents_of_one_wsdl_together_are_size_limited_too(wsdl_server, monkeypatch):
    monkeypatch.setattr(soap_transport, "WSDL_TOTAL_BYTES", 100_000)
    imports = [f"{wsdl_server.url}/{n}.xsd" for n in range(4)]
    for n in range(4):  # each under max_response_bytes, all four over the total
        wsdl_server.routes[f"GET /{n}.xsd"] = xml(schema(n, padding=30_000))
    wsdl_server.routes["GET /soap"] = xml(echo_wsdl(wsdl_server.url + "/soap",
                                                    xsd_import=imports))
    text = refusal(wsdl_server.url + "/soap?wsdl", max_response_bytes=50_000)
    assert f"{imports[3]} refused: the WSDL and its imports together exceed 100000 bytes" in text


def test_a_wsdl_setting_with_another_scheme_is_refused_at_load_time():
    with pytest.raises(ConfigurationError, match="'wsdl'.*'ftp://x/s.wsdl' is not allowed"):
        SoapAdapter({"wsdl": "ftp://x/s.wsdl"}, item_name="Ledger")


def test_a_service_address_that_is_not_http_is_refused(wsdl_server):
    wsdl_server.routes["GET /soap"] = xml(echo_wsdl("file:///dev/zero"))
    assert "service address 'file:///dev/zero' is not an http(s) URL" in refusal(
        wsdl_server.url + "/soap?wsdl")


# -- redirects and credentials ---------------------------------------------------------------

def authorized(server: HttpTestServer | SoapTestServer) -> list[str]:
    """The requests (method and path) that reached ``server`` with an Authorization header."""
    return [f"{r.method} {r.path}" for r in server.requests if "Authorization" in r.headers]


def test_a_wsdl_redirected_to_another_port_is_refused_and_no_credentials_reach_it():
    with SoapTestServer("B") as target, HttpTestServer() as first:
        first.routes["GET /soap"] = respond(302, headers={"Location": target.wsdl})
        text = refusal(first.url + "/soap?wsdl", credentials="ledger", auth="basic")
    assert f"it redirects to {target.wsdl}, off the WSDL's own scheme, host and port" in text
    assert authorized(first) == ["GET /soap?wsdl"]  # credentials were in play
    assert authorized(target) == [] and target.posts == []


def test_a_redirect_on_the_wsdl_s_own_host_is_followed_with_credentials(wsdl_server):
    wsdl_server.routes["GET /old"] = respond(301, headers={"Location": "/soap?wsdl"})
    wsdl_server.routes["GET /soap"] = xml(echo_wsdl(wsdl_server.url + "/soap"))
    adapter = adapter_for(wsdl_server.url + "/old", credentials="ledger", auth="basic")
    assert adapter.start() == []
    assert call_echo(adapter) == "ok"
    assert authorized(wsdl_server) == ["GET /old", "GET /soap?wsdl", "POST /soap"]


@pytest.mark.parametrize("auth", ["basic", "wsse"])
def test_a_service_address_on_another_host_is_called_without_credentials(auth, wsdl_server,
                                                                         other_server):
    wsdl_server.routes["GET /soap"] = xml(echo_wsdl(other_server.url + "/soap"))
    adapter = adapter_for(wsdl_server.url + "/soap?wsdl", credentials="ledger", auth=auth)
    warnings = adapter.start()
    assert call_echo(adapter) == "other"
    assert any(other_server.url + "/soap" in w and "without credentials" in w
               for w in warnings)
    post = other_server.requests[-1]
    assert "Authorization" not in post.headers
    assert PASSWORD.encode() not in post.body and b"UsernameToken" not in post.body
    if auth == "basic":
        assert authorized(wsdl_server) == ["GET /soap?wsdl"]  # the WSDL's own host has them


@pytest.mark.parametrize("auth", ["basic", "wsse"])
def test_a_host_listed_in_servers_gets_the_credentials(auth, wsdl_server, other_server):
    wsdl_server.routes["GET /soap"] = xml(echo_wsdl("http://203.0.113.9/soap"))
    adapter = adapter_for(wsdl_server.url + "/soap?wsdl", credentials="ledger", auth=auth,
                          servers=[other_server.url])
    assert adapter.start() == []
    assert call_echo(adapter) == "other"
    post = other_server.requests[-1]
    if auth == "basic":
        assert post.headers["Authorization"].startswith("Basic ")
    else:
        assert b"UsernameToken" in post.body and PASSWORD.encode() in post.body


# -- through the daemon -------------------------------------------------------------------------

def test_a_daemon_with_a_dev_zero_wsdl_stays_up_and_its_other_items_deliver(
        tmp_path: Path, wsdl_server: HttpTestServer) -> None:
    wsdl_server.routes["GET /soap"] = xml(echo_wsdl(wsdl_server.url + "/soap",
                                                    xsd_import="file:///dev/zero"))
    url = f"sqlite:///{tmp_path / 'e.db'}"
    production = parse_production(
        f'[production]\nname = "P"\ndatabase = "{url}"\npoll_interval = 0.05\n'
        f'[[items]]\nname = "Hostile"\nclass = "operations.soap:SoapOperation"\n'
        f'[items.settings]\nwsdl = "{wsdl_server.url}/soap?wsdl"\n'
        f'[[items]]\nname = "Plain"\nclass = "operations.http:HttpOperation"\n'
        f'[items.settings]\nurl = "{wsdl_server.url}"\n', env={})
    store = SqlStore(url)
    store.upgrade()
    daemon = Daemon(production, store=store, env={})
    before = bytes_read()
    with address_space_ceiling(MEMORY_HEADROOM):
        daemon.start()
        try:
            hostile = send_message(store, production, "Hostile",
                                   {"operation": "echo", "args": {"text": "x"}})
            plain = send_message(store, production, "Plain",
                                 {"method": "POST", "path": "/soap", "body": "<x/>"})
            assert wait_for(store, plain, timeout=20) is not None  # the other item delivers
            assert store.get_message(hostile).status == "Queued"  # kept, not lost
        finally:
            daemon.stop()
    assert bytes_read() - before < READ_BUDGET  # /dev/zero was never read
    errors = [e["text"] for e in queries.events(store, queries.EventFilter(type="Error",
                                                                           item="Hostile"))]
    assert len(errors) == 1 and "file:///dev/zero refused" in errors[0]
    store.dispose()
