"""With tracing off, Encore runs exactly as before (docs/tracing.md): a whole send → daemon →
HTTP and SOAP delivery runs in a fresh interpreter without importing ``opentelemetry``, and
no request carries a ``traceparent``. A subprocess, because this test process imports
OpenTelemetry for the other tracing tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60  # seconds for the whole subprocess

SCRIPT = r"""
import json, sys
from engine.cli.commands import main  # the command line's imports too
from engine.client import send_message, wait_for
from engine.runtime.daemon import Daemon
from engine.config.production import parse_production
from engine.store.sql import SqlStore
from tests.servers import HttpTestServer, SoapTestServer, respond

with HttpTestServer({"/orders": respond(200, "ok")}) as http, SoapTestServer("S") as soap:
    text = f'''[production]
poll_interval = 0.05
database = "sqlite:///{sys.argv[1]}"
[[items]]
name = "Orders"
class = "operations.http:HttpOperation"
[items.settings]
url = "{http.url}"
[[items]]
name = "Ledger"
class = "operations.soap:SoapOperation"
[items.settings]
wsdl = "{soap.wsdl}"
'''
    production = parse_production(text, env={})
    store = SqlStore(production.database)
    store.upgrade()
    daemon = Daemon(production, store=store, env={})
    daemon.start()
    try:
        ids = [send_message(store, production, "Orders", {"method": "POST", "path": "/orders"}),
               send_message(store, production, "Ledger", {"operation": "echo",
                                                          "args": {"text": "hi"}})]
        rows = [wait_for(store, i, timeout=20) for i in ids]
    finally:
        daemon.stop()
    print(json.dumps({
        "statuses": [r.status if r else None for r in rows],
        "contexts": [r.trace_context if r else None for r in rows],
        "headers": [sorted(k.lower() for k in r.headers) for r in http.requests + soap.posts],
        "otel_modules": sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"),
    }))
"""


def test_with_tracing_off_opentelemetry_is_never_imported(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "encore.db")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT,
                          check=False)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["statuses"] == ["Completed", "Completed"]
    assert seen["contexts"] == [None, None]
    assert len(seen["headers"]) == 2
    assert all("traceparent" not in names for names in seen["headers"])
    assert seen["otel_modules"] == []
