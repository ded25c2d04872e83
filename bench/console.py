"""The operator's console on a large ``message_header`` (not part of the test suite): the
front page's diagram fragment, an item page and its API, and the queue page, rendered by the
portal itself (Starlette's TestClient, logged in) over N messages (default 1,000,000, filled
as ``bench/viewer.py`` fills them: five items, 3 % of them queued) and a full day of rollup
rows per item (``item_minute``). The pages read the rollup and the queue index, never the
whole ``message_header``, so they should cost about what they cost on an empty database.
Prints the median of ``--repeat`` runs in milliseconds, with the load average.

    python bench/console.py                      # SQLite file in /tmp, 1,000,000 messages
    python bench/console.py --reuse              # keep the filled database of a last run
    python bench/console.py --pg-url postgresql+psycopg://postgres@127.0.0.1/encore_bench
"""
from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import delete, insert
from starlette.testclient import TestClient

from bench.viewer import ITEMS, _filled, _wipe, fill, measure
from engine.clock import utcnow
from engine.config.production import parse_production
from engine.portal import create_app
from engine.serving.auth import hash_password
from engine.store import accounts, rollup
from engine.store.models import item_minute, portal_user
from engine.store.sql import SqlStore

PASSWORD = "a bench password"
ITEM_TOML = """
[[items]]
name = "{name}"
class = "operations.http:HttpOperation"
[items.settings]
url = "http://127.0.0.1:9"
"""


def production_text(url: str) -> str:
    head = f'[production]\nname = "Bench"\ndatabase = "{url}"\n'
    return head + "".join(ITEM_TOML.format(name=name) for name in ITEMS)


def fill_rollup(store: SqlStore) -> None:
    """A day of per-minute rows for every item, as one daemon writes them."""
    start = rollup.minute_of(store.db_now()) - timedelta(hours=24)
    rows = [{"config_name": name, "minute": start + timedelta(minutes=m), "daemon_id": "d1",
             "ok": 40, "timeout": 1, "completed": 40, "retries": 1, "attempt_ms_total": 900.0,
             "histogram": "[0,0,0,30,9,2]"} for name in ITEMS for m in range(24 * 60)]
    with store.engine.begin() as conn:
        conn.execute(delete(item_minute))
        conn.execute(insert(item_minute), rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--sqlite", default="/tmp/encore-bench-console.db")
    parser.add_argument("--pg-url", default=None, help="measure PostgreSQL instead (wiped)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--reuse", action="store_true",
                        help="keep the database if it already holds --count messages")
    args = parser.parse_args()
    url = args.pg_url or f"sqlite:///{args.sqlite}"
    store = SqlStore(url)
    if not _filled(store, args.count, args.reuse):
        _wipe(store, args)
        store = SqlStore(url)
        store.upgrade()
        fill(store, args.count)
    fill_rollup(store)
    with store.engine.begin() as conn:
        conn.execute(delete(portal_user))
    accounts.add_user(store, "bench", "viewer", hash_password(PASSWORD), now=utcnow())
    production = parse_production(production_text(url), env={})
    app = create_app(store, production, secret="bench", env={})
    load = os.getloadavg()
    with TestClient(app) as client:
        login = client.get("/login").text
        token = login.split('name="csrf_token" value="')[1].split('"')[0]
        client.post("/login", data={"username": "bench", "password": PASSWORD,
                                    "csrf_token": token, "next": "/"})
        pages = [("/ diagram fragment (every 2 s per open page)", "/?fragment=1"),
                 ("/items/Payments", "/items/Payments"),
                 ("/queues", "/queues"), ("/queues/Payments (first page)", "/queues/Payments")]
        print(f"{store.engine.dialect.name}, {args.count:,} messages, "
              f"{len(ITEMS) * 1440:,} rollup rows, median of {args.repeat}; load average "
              f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        for name, path in pages:
            assert client.get(path).status_code == 200, path
            print(f"  {measure(lambda path=path: client.get(path), args.repeat):9.2f} ms  {name}")
    store.dispose()


if __name__ == "__main__":
    main()
