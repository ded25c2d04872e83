"""intake_http_msgs_per_s (issue 15): messages/s taken in through the portal's intake API,
``POST /api/v1/messages/{target}`` with a bearer token, one durable commit per message.

``encore portal`` runs as a subprocess on a SQLite file (its CPU is not the client's); the
client posts one message at a time over a kept-alive connection, and a second figure posts
from 4 threads at once (the server commits each message on its own either way).
"""
from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

from bench import harness as h
from bench.report import Outcome
from engine.clock import utcnow
from engine.portal.auth import new_token, token_digest
from engine.store import accounts

ITEM = "Noop"
BODY = {"n": 1}
CLIENT_THREADS = 4  # for the concurrent figure
START_TIMEOUT = 30.0  # seconds the portal may take to listen


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _portal(work: Path, url: str) -> tuple[subprocess.Popen[bytes], str, str]:
    """Start ``encore portal`` on a fresh SQLite database; (process, base URL, token)."""
    store = h.fresh_store(url)
    token = new_token()
    accounts.add_token(store, "bench", "sender", token_digest(token), now=utcnow())
    store.dispose()
    path = work / "portal.toml"
    path.write_text(h.production_text(database=url, item=ITEM, cls="bench.ops:NoopOperation"))
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "engine.cli", "-p", str(path), "portal",
                             "--port", str(port)], cwd=work, env=h.cli_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            requests.get(f"{base}/login", timeout=1)
            return proc, base, token
        except requests.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("encore portal did not start") from None
            time.sleep(0.1)


def _post_all(base: str, token: str, count: int) -> None:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    for _ in range(count):
        reply = session.post(f"{base}/api/v1/messages/{ITEM}", json=BODY, timeout=30)
        if reply.status_code != 202:
            raise RuntimeError(f"intake answered {reply.status_code}: {reply.text}")


def _rate(base: str, token: str, count: int, threads: int) -> float:
    each = count // threads
    workers = [threading.Thread(target=_post_all, args=(base, token, each))
               for _ in range(threads)]
    t0 = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return each * threads / (time.perf_counter() - t0)


def intake_http(work: Path, count: int) -> Outcome:
    out = Outcome()
    proc, base, token = _portal(work, h.sqlite_url(work, "intake-http.db"))
    try:
        _post_all(base, token, 20)  # warm: connection, token cache, statement caches
        one = _rate(base, token, count, 1)
        many = _rate(base, token, count, CLIENT_THREADS)
    finally:
        proc.terminate()
        proc.wait(10)
    out.key("intake_http_msgs_per_s", "POST /api/v1/messages/{target}, one client, SQLite",
            one, "msg/s", f"n={count:,}; a durable commit per message; encore portal in a "
                          "subprocess")
    out.info(f"the same, {CLIENT_THREADS} clients at once", many, "msg/s")
    return out
