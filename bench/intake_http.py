"""intake_http_msgs_per_s (issue 15): messages/s taken in through the portal's intake API,
``POST /api/v1/messages/{target}`` with a bearer token, one durable commit per message.

``encore portal`` runs as a subprocess on a SQLite file (its CPU is not the client's); the
client posts one message at a time over a kept-alive connection, and a second figure posts
from 4 threads at once.

The one-client key posts through ``http.client`` (bench/keepalive.py says why); the same
posts through ``requests`` and the bare endpoint's one-client figure are printed beside it.

intake_http_16_msgs_per_s (issue 21): 16 client threads of this process post at once, each
on its own kept-alive ``http.client`` connection, to the same ``encore portal``;
bare_intake_http_msgs_per_s is the same 16 clients against bench/bare_intake.py (a bare
Starlette app under uvicorn doing one durable SQLite insert per POST), in the same run;
intake_http_ratio = Encore ÷ bare.
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
from bench.keepalive import KeepAlive
from bench.report import Outcome
from engine.clock import utcnow
from engine.serving.auth import new_token, token_digest
from engine.store import accounts

ITEM = "Noop"
BODY = {"n": 1}
CLIENT_THREADS = 4  # for the concurrent figure
MANY_CLIENTS = 16  # intake_http_16_msgs_per_s and bare_intake_http_msgs_per_s
START_TIMEOUT = 30.0  # seconds the portal may take to listen


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_listening(proc: subprocess.Popen[bytes], url: str, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            requests.get(url, timeout=1)
            return
        except requests.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.1)


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
    _wait_listening(proc, f"{base}/login", "encore portal")
    return proc, base, token


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


def _lean_rate(base: str, token: str | None, count: int) -> float:
    """Messages/s of one client posting ``count`` messages one at a time over one kept-alive
    ``http.client`` connection (bench/keepalive.py), after 20 untimed ones."""
    with KeepAlive(base, token) as client:
        for i in range(20 + count):
            if i == 20:
                t0 = time.perf_counter()
            status, answer = client.post(f"/api/v1/messages/{ITEM}", BODY)
            if status != 202:
                raise RuntimeError(f"intake answered {status}: {answer}")
    return count / (time.perf_counter() - t0)


def intake_http(work: Path, count: int) -> Outcome:
    out = Outcome()
    proc, base, token = _portal(work, h.sqlite_url(work, "intake-http.db"))
    try:
        _post_all(base, token, 20)  # warm: connection, token cache, statement caches
        one = _lean_rate(base, token, count)
        through_requests = _rate(base, token, count, 1)
        many = _rate(base, token, count, CLIENT_THREADS)
    finally:
        stop(proc)
    proc, bare_base = _bare(work)
    try:
        bare = _lean_rate(bare_base, None, count)
    finally:
        stop(proc)
    out.key("intake_http_msgs_per_s", "POST /api/v1/messages/{target}, one client, SQLite",
            one, "msg/s", f"n={count:,}; a durable commit per message; encore portal in a "
                          "subprocess; one kept-alive http.client connection")
    out.info("the same through requests.Session (its own CPU: ~0.65 ms a call)",
             through_requests, "msg/s")
    out.info("bare Starlette/uvicorn, one durable insert per POST, the same client", bare,
             "msg/s", "bench/bare_intake.py: the limit of one client here")
    out.info(f"the same, {CLIENT_THREADS} requests clients at once", many, "msg/s")
    return out


def _bare(work: Path) -> tuple[subprocess.Popen[bytes], str]:
    """bench/bare_intake.py on a fresh SQLite file: (process, base URL)."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bench.bare_intake", "--db",
                             str(work / "bare-intake.db"), "--port", str(port)], cwd=work,
                            env=h.cli_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    _wait_listening(proc, f"{base}/ping", "bench/bare_intake.py")
    return proc, base


def _concurrent_rate(base: str, token: str, count: int, clients: int) -> float:
    """Messages/s of ``clients`` threads posting ``count // clients`` messages each, every
    thread on its own kept-alive ``http.client`` connection (bench/keepalive.py; warmed by
    two posts before the clock starts)."""
    each = count // clients
    connections = [KeepAlive(base, token) for _ in range(clients)]
    start = threading.Barrier(clients + 1)
    failures: list[str] = []

    def post(client: KeepAlive, n: int) -> None:
        try:
            for _ in range(n):
                status, answer = client.post(f"/api/v1/messages/{ITEM}", BODY)
                if status != 202:
                    raise RuntimeError(f"intake answered {status}: {answer}")
        except Exception as exc:  # reported by the caller
            failures.append(f"{type(exc).__name__}: {exc}")

    def client(connection: KeepAlive) -> None:
        post(connection, 2)
        start.wait()
        post(connection, each)

    workers = [threading.Thread(target=client, args=(c,)) for c in connections]
    for worker in workers:
        worker.start()
    start.wait()
    t0 = time.perf_counter()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - t0
    for connection in connections:
        connection.close()
    if failures:
        raise RuntimeError(f"{len(failures)} intake client(s) failed: {failures[0]}")
    return each * clients / elapsed


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def intake_http16(work: Path, count: int) -> Outcome:
    """intake_http_16_msgs_per_s, bare_intake_http_msgs_per_s and intake_http_ratio."""
    out = Outcome()
    proc, base, token = _portal(work, h.sqlite_url(work, "intake-http16.db"))
    try:
        _post_all(base, token, 20)
        encore = _concurrent_rate(base, token, count, MANY_CLIENTS)
    finally:
        stop(proc)
    proc, base = _bare(work)
    try:
        _post_all(base, "none", 20)
        bare = _concurrent_rate(base, "none", count, MANY_CLIENTS)
    finally:
        stop(proc)
    note = f"n={count // MANY_CLIENTS * MANY_CLIENTS:,}, {MANY_CLIENTS} client threads"
    out.key("intake_http_16_msgs_per_s", f"POST /api/v1/messages/{{target}}, {MANY_CLIENTS} "
            "clients, SQLite", encore, "msg/s", f"{note}; encore portal in a subprocess")
    out.key("bare_intake_http_msgs_per_s", "bare Starlette/uvicorn, one durable SQLite insert "
            "per POST", bare, "msg/s", f"{note}; bench/bare_intake.py in a subprocess")
    out.key("intake_http_ratio", "Encore's 16-client HTTP intake ÷ the bare one's", encore / bare)
    return out
