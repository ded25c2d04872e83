"""The inbound server: the production's inbound services on a uvicorn thread of
``encore run`` (docs/inbound.md), rebuilt at every reload while the old ones go on answering.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from engine.config.production import InboundConfig, ItemConfig, ProductionConfig
from engine.errors import ConfigurationError
from engine.inbound.app import create_app
from engine.inbound.auth import CallerAuth
from engine.inbound.base import InboundService
from engine.inbound.calls import CallRecorder, InboundContext
from engine.inbound.refusals import RefusalLog
from engine.observe.network import is_loopback
from engine.serving.batch_intake import BatchIntake
from engine.serving.limited_server import LimitedServer, limited_server
from engine.serving.limits import ServerLimits
from engine.store.sql import SqlStore

__all__ = ["InboundChange", "InboundServer", "inbound_http_server", "inbound_services",
           "prepare_inbound"]

log = logging.getLogger(__name__)

START_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0
GRACEFUL_SECONDS = 3.0


def inbound_items(production: ProductionConfig) -> tuple[ItemConfig, ...]:
    """The enabled inbound service items of ``production``."""
    return tuple(item for item in production.items if item.enabled
                 and isinstance(item.cls, type) and issubclass(item.cls, InboundService))


def inbound_services(production: ProductionConfig, store: SqlStore) -> list[InboundService]:
    """An instance of every enabled inbound service item, its ``on_init`` called."""
    services: list[InboundService] = []
    for item in inbound_items(production):
        cls: type[InboundService] = item.cls  # type: ignore[assignment]  # inbound_items checked
        try:
            service = cls(item.name, item.settings, events=store.events)
            service.on_init()
        except Exception as exc:
            tear_down(services)
            if isinstance(exc, ConfigurationError):
                raise
            raise ConfigurationError(f"{item.class_path} failed to start (on_init): "
                                     f"{type(exc).__name__}: {exc}", item=item.name) from exc
        services.append(service)
    return services


def tear_down(services: Sequence[InboundService]) -> None:
    """``on_tear_down`` of each of ``services``; an error is logged, never raised."""
    for service in services:
        try:
            service.on_tear_down()
        except Exception:
            log.exception("error during tear-down of %s", service.name)


class _Switch:
    """The ASGI app of the current services, replaced whole at a reload."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def inbound_http_server(app: ASGIApp, config: InboundConfig) -> LimitedServer:
    """The uvicorn server of the inbound services for ``config``, under the portal's caps."""
    for name in ("tls_cert", "tls_key"):
        path = getattr(config, name)
        if path and not Path(path).is_file():
            raise ConfigurationError(f"{path!r} is not a readable file", item="[inbound]",
                                     key=name)
    limits = ServerLimits.sized(where="[inbound]")
    return limited_server(app, host=config.host, port=config.port, limits=limits,
                          tls_cert=config.tls_cert, tls_key=config.tls_key,
                          log_level="warning", access_log=False, server_header=False,
                          lifespan="off", proxy_headers=False,
                          timeout_graceful_shutdown=int(GRACEFUL_SECONDS))


class InboundServer:
    """The inbound services of ``production`` on a daemon thread."""

    def __init__(self, store: SqlStore, production: ProductionConfig,
                 config: InboundConfig) -> None:
        self.config = config
        self.store = store
        self.services = inbound_services(production, store)
        self.recorder = CallRecorder(store)
        self.intake = BatchIntake(store, name="inbound-intake")
        self.context = InboundContext(store=store, production=production,
                                      auth=CallerAuth(store), refusals=RefusalLog(store.events),
                                      recorder=self.recorder, intake=self.intake)
        try:
            self._app = _Switch(create_app(self.services, self.context))
            self._server = inbound_http_server(self._app, config)
        except Exception:
            tear_down(self.services)
            raise
        self._thread = threading.Thread(target=self._server.run, name="inbound", daemon=True)

    @property
    def url(self) -> str:
        return f"{'https' if self.config.tls else 'http'}://{self.config.host}:{self.config.port}"

    def start(self) -> None:
        """Load every service's contract, then listen; ConfigurationError if it cannot."""
        for service in self.services:
            service.start()
        self._warn_if_exposed()
        self.recorder.start()
        self.intake.start()
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.recorder.stop()
                self.intake.stop()
                raise ConfigurationError(f"the inbound services could not listen on {self.url}",
                                         item="[inbound]")
            time.sleep(0.02)
        log.info("inbound services %s on %s", ", ".join(s.name for s in self.services),
                 self.url)

    def stop(self) -> None:
        """Stop taking requests, answer the waiting callers, close the server."""
        self.context.stopping.set()
        self.store.completions.wake_all()
        self._server.should_exit = True
        self._thread.join(STOP_TIMEOUT)
        self.intake.stop()  # requests still open may still commit
        self.recorder.stop()
        tear_down(self.services)

    def replace(self, production: ProductionConfig,
                services: list[InboundService] | None, app: ASGIApp | None) -> None:
        """After a reload: serve ``production`` and, if given, the new ``services``."""
        self.context.production = production
        if services is None or app is None:
            return
        old, self.services = self.services, services
        self._app.app = app
        tear_down(old)
        log.info("inbound services now %s on %s", ", ".join(s.name for s in services) or
                 "none", self.url)

    def _warn_if_exposed(self) -> None:
        if is_loopback(self.config.host) or self.config.tls:
            return
        self.store.events.write("Warning", f"the inbound services listen on {self.config.host}:"
                                f"{self.config.port} without TLS: requests, passwords and "
                                "tokens cross the network in clear; set tls_cert and tls_key in "
                                "[inbound], or keep it on loopback behind a TLS proxy",
                                source_class="InboundServer", source_method="start")


@dataclass
class InboundChange:
    """What a reload does to the inbound services, prepared before it commits to anything."""

    production: ProductionConfig
    services: list[InboundService] | None = None
    app: ASGIApp | None = None
    server: InboundServer | None = None
    remove: bool = False

    def apply(self, current: InboundServer | None) -> InboundServer | None:
        """The server that runs after the reload."""
        if self.remove or self.server is not None:
            if current is not None:
                current.stop()
            if self.server is not None:
                self.server.start()
            return self.server
        if current is not None:
            current.replace(self.production, self.services, self.app)
        return current

    def discard(self) -> None:
        """The reload was refused: tear down what was built for it."""
        tear_down(self.services or ())
        if self.server is not None:
            tear_down(self.server.services)


def prepare_inbound(current: InboundServer | None, store: SqlStore,
                    new: ProductionConfig) -> InboundChange:
    """Build what ``new`` needs of the inbound services, leaving ``current`` running;
    ConfigurationError (nothing left built) refuses the reload."""
    if new.inbound is None:
        return InboundChange(new, remove=current is not None)
    if current is None or current.config != new.inbound:
        return InboundChange(new, server=InboundServer(store, new, new.inbound))
    services = inbound_services(new, store)
    try:
        app = create_app(services, current.context)
        for service in services:
            service.prepare()
    except Exception:
        tear_down(services)
        raise
    return InboundChange(new, services=services, app=app)
