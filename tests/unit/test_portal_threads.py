"""The intake's thread hop (engine/portal/threads.py): the work runs on another thread in a
copy of the caller's context, its exception reaches the caller, a cancelled caller does not
stop the work, and many hops at once run at once (group commit needs them together)."""
from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from engine.portal.threads import to_thread

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
