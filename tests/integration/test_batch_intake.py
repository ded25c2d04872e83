"""The event loop's batched intake (engine/serving/batch_intake.py) on SQLite and PostgreSQL:
requests that arrive together share one durable transaction, each is answered only once it
is committed, one bad intake fails alone, and a stop commits what is queued."""
from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import requests

from engine import BusinessProcess
from engine.clock import utcnow
from engine.serving.batch_intake import BatchIntake
from engine.store import queries
from engine.store.hotpath import Accepted, Intake
from engine.store.sql import SqlStore
from tests.integration.inbound_support import free_port, running


class Sink(BusinessProcess):
    """Takes any JSON object and answers nothing."""

    def on_request(self, request: Any) -> Any:
        return None


def _intake(n: int, target: Any = "A", key: str | None = None) -> Intake:
    return Intake(target, None, f'{{"n": {n}}}', "Svc", None, utcnow(), key, None)


def _accept_all(batcher: BatchIntake, intakes: list[Intake], held: threading.Lock | None = None
                ) -> list[Accepted | BaseException]:
    """Accept ``intakes`` from one loop at once; with ``held`` (a lock the commit needs),
    released only once all of them are queued."""
    async def main() -> list[Accepted | BaseException]:
        tasks = [asyncio.ensure_future(batcher.accept(i)) for i in intakes]
        await asyncio.sleep(0.2)  # every one queued (and the first commit begun, waiting)
        assert not any(t.done() for t in tasks)  # nobody answered before the commit
        if held is not None:
            held.release()
        return list(await asyncio.gather(*tasks, return_exceptions=True))
    return asyncio.run(main())


def _write_lock(store: SqlStore) -> threading.Lock:
    """What the next commit must take: SQLite's write lock of the process; on PostgreSQL a
    lock of the test's that the commit is made to take too."""
    lock = getattr(store.db.hot, "_write_lock", None)
    if lock is None:
        lock = threading.Lock()
        accept_batch = store.accept_batch

        def gated(intakes: Any) -> Any:
            with lock:
                return accept_batch(intakes)
        store.accept_batch = gated  # type: ignore[method-assign]
    lock.acquire()
    return lock


def test_intakes_that_arrive_together_share_a_transaction(store: SqlStore) -> None:
    batcher = BatchIntake(store)
    batcher.start()
    try:
        results = _accept_all(batcher, [_intake(n) for n in range(20)], _write_lock(store))
    finally:
        batcher.stop()
    ids = [r.id for r in results if isinstance(r, Accepted)]
    assert len(ids) == 20 and len(set(ids)) == 20
    assert batcher.intakes == 20 and batcher.batches <= 2  # the first alone, then the rest
    rows = {m["id"]: m for m in queries.messages(store)}
    assert [rows[i]["body"] for i in ids] == [f'{{"n": {n}}}' for n in range(20)]
    assert all(rows[i]["source"] == "Svc" and rows[i]["status"] == "Queued" for i in ids)


def test_an_intake_that_cannot_be_written_fails_alone(store: SqlStore) -> None:
    batcher = BatchIntake(store)
    batcher.start()
    try:
        results = _accept_all(batcher, [_intake(0), _intake(1, target=None), _intake(2),
                                        _intake(3, key="k"), _intake(4, key="k")],
                              _write_lock(store))
    finally:
        batcher.stop()
    good, bad, other, keyed, again = results
    assert isinstance(bad, Exception)  # no target: the column refuses it
    assert all(isinstance(r, Accepted) for r in (good, other, keyed, again))
    assert keyed.id == again.id and (keyed.created, again.created) == (True, False)  # type: ignore[union-attr]
    assert sorted(m["body"] for m in queries.messages(store)) == [
        '{"n": 0}', '{"n": 2}', '{"n": 3}']


def test_a_stop_commits_what_is_queued_and_refuses_what_comes_later(store: SqlStore) -> None:
    batcher = BatchIntake(store)
    batcher.start()
    held = _write_lock(store)

    async def main() -> tuple[list[Any], BaseException | None]:
        tasks = [asyncio.ensure_future(batcher.accept(_intake(n))) for n in range(5)]
        await asyncio.sleep(0.2)
        stopping = threading.Thread(target=batcher.stop)
        stopping.start()
        await asyncio.sleep(0.1)
        late: BaseException | None = None
        try:
            await batcher.accept(_intake(9))
        except RuntimeError as exc:
            late = exc
        held.release()
        done = await asyncio.gather(*tasks)
        stopping.join(10)
        return done, late
    done, late = asyncio.run(main())
    assert all(isinstance(a, Accepted) and a.created for a in done)
    assert late is not None and "stopping" in str(late)
    assert len(queries.messages(store)) == 5


@pytest.mark.timeout(120)
def test_async_requests_from_many_clients_are_committed_in_batches(store: SqlStore) -> None:
    items = ('[[items]]\nname = "OrdersAsync"\nclass = "engine.inbound:HttpService"\n'
             '[items.settings]\nroutes = [{method = "POST", path = "/orders", '
             'target = "Sink"}]\nmode = "async"\n'
             '[[items]]\nname = "Sink"\nclass = "tests.integration.test_batch_intake:Sink"\n'
             'pool_size = 2\n')
    port = free_port()
    ids: list[int] = []
    lock = threading.Lock()

    def client(n: int) -> None:
        with requests.Session() as session:
            for k in range(10):
                reply = session.post(f"http://127.0.0.1:{port}/orders", json={"n": n, "k": k},
                                     timeout=30)
                assert reply.status_code == 202, reply.text
                with lock:
                    ids.append(reply.json()["id"])
    with running(store, items, port) as daemon:
        clients = [threading.Thread(target=client, args=(n,)) for n in range(8)]
        for c in clients:
            c.start()
        for c in clients:
            c.join(60)
        assert daemon.inbound is not None
        batcher = daemon.inbound.intake
        assert batcher.intakes == 80
    rows = {m["id"]: m for m in queries.messages(store, item="Sink")}
    assert sorted(ids) == sorted(rows) and len(rows) == 80  # each answered id is a message


def test_a_caller_that_goes_away_leaves_its_intake_to_be_committed(store: SqlStore) -> None:
    batcher = BatchIntake(store)
    batcher.start()
    held = _write_lock(store)

    async def main() -> None:
        gone = asyncio.ensure_future(batcher.accept(_intake(1)))
        stays = asyncio.ensure_future(batcher.accept(_intake(2)))
        await asyncio.sleep(0.2)
        gone.cancel()  # its client closed the connection
        await asyncio.sleep(0.05)
        held.release()
        accepted = await stays
        assert accepted.created and gone.cancelled()
    try:
        asyncio.run(main())
    finally:
        batcher.stop()
    assert sorted(m["body"] for m in queries.messages(store)) == ['{"n": 1}', '{"n": 2}']
