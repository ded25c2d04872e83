"""ItemRunner: one item's adapter, host instances, dispatcher and ``pool_size`` workers.

Each item has its own queue, workers and connections, so a slow item never delays another. Workers
wait on the dispatcher's in-memory queue, never on the database, and a failing dependency is retried
later rather than killing a worker. Started with :meth:`ItemRunner.start_stepped` it has no
thread: each :meth:`ItemRunner.step` claims and delivers on the caller's thread (a daemon on a
virtual clock).
"""
from __future__ import annotations

import logging
import queue
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from engine.attempt import AttemptObserver
from engine.clock import Clock
from engine.config.production import ItemConfig, ProductionConfig
from engine.delivery.claims import ClaimBook
from engine.delivery.commits import OwnCommits
from engine.delivery.dispatch import (
    CHUNK_GIVE_BACK,
    STORE_RETRY_DELAY,
    Dispatcher,
    DispatchSettings,
    DispatchTuning,
)
from engine.delivery.guards import ItemGuards
from engine.delivery.middleware import Hooks
from engine.delivery.readiness import ReadinessLog
from engine.delivery.worker import MessageWorker, Result
from engine.errors import AdapterNotReady, ClaimLost, ConfigurationError, EncoreError, Interrupted
from engine.eventsink import EventSink
from engine.host import BusinessOperation
from engine.process import BusinessProcess, ProcessContext
from engine.store.hotpath import Claimed, Completion
from engine.store.rows import MessageRow
from engine.store.sql import SqlStore

if TYPE_CHECKING:  # adapters import the engine; the engine only names their base class
    from adapters.base import OutboundAdapter

log = logging.getLogger(__name__)

ENDED = frozenset({Result.COMPLETED, Result.ERROR, Result.SUSPENDED})


@dataclass(frozen=True, kw_only=True)
class ItemContext:
    """What an :class:`ItemRunner` runs with: the daemon's store, clock and settings and what it
    made for the item.

    ``lease``: None, or True while this daemon holds the FIFO lease. ``middleware`` runs after
    ``guards``; ``adapter`` replaces the one built from the item's class; ``tuning``: how the
    dispatcher claims and commits (the runtime's choice).
    """

    store: SqlStore
    clock: Clock
    owner: str
    lease_seconds: float
    poll_interval: float
    env: Mapping[str, str] = field(default_factory=dict)
    events: EventSink | None = None
    lease: Callable[[], bool] | None = None
    production: Callable[[], ProductionConfig] | None = None
    guards: ItemGuards = field(default_factory=ItemGuards)
    middleware: tuple[AttemptObserver, ...] = ()
    stop: threading.Event = field(default_factory=threading.Event)
    adapter: OutboundAdapter | None = None
    rng: random.Random | None = None
    tuning: DispatchTuning = DispatchTuning()


class ItemRunner:
    """Runs one business operation item inside a daemon, with what ``context`` gives it."""

    def __init__(self, item: ItemConfig, context: ItemContext) -> None:
        self.item = item
        self.context = context
        self.store = context.store
        self.clock = context.clock
        self.events: EventSink = context.events or context.store.events
        self.lease = context.lease
        self.guards = context.guards
        self.stop_event = context.stop
        assert item.retry_settings is not None and item.operation_settings is not None
        self.retry_interval = item.retry_settings.retry_interval
        self.adapter = context.adapter if context.adapter is not None else self._build_adapter()
        # guards first: an attempt held back by a guard starts no span
        self.observers: list[AttemptObserver] = [*self.guards.middleware, *context.middleware]
        self.hooks = Hooks(self.observers)
        self.hosts: list[BusinessOperation] = []
        self.threads: list[threading.Thread] = []
        self.workers: list[MessageWorker] = []  # a stepped runner's (threads make their own)
        self._stepping = False
        self._prepared = False
        self._ready = False
        self._ready_lock = threading.Lock()
        self._next_start_try = 0.0
        self._readiness = ReadinessLog(self._write_readiness, self.clock,
                                       retry_interval=self.retry_interval)
        self.dispatcher = Dispatcher(DispatchSettings(
            target=item.name, owner=context.owner, pool_size=item.pool_size,
            fifo=self.lease is not None, begin=item.retry_settings.idempotent,
            enabled=item.enabled, lease_seconds=context.lease_seconds,
            poll_interval=context.poll_interval),
            store=self.store, clock=self.clock, ready=self._can_claim, stop=self.stop_event,
            tuning=context.tuning, direct=self._can_take_directly,
            server=self.adapter.next_server if self.adapter is not None else lambda: None)
        self.claims: ClaimBook = self.dispatcher.book

    @property
    def ready(self) -> bool:
        """True once the adapter started (always, for an item without one)."""
        return self._ready or self.adapter is None

    @property
    def not_ready_reason(self) -> str | None:
        """Why the adapter has not started yet (its last failure); None once it has."""
        return None if self.ready else self._readiness.reason

    @property
    def wakeup(self) -> threading.Event:
        """Set it to make the dispatcher look at the queue now."""
        return self.dispatcher.wakeup

    def _build_adapter(self) -> OutboundAdapter | None:
        """The item's adapter; ConfigurationError naming the item if it cannot be made."""
        cls = getattr(self.item.cls, "adapter_class", None)
        if cls is None:
            return None
        try:
            return cls(self.item.settings, item_name=self.item.name,
                       pool_size=self.item.pool_size, env=self.context.env, clock=self.clock)
        except EncoreError:
            raise
        except Exception as exc:
            raise ConfigurationError(f"{cls.__name__} cannot be created: "
                                     f"{type(exc).__name__}: {exc}", item=self.item.name) from exc

    def prepare(self) -> None:
        """Create the host instances, call their ``on_init`` and try to start the adapter once.
        Raises :class:`~engine.errors.ConfigurationError` naming the item, after undoing what it
        made; an adapter only not ready yet is retried later."""
        try:
            for _ in range(self.item.pool_size):
                self.hosts.append(self._make_host())
            self._try_start_adapter()
        except Exception:
            self.discard()
            raise
        self._prepared = True

    def _make_host(self) -> BusinessOperation:
        """One host instance, its ``on_init`` called; a user's error becomes the item's."""
        try:
            cls = cast("type[BusinessOperation]", self.item.cls)
            host = cls(self.item.name, self.item.settings, events=self.events,
                       adapter=self.adapter)
            production = self.context.production
            if isinstance(host, BusinessProcess) and production is not None:
                host.bind(ProcessContext(store=self.store, production=production,
                                         clock=self.clock, stop=self.stop_event))
            host.on_init()
        except Exception as exc:
            raise ConfigurationError(f"{self.item.class_path} failed to start (on_init): "
                                     f"{type(exc).__name__}: {exc}", item=self.item.name) from exc
        return host

    def start(self) -> None:
        """Start the workers' threads and the dispatcher's: from now on the item claims."""
        if not self._prepared:
            self.prepare()
        for index, host in enumerate(self.hosts):
            thread = threading.Thread(target=self._work, args=(host,), daemon=True,
                                      name=f"{self.item.name}-{index + 1}")
            self.threads.append(thread)
            thread.start()
        self.dispatcher.start()
        self.store.add_taker(self.item.name, self.dispatcher)

    def start_stepped(self) -> None:
        """Start without a thread: each :meth:`step` claims and delivers on the caller's thread."""
        if not self._prepared:
            self.prepare()
        self.workers = [self._worker(host, defer=self.dispatcher.commits.defer)
                        for host in self.hosts]

    def discard(self) -> None:
        """Undo :meth:`prepare`: tear down every host made and stop the adapter."""
        for host in self.hosts:
            _quietly(host.on_tear_down)
        self.hosts.clear()
        if self.adapter is not None:
            _quietly(self.adapter.stop)
        _quietly(self.guards.close)

    def request_stop(self) -> None:
        """Stop intake: workers finish their attempt and claim nothing more."""
        self.store.remove_taker(self.item.name, self.dispatcher)
        self.stop_event.set()
        self.wakeup.set()

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for workers and the last commit; True if stopped."""
        deadline = self.clock.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(deadline - self.clock.monotonic(), 0.0))
        alive = [t.name for t in self.threads if t.is_alive()]
        committed = self.dispatcher.join(max(deadline - self.clock.monotonic(), 0.0))
        self.claims.release_abandoned_at_stop()
        if alive or not committed:
            log.warning("item %s: workers %s still busy at shutdown; their attempts will be "
                        "treated as outcome unknown on the next start", self.item.name,
                        alive or "(group commit)")
            return False
        for host in self.hosts:
            _quietly(host.on_tear_down)
        if self.adapter is not None:
            _quietly(self.adapter.stop)
        _quietly(self.guards.close)
        return True

    def wait_stopped(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the threads; True if ended. Tears nothing down."""
        deadline = self.clock.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(deadline - self.clock.monotonic(), 0.0))
        if any(t.is_alive() for t in self.threads):
            return False
        return self.dispatcher.join(max(deadline - self.clock.monotonic(), 0.0))

    def _worker(self, host: BusinessOperation,
                defer: Callable[[Completion], None] | None) -> MessageWorker:
        item = self.item
        assert item.retry_settings is not None and item.operation_settings is not None
        if self.lease is not None and defer is not None:
            defer = self.dispatcher.commit_now  # FIFO: each end written before the next send
        return MessageWorker.from_typed(host, item.retry_settings, item.operation_settings,
                                        store=self.store, clock=self.clock,
                                        stop=self.stop_event, defer=defer, rng=self.context.rng,
                                        observers=self.observers)

    def _work(self, host: BusinessOperation) -> None:
        own = (OwnCommits(self.dispatcher) if self.item.pool_size > 1
               and self.store.db.hot.parallel_commits else None)
        worker = self._worker(host, defer=self.dispatcher.commits.defer if own is None
                              else own.defer)
        while (work := self.dispatcher.work.get()) is not None:
            batch, chunk = work
            if own is not None:
                own.chunk = len(chunk)
            try:
                for i, claimed in enumerate(chunk):
                    started = self.clock.monotonic()
                    self._take(worker, batch, claimed, own)
                    if own is not None and own.due():
                        own.flush()
                    if (self.item.pool_size > 1 and i + 1 < len(chunk)  # never behind later work
                            and self.clock.monotonic() - started > CHUNK_GIVE_BACK
                            and self.dispatcher.give_back(batch, chunk[i + 1:])):
                        break
            finally:
                if own is not None:
                    own.flush()

    def _take(self, worker: MessageWorker, batch: int, claimed: Claimed,
              own: OwnCommits | None = None) -> None:
        started = self.clock.monotonic()
        result: Result | None = None
        try:
            result = self._deliver(worker, claimed, batch)
        finally:
            (own or self.dispatcher).finished(claimed.row.id, self.clock.monotonic() - started,
                                              ended=result in ENDED)

    def step(self) -> float | None:
        """One dispatcher step, then deliver what it claimed here; seconds to the next (None: busy).
        Each success is committed at once, so its time is exact on a virtual clock."""
        assert self.workers, "step() is for a runner started with start_stepped()"
        if self._stepping:
            return None
        self._stepping = True
        try:
            wait = self.dispatcher.tick()
            delivered = False
            while True:
                try:
                    work = self.dispatcher.work.get_nowait()
                except queue.Empty:
                    break
                if work is not None:
                    batch, chunk = work
                    for claimed in chunk:
                        self._take(self.workers[0], batch, claimed)
                        self.dispatcher.flush()
                    delivered = True
            return 0.0 if delivered else wait
        finally:
            self._stepping = False

    def _deliver(self, worker: MessageWorker, claimed: Claimed, batch: int) -> Result | None:
        """Deliver ``claimed``; how it left the message (None: not delivered, or cut short)."""
        row = claimed.row
        try:
            self.claims.release_abandoned()
            if (self.stop_event.is_set() or self.dispatcher.held_back.is_set()
                    or self._behind_abandoned(batch)):
                self._put_back_unsent(claimed)
                return None
            if claimed.begun is not None:
                self.claims.confirm(row)  # no write of its own before its request: fence it
            if not self.hooks.delivery:
                return worker.deliver(row, claimed.begun, claimed.interrupted,
                                      begun_server=claimed.server)
            with self.hooks.around_delivery(row) as deliveries:
                result = worker.deliver(row, claimed.begun, claimed.interrupted,
                                        begun_server=claimed.server)
                for delivery in deliveries:
                    delivery.ended(result.value)
            return result
        except Interrupted as exc:
            self._put_back(row, exc)
        except ClaimLost as exc:
            log.warning("item %s: %s; abandoning message %d", self.item.name, exc, row.id)
        except EncoreError as exc:
            self.claims.abandon(row, self.dispatcher.claims)
            log.error("item %s: %s; trying again in %.0f s", self.item.name, exc,
                      STORE_RETRY_DELAY)
            self.stop_event.wait(STORE_RETRY_DELAY)
        except Exception:
            self.claims.abandon(row, self.dispatcher.claims)
            log.exception("item %s: unexpected error in worker", self.item.name)
            self.stop_event.wait(STORE_RETRY_DELAY)
        return None

    def _put_back_unsent(self, claimed: Claimed) -> None:
        """Put a claimed, unsent message back and take back the attempt its claim began."""
        row = claimed.row
        if claimed.begun is None:
            self.store.release(row.id, token=row.claim_token)
        else:
            self.store.hold(row.id, token=row.claim_token, until=self.clock.now(),
                            begun=claimed.begun)

    def _put_back(self, row: MessageRow, why: Interrupted) -> None:
        """Put an interrupted process's message back with its attempt open, as after a crash."""
        try:
            self.store.release(row.id, token=row.claim_token)
        except EncoreError as exc:
            log.warning("item %s: message %d stays claimed until its lease expires: %s",
                        self.item.name, row.id, exc)
            return
        log.info("item %s: %s; message %d is back in its queue (its attempt counts as outcome "
                 "unknown)", self.item.name, why, row.id)

    def _behind_abandoned(self, batch: int) -> bool:
        """FIFO: messages claimed behind one that went back go back too, so none overtakes it."""
        return self.lease is not None and self.claims.behind_abandoned(batch)

    def _can_claim(self) -> bool:
        """True if the dispatcher may claim (middleware, adapter, FIFO lease)."""
        return (self.hooks.may_claim_now() and self._try_start_adapter()
                and (self.lease is None or self.lease()))

    def _can_take_directly(self) -> bool:
        """True if a waited-for message may be claimed by its intake."""
        return (self.ready and not self.hooks.may_claim
                and (self.lease is None or self.lease()))

    def _try_start_adapter(self) -> bool:
        """Start the adapter once; on failure retry every retry_interval, with events."""
        if self._ready or self.adapter is None:
            return True
        with self._ready_lock:
            if self._ready or self.clock.monotonic() < self._next_start_try:
                return self._ready
            try:
                warnings = self.adapter.start()
            except AdapterNotReady as exc:
                self._next_start_try = self.clock.monotonic() + self.retry_interval
                self._readiness.failed(exc)
                return False
            self._ready = True
            self._readiness.started()
            for text in warnings:
                self.events.write("Warning", text, config_name=self.item.name,
                                  source_class=type(self.adapter).__name__,
                                  source_method="start")
            return True

    def _write_readiness(self, type_: str, text: str) -> None:
        self.events.write(type_, text, config_name=self.item.name, source_class="ItemRunner",
                          source_method="start", job=self.context.owner)


def _quietly(func: object) -> None:
    try:
        func()  # type: ignore[operator]
    except Exception:
        log.exception("error during tear-down")
