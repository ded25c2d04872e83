"""ItemRunner: one item's adapter, host instances and ``pool_size`` worker threads.

Each item has its own queue, workers and connection pool, so a slow item never delays
another (seed 004). A worker claims the oldest due message, delivers it, and claims the next;
when its queue is empty it waits for ``poll_interval``, until the next parked message is due,
or until :attr:`ItemRunner.wakeup` is set (the daemon sets it when work for the item is
announced). A FIFO item shared by several daemons is given a ``lease`` check: its worker
claims only while its daemon holds the item's lease, and only the head of the queue.
A failing dependency (the database, a WSDL that will not load) is logged and retried later;
it never kills the worker.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from adapters.base import OutboundAdapter
from engine.clock import Clock
from engine.errors import AdapterNotReady, EncoreError
from engine.host import BusinessOperation, EventSink
from engine.metrics import Metrics
from engine.production import ItemConfig
from engine.store.sql import SqlStore
from engine.window import ScheduleWindow
from engine.worker import MessageWorker

log = logging.getLogger(__name__)

STORE_RETRY_DELAY = 1.0  # seconds a worker waits after a database error


class ItemRunner:
    """Runs one business operation item inside a daemon.

    ``lease``: None — every daemon works this item at once; a callable — the item is FIFO
    across daemons: a worker claims only while ``lease()`` is True (this daemon holds the
    item lease), and then only the head of the queue.
    """

    def __init__(self, item: ItemConfig, *, store: SqlStore, clock: Clock, owner: str,
                 lease_seconds: float, poll_interval: float,
                 env: Mapping[str, str] | None = None, events: EventSink | None = None,
                 metrics: Metrics | None = None,
                 lease: Callable[[], bool] | None = None) -> None:
        self.item = item
        self.store = store
        self.clock = clock
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self.env = env or {}
        self.events: EventSink = events or store.events
        self.metrics = metrics
        self.lease = lease
        self.stop_event = threading.Event()
        self.wakeup = threading.Event()
        self.retry_interval = float(item.settings["retry_interval"])
        self.window = ScheduleWindow.from_setting(item.settings["schedule"])
        self.adapter = self._build_adapter()
        self.hosts: list[BusinessOperation] = []
        self.threads: list[threading.Thread] = []
        self._abandoned: set[int] = set()  # messages a failed delivery left claimed
        self._abandoned_lock = threading.Lock()
        self._ready = False
        self._ready_lock = threading.Lock()
        self._next_start_try = 0.0

    def _build_adapter(self) -> OutboundAdapter | None:
        cls = getattr(self.item.cls, "adapter_class", None)
        if cls is None:
            return None
        return cls(self.item.settings, item_name=self.item.name, pool_size=self.item.pool_size,
                   env=self.env, clock=self.clock)

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Create the host instances and start the workers."""
        for index in range(self.item.pool_size):
            host = self.item.cls(self.item.name, self.item.settings, events=self.events,
                                 adapter=self.adapter)
            host.on_init()
            self.hosts.append(host)
            thread = threading.Thread(target=self._work, args=(host,), daemon=True,
                                      name=f"{self.item.name}-{index + 1}")
            self.threads.append(thread)
        self._try_start_adapter()
        for thread in self.threads:
            thread.start()

    def request_stop(self) -> None:
        """Stop intake: workers finish the attempt in hand and claim nothing more."""
        self.stop_event.set()
        self.wakeup.set()

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the workers; True if all stopped."""
        deadline = self.clock.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(deadline - self.clock.monotonic(), 0.0))
        alive = [t.name for t in self.threads if t.is_alive()]
        if alive:
            log.warning("item %s: workers %s still busy at shutdown; their attempts will be "
                        "treated as outcome unknown on the next start", self.item.name, alive)
            return False
        for host in self.hosts:
            _quietly(host.on_tear_down)
        if self.adapter is not None:
            _quietly(self.adapter.stop)
        return True

    # -- the worker loop -----------------------------------------------------------------
    def _work(self, host: BusinessOperation) -> None:
        worker = MessageWorker.from_settings(host, self.item.settings, store=self.store,
                                             clock=self.clock, stop=self.stop_event,
                                             metrics=self.metrics)
        while not self.stop_event.is_set():
            try:
                self._work_once(worker)
            except EncoreError as exc:
                log.error("item %s: %s; trying again in %.0f s", self.item.name, exc,
                          STORE_RETRY_DELAY)
                self.stop_event.wait(STORE_RETRY_DELAY)
            except Exception:  # noqa: BLE001 - a worker never dies of one message
                log.exception("item %s: unexpected error in worker", self.item.name)
                self.stop_event.wait(STORE_RETRY_DELAY)

    def _work_once(self, worker: MessageWorker) -> None:
        self._release_abandoned()
        if not self._try_start_adapter() or not self._enabled() or not self._leased():
            self._idle(self.poll_interval)
            return
        claim = self.store.claim_and_begin(self.item.name, owner=self.owner,
                                           now=self.clock.now(), lease_seconds=self.lease_seconds,
                                           fifo=self.lease is not None,
                                           durable=not worker.policy.idempotent)
        if claim is None:
            self._idle(self._idle_time())
            return
        row, begun = claim
        try:
            worker.deliver(row, begun)
        except BaseException:
            with self._abandoned_lock:
                self._abandoned.add(row.id)
            raise

    def _release_abandoned(self) -> None:
        """A delivery cut short by a database error leaves its message claimed by this
        daemon, and the heartbeat would keep it so (a FIFO item would wait behind it for
        ever): put it back in the queue; its open attempt counts as outcome unknown."""
        with self._abandoned_lock:
            abandoned = sorted(self._abandoned)
        for message_id in abandoned:
            if self.store.release_claim(message_id, self.owner):
                log.warning("item %s: message %d is back in its queue after a failed delivery",
                            self.item.name, message_id)
            with self._abandoned_lock:
                self._abandoned.discard(message_id)

    def _idle(self, seconds: float) -> None:
        self.wakeup.wait(seconds)
        self.wakeup.clear()

    def _idle_time(self) -> float:
        due = self.store.next_due_time(self.item.name)
        if due is None:
            return self.poll_interval
        return min(max((due - self.clock.now()).total_seconds(), 0.0), self.poll_interval)

    def _leased(self) -> bool:
        return self.lease is None or self.lease()

    def _enabled(self) -> bool:
        """Enabled (by the file or an operator) and inside its schedule window, if any. The
        operator's switch is read before every claim, so `encore disable` holds at once."""
        if self.window is not None and not self.window.is_open(self.clock.now()):
            return False
        return self.store.item_overrides().get(self.item.name, self.item.enabled)

    def _try_start_adapter(self) -> bool:
        """Start the adapter once; if it cannot start, try again every retry_interval."""
        if self._ready or self.adapter is None:
            return True
        with self._ready_lock:
            if self._ready or self.clock.monotonic() < self._next_start_try:
                return self._ready
            try:
                warnings = self.adapter.start()
            except AdapterNotReady as exc:
                self._next_start_try = self.clock.monotonic() + self.retry_interval
                self.events.write("Error", f"adapter not ready, messages stay queued; "
                                        f"trying again in {self.retry_interval:g} s: {exc}",
                                        config_name=self.item.name, source_class="ItemRunner",
                                        source_method="start")
                return False
            for text in warnings:
                self.events.write("Warning", text, config_name=self.item.name,
                                        source_class=type(self.adapter).__name__,
                                        source_method="start")
            self._ready = True
            return True


def _quietly(func: object) -> None:
    try:
        func()  # type: ignore[operator]
    except Exception:  # noqa: BLE001 - tear-down must not stop the shutdown
        log.exception("error during tear-down")
