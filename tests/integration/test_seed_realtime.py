"""The seed timeline (docs/retries.md) scaled ÷2.5, in real time, through the daemon against a
real SOAP server — on SQLite and PostgreSQL. Exact times belong to the virtual-clock tests;
here we assert the order and generous bounds."""
from __future__ import annotations

from engine.client import send_message, wait_for
from engine.config.production import parse_production
from engine.runtime.daemon import Daemon
from engine.store import queries
from engine.store.sql import SqlStore
from tests.servers import SoapTestServer

# ÷2.5 rather than ÷10: the fourth attempt happens only if the third ends before the failure
# timeout, and the slack (retry interval − response timeout, 1.2 s here) must outlast a
# loaded machine's late wake-ups and slow commits (÷5 left 0.6 s, which a CI run at load 6 on
# PostgreSQL once used up: its third attempt began 0.75 s late).
SCALE = 2.5
SERVER_DELAY = 8 / SCALE  # the seed's 8 s
RESPONSE_TIMEOUT = 7 / SCALE
RETRY_INTERVAL = 10 / SCALE
FAILURE_TIMEOUT = 30 / SCALE
PRODUCTION = f"""
[production]
name = "SeedRealTime"
poll_interval = 0.05
[[items]]
name = "Seed"
class = "operations.soap:SoapOperation"
[items.settings]
wsdl = "{{wsdl}}"
response_timeout = {RESPONSE_TIMEOUT}
retry_interval = {RETRY_INTERVAL}
failure_timeout = {FAILURE_TIMEOUT}
"""


def test_the_seed_timeline_scaled_down_holds_in_real_time(store: SqlStore) -> None:
    with SoapTestServer(delay=SERVER_DELAY) as server:
        production = parse_production(PRODUCTION.format(wsdl=server.wsdl), env={})
        daemon = Daemon(production, store=store, env={})
        daemon.start()
        try:
            mid = send_message(store, production, "Seed",
                               {"operation": "echo", "args": {"text": "hi"}})
            row = wait_for(store, mid, timeout=30)
        finally:
            daemon.stop()
        posts = len(server.posts)
    assert row is not None and row.status == "Error"
    attempts = store.attempts(mid)
    starts = [(a.started_at - attempts[0].started_at).total_seconds() for a in attempts]
    assert posts == 4 and len(attempts) == 4
    assert [a.outcome for a in attempts] == ["timeout"] * 4
    # Order and generous bounds only (a loaded machine wakes threads late): a retry interval
    # apart — 0, 4, 8, 12 s — never early; each attempt cut at the 2.8 s deadline (its
    # outcome is a timeout, not the 3.2 s answer), never before it.
    assert starts == sorted(starts)
    for k, start in enumerate(starts):
        assert RETRY_INTERVAL * k - 0.05 <= start <= RETRY_INTERVAL * k + 1.15, starts
    for a in attempts:
        assert (a.ended_at - a.started_at).total_seconds() >= RESPONSE_TIMEOUT - 0.05
    gave_up = (row.time_completed - attempts[0].started_at).total_seconds()
    assert FAILURE_TIMEOUT + RESPONSE_TIMEOUT - 0.05 <= gave_up <= \
        FAILURE_TIMEOUT + RESPONSE_TIMEOUT + 2.6
    errors = queries.events(store, queries.EventFilter(type="Error", message_id=mid))
    assert len(errors) == 2
    assert f"FailureTimeout of {FAILURE_TIMEOUT:g} seconds exceeded" in errors[1]["text"]
    assert not row.retry_needed and row.attempts == 4
