"""A router driven as a user would: ``encore run`` as a subprocess, ``encore send --wait``
to the router, ``encore trace`` of the session — CLI → Router → operation."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.acceptance.daemon import RunningDaemon, encore
from tests.servers import HttpTestServer, respond

pytestmark = pytest.mark.cli_in_process  # the daemons are processes; the commands need not be

PRODUCTION = """
[production]
name = "RouterCli"
database = "sqlite:///{db}"
poll_interval = 0.05

[[items]]
name = "Router"
class = "engine.router:Router"
pool_size = 2
[items.settings]
rules = [{{field = "json.country", equals = "PT", target = "PaymentsPT"}}]
default_target = "Payments"
timeout = 10

[[items]]
name = "PaymentsPT"
class = "operations.http:HttpOperation"
[items.settings]
url = "{pt}"

[[items]]
name = "Payments"
class = "operations.http:HttpOperation"
[items.settings]
url = "{other}"
"""


def test_send_to_a_router_answers_with_the_operation_response_and_trace_shows_three_hops(
        tmp_path: Path) -> None:
    with HttpTestServer({"POST /pay": respond(200, "paid in PT")}) as pt, \
            HttpTestServer({"POST /pay": respond(200, "paid elsewhere")}) as other:
        (tmp_path / "production.toml").write_text(
            PRODUCTION.format(db=tmp_path / "e.db", pt=pt.url, other=other.url))
        encore("db", "upgrade", cwd=tmp_path)
        with RunningDaemon(tmp_path) as daemon:
            sent = {}
            for country in ("PT", "ES"):
                body = json.dumps({"method": "POST", "path": "/pay", "json": {"country": country}})
                out = encore("send", "Router", "--body", body, "--wait", "20", "--json",
                             cwd=tmp_path).stdout
                sent[country] = json.loads(out)
            assert daemon.terminate() == 0
    assert sent["PT"]["status"] == "Completed"
    assert sent["PT"]["response"]["body"] == "paid in PT"
    assert sent["ES"]["response"]["body"] == "paid elsewhere"
    assert [json.loads(r.body) for r in pt.requests] == [{"country": "PT"}]
    assert [json.loads(r.body) for r in other.requests] == [{"country": "ES"}]
    lines = encore("trace", str(sent["PT"]["id"]), cwd=tmp_path).stdout.splitlines()
    assert lines[0] == f"session {sent['PT']['id']}: cli -> Router, Router -> PaymentsPT"
    created = [line.split("created")[0].split(") ", 1)[1].strip()
               for line in lines if line.endswith("created")]
    assert created == ["cli -> Router", "Router -> PaymentsPT", "PaymentsPT -> Router",
                       "Router -> cli"]
    assert any(f"sent to {pt.url}" in line for line in lines)
