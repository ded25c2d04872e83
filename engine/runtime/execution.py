"""Where a daemon's work runs: on threads in real time, or on the caller's thread, step by step.

:meth:`Daemon.step <engine.runtime.daemon.Daemon.step>` is the same in both; what differs is the
:class:`Runtime` the daemon is given. :class:`ThreadedRuntime` (``encore run``) gives each item its
worker and dispatcher threads and runs scheduler jobs, reloads and restarts on pools, so a slow
one never makes the heartbeat late. :class:`SteppedRuntime` (:class:`engine.testing.VirtualDaemon`)
starts no thread: each step delivers the items' work and runs jobs and reloads where it is, so a
timeline on a virtual clock comes out the same on every run.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, TypeVar

from engine.delivery.dispatch import DispatchTuning
from engine.delivery.item import ItemRunner
from engine.runtime.announcements import AnnouncementRouter
from engine.runtime.scheduler import ProductionScheduler
from engine.runtime.steps import guarded

__all__ = ["RunHere", "Runtime", "SteppedRuntime", "ThreadedRuntime"]

T = TypeVar("T")

# a stepped dispatcher neither lingers nor sizes batches by a virtual clock's speed, and writes
# each success at its step's time
STEPPED_DISPATCH = DispatchTuning(linger=0.0, batched=False, urgent_here=False)


class RunHere(Executor):
    """An executor that runs each call at once on the caller's thread; an ``Exception`` is held
    by the future, as a pool's would be, anything else (an interrupt) goes to the caller."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:
            future.set_exception(exc)
        return future


class Runtime(ABC):
    """Where the items, the scheduler's jobs and the reloads of a daemon run."""

    dispatch: DispatchTuning = DispatchTuning()

    @abstractmethod
    def executor(self, name: str, workers: int) -> Executor:
        """An executor of ``workers`` for work off the daemon's loop (threads named ``name``)."""

    @abstractmethod
    def launch(self, runner: ItemRunner) -> None:
        """Start ``runner``: from now on it claims messages."""

    @abstractmethod
    def step_items(self, runners: Iterable[ItemRunner]) -> float | None:
        """Do the items' due work; seconds until they need a step again (None: they run alone)."""

    @abstractmethod
    def upkeep_wait(self, seconds: float) -> float | None:
        """The wake-up asked for by upkeep nobody waits for (the console's counters)."""

    @abstractmethod
    def listen(self, router: AnnouncementRouter) -> None:
        """Route the announcements this daemon hears to its items."""

    @abstractmethod
    def stop_listening(self, router: AnnouncementRouter) -> None:
        """Undo :meth:`listen`."""

    @abstractmethod
    def start_jobs(self, scheduler: ProductionScheduler) -> None:
        """Start ``scheduler``; the daemon's step hands it its due jobs."""


class ThreadedRuntime(Runtime):
    """Real time: every item on its own threads, jobs and reloads on pools."""

    def executor(self, name: str, workers: int) -> Executor:
        return ThreadPoolExecutor(workers, thread_name_prefix=name)

    def launch(self, runner: ItemRunner) -> None:
        runner.start()

    def step_items(self, runners: Iterable[ItemRunner]) -> float | None:
        return None

    def upkeep_wait(self, seconds: float) -> float | None:
        return seconds

    def listen(self, router: AnnouncementRouter) -> None:
        router.listen(others=True)

    def stop_listening(self, router: AnnouncementRouter) -> None:
        router.stop_listening(others=True)

    def start_jobs(self, scheduler: ProductionScheduler) -> None:
        scheduler.start(loop=False)


class SteppedRuntime(Runtime):
    """No thread: the daemon's step delivers, and runs jobs, reloads and restarts, where it is.

    Announcements of other processes are not heard (that takes a listener thread); the console's
    counters are written when a step comes, never a reason for one.
    """

    dispatch = STEPPED_DISPATCH

    def executor(self, name: str, workers: int) -> Executor:
        return RunHere()

    def launch(self, runner: ItemRunner) -> None:
        runner.start_stepped()

    def step_items(self, runners: Iterable[ItemRunner]) -> float | None:
        waits = [guarded(runner.step, f"item {runner.item.name}") for runner in list(runners)]
        found = [w for w in waits if w is not None]
        return min(found) if found else None

    def upkeep_wait(self, seconds: float) -> float | None:
        return None

    def listen(self, router: AnnouncementRouter) -> None:
        router.listen(others=False)

    def stop_listening(self, router: AnnouncementRouter) -> None:
        router.stop_listening(others=False)

    def start_jobs(self, scheduler: ProductionScheduler) -> None:
        scheduler.start(loop=False, executor=self.executor)
