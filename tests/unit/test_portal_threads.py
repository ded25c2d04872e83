"""The intake's thread hop (engine/serving/threads.py): the work runs on another thread in a
copy of the caller's context, its exception reaches the caller, a cancelled caller does not
stop the work, and many hops at once run at once (group commit needs them together)."""
from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from engine.serving import threads
from engine.serving.threads import to_thread

REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="none")


def test_the_work_runs_on_another_thread_in_the_callers_context() -> None:
    async def call() -> tuple[str, str]:
        REQUEST.set("order 7")
        return await to_thread(lambda: (threading.current_thread().name, REQUEST.get()))

    name, seen = asyncio.run(call())
    assert name != threading.current_thread().name and name.startswith("encore-intake")
    assert seen == "order 7"


def test_an_exception_reaches_the_caller() -> None:
    def refuse() -> None:
        raise ValueError("body must be a JSON object")

    with pytest.raises(ValueError, match="JSON object"):
        asyncio.run(to_thread(refuse))


def test_a_cancelled_caller_does_not_stop_the_work() -> None:
    began, release, finished = threading.Event(), threading.Event(), threading.Event()

    def commit() -> str:
        began.set()
        release.wait(10)
        finished.set()
        return "committed"

    async def call() -> None:
        task = asyncio.ensure_future(to_thread(commit))
        await asyncio.get_running_loop().run_in_executor(None, began.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()

    asyncio.run(call())
    assert finished.wait(10)  # the work went on after its caller was gone


def test_hops_at_once_run_at_once() -> None:
    """16 callers each wait at a barrier that opens only when all 16 are inside: hops that
    queued behind one another would never get there."""
    barrier = threading.Barrier(16, timeout=10)

    async def call() -> list[int]:
        return list(await asyncio.gather(*(to_thread(barrier.wait) for _ in range(16))))

    assert sorted(asyncio.run(call())) == list(range(16))


def test_without_a_new_thread_a_hop_waits_for_one_or_says_why(monkeypatch) -> None:
    """A process at its thread limit: with no thread at all the caller hears the error and
    nothing runs; with a busy thread the hop waits in the queue for it."""
    pool = threads._Pool()  # a pool of its own, with no thread yet
    monkeypatch.setattr(threads, "_POOL", pool)
    start = threading.Thread.start

    def refuse(self: threading.Thread) -> None:
        if self.name == "encore-intake":
            raise RuntimeError("can't start new thread")
        start(self)

    ran: list[str] = []
    monkeypatch.setattr(threading.Thread, "start", refuse)
    with pytest.raises(RuntimeError, match="can't start"):
        asyncio.run(to_thread(ran.append, "first"))
    assert ran == []  # the caller was told, and nothing was done
    monkeypatch.setattr(threading.Thread, "start", start)
    release = threading.Event()

    async def two() -> list[object]:
        busy = asyncio.ensure_future(to_thread(release.wait, 10))  # the one thread, busy
        await asyncio.sleep(0.1)
        monkeypatch.setattr(threading.Thread, "start", refuse)
        queued = asyncio.ensure_future(to_thread(ran.append, "second"))
        await asyncio.sleep(0.1)
        assert ran == []  # it waits for the busy thread
        release.set()
        return list(await asyncio.gather(busy, queued))

    assert asyncio.run(two()) == [True, None] and ran == ["second"]
