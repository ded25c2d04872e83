"""HTTP intake at the speed of the database (issue 21): concurrent intakes share one durable
commit and every 202 is durable (kill -9 right after them loses none), a token is checked
without a database read per request and a revoked one is refused within a second on every
portal, and the group commit itself batches, keeps order and fails only a bad write."""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import requests

from engine.portal.auth import PortalAuthenticator
from engine.serving.auth import TOKEN_CACHE_SECONDS
from engine.store import accounts
from engine.store.group import GroupCommit
from engine.store.sql import SqlStore
from tests.acceptance.daemon import ROOT, cli_env
from tests.integration.test_portal_server import free_port
from tests.portal_support import PRODUCTION, add_token, bearer
from tests.waiting import answers, wait_until

CLIENTS = 16
PER_CLIENT = 10


def test_intakes_that_arrive_together_share_a_commit_and_each_gets_its_own_result(
        store: SqlStore) -> None:
    barrier = threading.Barrier(CLIENTS)
    ids: list[int] = []
    lock = threading.Lock()

    def send(n: int) -> None:
        barrier.wait()
        mine = [store.accept(target="Echo", body_class=None, body=f'{{"n": {n}, "i": {i}}}',
                             idempotency_key=f"k{n}-{i % 5}").id for i in range(PER_CLIENT)]
        with lock:
            ids.extend(mine)

    before = (store.intake.commits, store.intake.writes)
    threads = [threading.Thread(target=send, args=(n,)) for n in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    commits = store.intake.commits - before[0]
    writes = store.intake.writes - before[1]
    assert writes == CLIENTS * PER_CLIENT
    assert commits < writes  # some commits took several intakes
    # five keys per client: the repeats found the first message, nothing more was made
    assert len(set(ids)) == CLIENTS * 5
    for mid in set(ids):
        row = store.get_message(mid)
        assert row is not None and row.status == "Queued"


def test_a_failing_batch_fails_only_the_bad_write() -> None:
    committed: list[list[str]] = []

    def one(write: str) -> str:
        if write == "bad":
            raise ValueError("bad write")
        committed.append([write])
        return write.upper()

    def many(writes: Sequence[str]) -> list[str]:
        if "bad" in writes:
            raise ValueError("the batch holds a bad write")
        committed.append(list(writes))
        return [w.upper() for w in writes]

    group: GroupCommit[str, str] = GroupCommit(one, many)
    gate = threading.Event()
    slow_first = GroupCommit(lambda w: (gate.wait(5), one(w))[1], many)
    results: dict[str, object] = {}

    def submit(write: str) -> None:
        try:
            results[write] = slow_first.submit(write)
        except ValueError as exc:
            results[write] = exc

    first = threading.Thread(target=submit, args=("first",))
    first.start()
    time.sleep(0.2)  # "first" leads and is committing: the others queue behind it
    others = [threading.Thread(target=submit, args=(w,)) for w in ("a", "bad", "b")]
    for t in others:
        t.start()
    time.sleep(0.2)
    gate.set()
    for t in [first, *others]:
        t.join(10)
    assert results["first"] == "FIRST" and results["a"] == "A" and results["b"] == "B"
    assert isinstance(results["bad"], ValueError)
    assert group.submit("alone") == "ALONE"


def test_a_revoked_token_is_refused_within_a_second_on_every_portal(
        database_url: str) -> None:
    stores = [SqlStore(database_url) for _ in range(2)]  # two portals, one database
    stores[0].upgrade()
    try:
        portals = [PortalAuthenticator(s, "secret") for s in stores]
        header = bearer(add_token(stores[0], "sender", name="bot"))["Authorization"]
        assert all(p.bearer(header) is not None for p in portals)
        reads = 0
        find = accounts.find_token

        def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
            nonlocal reads
            reads += 1
            return find(*args, **kwargs)

        accounts.find_token = counted  # type: ignore[assignment]
        try:
            for _ in range(200):  # within the cache's second: no database read at all
                assert portals[0].bearer(header) is not None
            assert reads <= 1
            accounts.revoke_tokens(stores[0], "bot")
            revoked = time.monotonic()
            wait_until(lambda: all(p.bearer(header) is None for p in portals),
                       TOKEN_CACHE_SECONDS + 30, "the revocation to reach every portal")
            assert time.monotonic() - revoked <= TOKEN_CACHE_SECONDS + 2.0
        finally:
            accounts.find_token = find  # type: ignore[assignment]
    finally:
        for s in stores:
            s.dispose()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_every_202_of_group_committed_intakes_survives_a_kill_9_right_after(
        store: SqlStore, tmp_path: Path) -> None:
    (tmp_path / "production.toml").write_text(
        PRODUCTION.replace('name = "PortalTest"',
                           f'name = "PortalTest"\ndatabase = "{store.url}"'))
    headers = bearer(add_token(store, "sender"))
    port = free_port()
    portal = subprocess.Popen([sys.executable, "-m", "engine.cli", "-p", "production.toml",
                               "portal", "--port", str(port)], cwd=tmp_path,
                              env=cli_env({"PYTHONPATH": str(ROOT)}),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: answers(f"{base}/login"), 60, "the portal to listen")
        accepted: list[int] = []
        lock = threading.Lock()
        barrier = threading.Barrier(CLIENTS)

        def client(n: int) -> None:
            with requests.Session() as http:
                barrier.wait()
                for i in range(PER_CLIENT):
                    answer = http.post(f"{base}/api/v1/messages/Echo", headers=headers,
                                       json={"text": f"{n}-{i}"}, timeout=30)
                    assert answer.status_code == 202, answer.text
                    with lock:
                        accepted.append(answer.json()["id"])

        threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        portal.send_signal(signal.SIGKILL)  # at once after the last 202
        portal.wait(10)
    finally:
        portal.kill()
    assert len(accepted) == CLIENTS * PER_CLIENT
    after = SqlStore(store.url)
    try:
        rows = [after.get_message(mid) for mid in accepted]
    finally:
        after.dispose()
    assert all(r is not None and r.status == "Queued" for r in rows)
    assert sorted(r.body for r in rows if r) == sorted(
        f'{{"text":"{n}-{i}","count":1}}' for n in range(CLIENTS) for i in range(PER_CLIENT))

