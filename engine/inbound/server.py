"""The inbound server: the production's inbound services on a uvicorn thread of
``encore run`` (``[inbound]`` in the production file, docs/inbound.md).

The same ASGI stack as the portal (Starlette under uvicorn), on its own port, loopback by
default, TLS from ``tls_cert``/``tls_key``. Any daemon of a PostgreSQL production may serve
it behind a load balancer: a request's message is committed to the shared database, and a
sync caller is woken by the commit that ends it on whichever daemon does.
:func:`inbound_http_server` is the one place the server is made: it holds the same
connection and read-time caps as the portal's (docs/security.md).

Services are built when the daemon starts; a SIGHUP reload does not change them (restart the
daemon after changing an inbound service or ``[inbound]``).
"""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from starlette.types import ASGIApp

from engine.config.production import InboundConfig, ProductionConfig
from engine.errors import ConfigurationError
from engine.inbound.app import create_app
from engine.inbound.auth import CallerAuth
from engine.inbound.base import InboundService
from engine.inbound.calls import CallRecorder, InboundContext
from engine.inbound.refusals import RefusalLog
from engine.portal.limited_server import LimitedServer, limited_server
from engine.portal.limits import ServerLimits
from engine.runtime.network import is_loopback
from engine.store.sql import SqlStore

__all__ = ["InboundServer", "inbound_http_server", "inbound_services"]

log = logging.getLogger(__name__)

START_TIMEOUT = 10.0  # seconds the server may take to listen
STOP_TIMEOUT = 5.0  # seconds the server may take to stop
GRACEFUL_SECONDS = 3.0  # seconds open requests may take to finish at a stop


def inbound_services(production: ProductionConfig, store: SqlStore) -> list[InboundService]:
    """An instance of every enabled inbound service item, its ``on_init`` called."""
    services: list[InboundService] = []
    for item in production.items:
        if not (isinstance(item.cls, type) and issubclass(item.cls, InboundService)):
            continue
        if not item.enabled:
            continue
        try:
            service = item.cls(item.name, item.settings, events=store.events)
            service.on_init()
        except ConfigurationError:
            raise
        except Exception as exc:  # noqa: BLE001 - user code: its error names the item
            raise ConfigurationError(f"{item.class_path} failed to start (on_init): "
                                     f"{type(exc).__name__}: {exc}", item=item.name) from exc
        services.append(service)
    return services


def inbound_http_server(app: ASGIApp, config: InboundConfig) -> LimitedServer:
    """The uvicorn server of the inbound services for ``config``, under the same caps as the
    portal's (docs/security.md, :mod:`engine.portal.limited_server`): connections in total and
    per client sized from the open-file limit (the process's one budget, shared with the
    portal), a request read within 10 s, idle keep-alive connections closed after 5 s."""
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
    """The inbound services of ``production`` on a daemon thread: :meth:`start`,
    :meth:`stop`."""

    def __init__(self, store: SqlStore, production: ProductionConfig,
                 config: InboundConfig) -> None:
        self.config = config
        self.store = store
        self.services = inbound_services(production, store)
        self.recorder = CallRecorder(store)
        self.context = InboundContext(store=store, production=production,
                                      auth=CallerAuth(store), refusals=RefusalLog(store.events),
                                      recorder=self.recorder)
        app = create_app(self.services, self.context)
        self._server = inbound_http_server(app, config)
        self._thread = threading.Thread(target=self._server.run, name="inbound", daemon=True)

    @property
    def url(self) -> str:
        return f"{'https' if self.config.tls else 'http'}://{self.config.host}:{self.config.port}"

    def start(self) -> None:
        """Load every service's contract, then listen, or raise ConfigurationError (the
        port is taken, say) within :data:`START_TIMEOUT` seconds."""
        for service in self.services:
            service.start()
        self._warn_if_exposed()
        self.recorder.start()
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.recorder.stop()
                raise ConfigurationError(f"the inbound services could not listen on {self.url}",
                                         item="[inbound]")
            time.sleep(0.02)
        log.info("inbound services %s on %s", ", ".join(s.name for s in self.services),
                 self.url)

    def stop(self) -> None:
        """Stop taking requests; callers waiting for a message are answered that it goes
        on; then the server closes."""
        self.context.stopping.set()
        self.store.completions.wake_all()
        self._server.should_exit = True
        self._thread.join(STOP_TIMEOUT)
        self.recorder.stop()
        for service in self.services:
            try:
                service.on_tear_down()
            except Exception:  # noqa: BLE001 - tear-down must not stop the shutdown
                log.exception("error during tear-down of %s", service.name)

    def _warn_if_exposed(self) -> None:
        if is_loopback(self.config.host) or self.config.tls:
            return
        self.store.events.write("Warning", f"the inbound services listen on {self.config.host}:"
                                f"{self.config.port} without TLS: requests, passwords and "
                                "tokens cross the network in clear; set tls_cert and tls_key in "
                                "[inbound], or keep it on loopback behind a TLS proxy",
                                source_class="InboundServer", source_method="start")
