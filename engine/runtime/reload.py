"""The daemon's reloader: re-reads the production file (SIGHUP, ``encore reload``, an admin's
Reload) and restarts single items.

A reload is all or nothing (docs/security.md). Reloads and restarts run one at a time on the
executor the daemon's runtime gives them: in real time a thread of their own, never the daemon's
loop (building an item may take seconds).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Executor, Future
from typing import TYPE_CHECKING, Protocol

from engine.clock import Clock
from engine.config.production import ProductionConfig, load_production
from engine.delivery.item import ItemRunner
from engine.errors import ConfigurationError, EncoreError
from engine.runtime.alerts import AlertingEventLog
from engine.runtime.cluster import LeaseKeeper, item_lease_name
from engine.runtime.console import ConsoleReport
from engine.runtime.execution import Runtime
from engine.runtime.lifecycle import LifecycleLog, LifeStep
from engine.runtime.queue_alerts import QueueAlerts
from engine.runtime.roster import ItemRoster
from engine.runtime.scheduler import ProductionScheduler
from engine.runtime.steps import guarded, operation_items
from engine.store import running
from engine.store.notify import Announcement, Kind
from engine.store.sql import SqlStore

if TYPE_CHECKING:  # the inbound services (Starlette, zeep) load only for a production with them
    from engine.inbound.server import InboundChange, InboundServer

log = logging.getLogger("engine.runtime.daemon")

# `encore reload` waits for each reload's last event: Info "RELOADED…" or Error "REFUSED…"
RELOADED = "production reloaded"
REFUSED = "reload refused"


def _reason(exc: Exception) -> str:
    """Why ``exc`` stopped an item from starting, as the events and the console say it."""
    return str(exc) if isinstance(exc, EncoreError) else f"{type(exc).__name__}: {exc}"


class ReloadHost(Protocol):
    """What the reloader needs of its daemon (:class:`engine.runtime.daemon.Daemon`)."""

    @property
    def production(self) -> ProductionConfig: ...

    @production.setter
    def production(self, value: ProductionConfig) -> None: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def events(self) -> AlertingEventLog: ...

    @property
    def lifecycle(self) -> LifecycleLog: ...

    @property
    def leases(self) -> LeaseKeeper: ...

    @property
    def console(self) -> ConsoleReport: ...

    @property
    def wake(self) -> threading.Event: ...

    @property
    def stop_requested(self) -> threading.Event: ...

    @property
    def runtime(self) -> Runtime: ...

    @property
    def roster(self) -> ItemRoster: ...

    @property
    def id(self) -> str: ...

    @property
    def store(self) -> SqlStore: ...

    @property
    def env(self) -> Mapping[str, str]: ...

    @property
    def runners(self) -> dict[str, ItemRunner]: ...

    @property
    def scheduler(self) -> ProductionScheduler: ...

    @property
    def queue_alerts(self) -> QueueAlerts: ...

    inbound: InboundServer | None


class Reloader:
    """Reloads the production of ``daemon``, and restarts its items, when asked."""

    def __init__(self, daemon: ReloadHost) -> None:
        self.daemon = daemon
        self.requested = threading.Event()
        self.refused: dict[str, str] = {}
        self.failed: dict[str, str] = {}
        self.applied_changes = ""
        self.file_hash = running.file_hash(*daemon.production.files)
        self._executor: Executor | None = None
        self._reloading: Future[None] | None = None
        self._restarts: set[str] = set()
        self._restarts_lock = threading.Lock()

    def request(self) -> None:
        """Reload at the daemon's next step (SIGHUP, an admin's Reload)."""
        self.requested.set()
        self.daemon.wake.set()

    def request_restart(self, name: str) -> None:
        """Restart item ``name`` at the daemon's next step."""
        with self._restarts_lock:
            self._restarts.add(name)
        self.daemon.wake.set()

    def reload_if_asked(self) -> None:
        """Hand a requested reload to the reload executor."""
        if not self.requested.is_set() or self.daemon.stop_requested.is_set():
            return
        if self._reloading is not None and not self._reloading.done():
            return  # asked again meanwhile: it runs when this one is done
        self.requested.clear()
        self._reloading = self._submit(self.reload)

    def restart_if_asked(self) -> None:
        """Hand the requested restarts to the reload executor."""
        with self._restarts_lock:
            names, self._restarts = sorted(self._restarts), set()
        for name in names:
            self._submit(self.restart, name)

    def _submit(self, work: Callable[..., None], *args: str) -> Future[None]:
        """``work(*args)`` on the reload executor; the daemon's loop is woken when it ends."""
        if self._executor is None:
            self._executor = self.daemon.runtime.executor("encore-reload", 1)
        future = self._executor.submit(work, *args)
        future.add_done_callback(self._done)
        return future

    def _done(self, future: Future[None]) -> None:
        """Wake the daemon's loop after a reload or restart, and log what it raised."""
        error = None if future.cancelled() else future.exception()
        if error is not None:
            log.error("unexpected error on the reload thread", exc_info=error)
        self.daemon.wake.set()

    def finish(self) -> None:
        """At a stop: let a reload in progress end first."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def reload(self) -> None:
        """Re-read the production file, all or nothing: build new and changed items first; on any
        failure refuse with one ``Error`` event and change nothing, else swap the changed and
        removed runners."""
        daemon = self.daemon
        if daemon.production.path is None:
            log.warning("reload requested, but the production did not come from a file")
            return
        inbound: InboundChange | None = None
        try:
            loaded_hash = running.file_hash(*daemon.production.files)
            new = load_production(daemon.production.path, daemon.env)
            if new.files != daemon.production.files:
                loaded_hash = running.file_hash(*new.files)
            if new.inbound is not None or daemon.inbound is not None:
                from engine.inbound.server import prepare_inbound

                inbound = prepare_inbound(daemon.inbound, daemon.store, new)
            built = self._build_changed(new)
        except Exception as exc:
            if inbound is not None:
                inbound.discard()
            self._refuse(exc)
            return
        self.file_hash = loaded_hash
        self._switch_to(new, built)
        stopped = self._switch_inbound(inbound) if inbound is not None else None
        self._applied(new, stopped)

    def _build_changed(self, new: ProductionConfig) -> dict[str, ItemRunner]:
        """Prepared runners for the new or changed operation items of ``new``."""
        current = {i.name: i for i in operation_items(self.daemon.production)}
        return self.daemon.roster.build_runners([i for i in operation_items(new)
                                                 if current.get(i.name) != i])

    def _refuse(self, exc: Exception) -> None:
        """One ``Error`` event naming the item (when known) and the reason."""
        reason = _reason(exc)
        text = f"{REFUSED}, the production keeps running unchanged: {reason}"
        if not isinstance(exc, EncoreError):
            log.error("unexpected error during the reload", exc_info=exc)
        self.daemon.lifecycle.write("Error", LifeStep.RELOAD, text,
                                    item=getattr(exc, "item", None))
        self.refused = {getattr(exc, "item", None) or "(production file)": reason}
        guarded(self.daemon.console.report_states, "the item states")

    def _switch_to(self, new: ProductionConfig, built: dict[str, ItemRunner]) -> None:
        """Stop the runners of changed and removed items, then start ``built``."""
        daemon = self.daemon
        names = {i.name for i in operation_items(new)}
        stale = [n for n in daemon.runners if n in built or n not in names]
        changes = _changes(set(daemon.runners), names, set(built), self._reconfigured(new))
        self._stop([daemon.runners.pop(name) for name in stale], new.shutdown_timeout)
        daemon.production = new
        daemon.events.production = new
        daemon.queue_alerts.schedule(daemon.scheduler)
        for runner in built.values():
            daemon.roster.launch(runner)
        self.refused = {}
        self.failed = {n: r for n, r in self.failed.items() if n not in built}
        guarded(daemon.console.report_states, "the item states")
        guarded(lambda: running.announce(
            daemon.store, [Announcement.control(Kind.RELOADED, daemon.id)]), "the announcement")
        self.applied_changes = changes

    def _reconfigured(self, new: ProductionConfig) -> list[str]:
        """What ``new`` changes that applies without restarting a runner."""
        old = self.daemon.production
        runs = {i.name for i in operation_items(old) + operation_items(new)}
        current = {i.name: i for i in old.items if i.name not in runs}
        changed = [i.name for i in new.items if i.name not in runs and current.get(i.name) != i]
        return sorted(changed) + sorted(set(current) - {i.name for i in new.items})

    def _applied(self, new: ProductionConfig, inbound_stopped: str | None) -> None:
        """The ``Info`` event ending an applied reload."""
        daemon = self.daemon
        where = new.path.resolve() if new.path is not None else "?"
        text = (f"{RELOADED} from {where} by daemon {daemon.id}: {self.applied_changes}; "
                f"{len(daemon.runners)} item(s) running")
        if inbound_stopped is not None:
            text += f"; the inbound services are stopped: {inbound_stopped}"
        daemon.lifecycle.write("Info", LifeStep.RELOAD, text)

    def _switch_inbound(self, change: InboundChange) -> str | None:
        """Switch inbound services; return why a new server cannot listen (else None)."""
        daemon = self.daemon
        try:
            daemon.inbound = change.apply(daemon.inbound)
        except ConfigurationError as exc:
            daemon.inbound = None
            change.discard()
            daemon.lifecycle.write("Error", LifeStep.RELOAD, f"the inbound services are "
                                   f"stopped: {exc}; fix [inbound] and reload",
                                   item="[inbound]")
            return str(exc)
        return None

    def _stop(self, runners: Iterable[ItemRunner], timeout: float) -> None:
        """Stop ``runners`` within ``timeout`` seconds and give up their FIFO leases."""
        stopping = list(runners)
        for runner in stopping:
            runner.request_stop()
        clock = self.daemon.clock
        deadline = clock.monotonic() + timeout
        for runner in stopping:
            runner.join(max(deadline - clock.monotonic(), 0.0))
            if runner.lease is not None:
                self.daemon.leases.release(item_lease_name(runner.item.name))

    def restart(self, name: str) -> None:
        """Tear item ``name`` down and start it again (left stopped if it cannot)."""
        daemon = self.daemon
        old = daemon.runners.pop(name, None)
        if old is None or daemon.stop_requested.is_set():
            if old is not None:
                daemon.runners[name] = old
            return
        self._stop([old], daemon.production.shutdown_timeout)
        try:
            item = daemon.production.item(name)
            runner = daemon.roster.build_runner(item)
        except Exception as exc:
            reason = _reason(exc)
            self.failed[name] = reason
            daemon.lifecycle.write("Error", LifeStep.RESTART,
                                   f"restart failed, the item is stopped: {reason}", item=name)
        else:
            self.failed.pop(name, None)
            daemon.roster.launch(runner)
            daemon.lifecycle.write("Info", LifeStep.RESTART,
                                   f"item restarted by daemon {daemon.id}", item=name)
        daemon.console.report_states()


def _changes(running: set[str], names: set[str], built: set[str],
             others: list[str]) -> str:
    """What a reload changed: items started, restarted, stopped, and other items changed."""
    parts = [(label, sorted(found)) for label, found in (
        ("started", built - running), ("restarted", built & running),
        ("stopped", running - names), ("other items changed", set(others)))]
    text = "; ".join(f"{label} {', '.join(found)}" for label, found in parts if found)
    return text or "nothing changed"
