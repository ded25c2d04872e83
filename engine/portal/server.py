"""Serving the portal with uvicorn, in the foreground or on a thread of ``encore run``.

Beyond loopback without TLS it still starts but warns; either way the ``[portal]`` caps hold,
so a flood of connections cannot take the descriptors deliveries need.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from engine.config.production import PortalConfig, ProductionConfig
from engine.errors import ConfigurationError
from engine.observe.network import is_loopback
from engine.portal.app import create_app
from engine.serving.limited_server import LimitedServer, limited_server
from engine.serving.limits import ServerLimits
from engine.store.sql import SqlStore

__all__ = ["PortalServer", "is_loopback", "portal_limits", "portal_server", "serve",
           "warn_if_exposed"]

log = logging.getLogger(__name__)

START_TIMEOUT = 10.0  # seconds a threaded portal may take to listen
STOP_TIMEOUT = 5.0  # seconds a threaded portal may take to stop


def warn_if_exposed(store: SqlStore, config: PortalConfig) -> None:
    """The ``Warning`` event of a portal beyond loopback without TLS."""
    if is_loopback(config.host) or config.tls:
        return
    store.events.write("Warning", f"the portal listens on {config.host}:{config.port} without "
                       "TLS: passwords, session cookies and API tokens cross the network in "
                       "clear; set tls_cert and tls_key in [portal], or keep it on loopback "
                       "behind a TLS proxy", source_class="Portal", source_method="serve")


def portal_limits(config: PortalConfig) -> ServerLimits:
    """The caps of ``[portal]``, sized from this process's open-file limit."""
    return ServerLimits.sized(max_connections=config.max_connections,
                              max_connections_per_client=config.max_connections_per_client,
                              read_timeout=config.read_timeout,
                              keepalive_timeout=config.keepalive_timeout,
                              spared=config.forwarded_allow_ips)


def portal_server(store: SqlStore, production: ProductionConfig, config: PortalConfig, *,
                  env: Mapping[str, str] | None = None,
                  follow_file: bool = False) -> LimitedServer:
    """The limited uvicorn server of a portal for ``production`` on ``store``
    (``follow_file``: reload the production file when it changes — a standalone portal)."""
    for name in ("tls_cert", "tls_key"):
        path = getattr(config, name)
        if path and not Path(path).is_file():
            raise ConfigurationError(f"{path!r} is not a readable file", item="[portal]",
                                     key=name)
    limits = portal_limits(config)
    app = create_app(store, production, tls=config.tls, env=env,
                     max_waiters=config.max_waiters, follow_file=follow_file)
    # X-Forwarded-For names the client only when one of the proxies [portal] names sent it
    # (uvicorn would trust it from 127.0.0.1, or $FORWARDED_ALLOW_IPS, by default)
    proxies = list(config.forwarded_allow_ips)
    return limited_server(app, host=config.host, port=config.port, limits=limits,
                          tls_cert=config.tls_cert, tls_key=config.tls_key,
                          log_level="warning", access_log=False, server_header=False,
                          lifespan="off", proxy_headers=bool(proxies),
                          forwarded_allow_ips=proxies or None)


def serve(store: SqlStore, production: ProductionConfig, config: PortalConfig, *,
          env: Mapping[str, str] | None = None) -> None:
    """Serve in the foreground until SIGINT/SIGTERM, following the production file."""
    server = portal_server(store, production, config, env=env, follow_file=True)
    warn_if_exposed(store, config)
    limits = server.limits
    log.info("portal on %s://%s:%d (at most %d connections, %d per client; read timeout "
             "%g s)", "https" if config.tls else "http", config.host, config.port,
             limits.max_connections, limits.max_connections_per_client, limits.read_timeout)
    server.run()


class PortalServer:
    """The portal on a daemon thread of ``encore run``: :meth:`start`, :meth:`stop`."""

    def __init__(self, store: SqlStore, production: ProductionConfig, config: PortalConfig, *,
                 env: Mapping[str, str] | None = None) -> None:
        self.config = config
        self._store = store
        self._server = portal_server(store, production, config, env=env)
        self._thread = threading.Thread(target=self._server.run, name="portal", daemon=True)

    @property
    def url(self) -> str:
        return f"{'https' if self.config.tls else 'http'}://{self.config.host}:{self.config.port}"

    def start(self) -> None:
        """Listen, or raise ConfigurationError (the port is taken, say) within
        :data:`START_TIMEOUT` seconds. uvicorn installs no signal handlers off the main
        thread: the daemon's own handlers stay."""
        warn_if_exposed(self._store, self.config)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ConfigurationError(f"the portal could not listen on {self.url}",
                                         item="[portal]")
            time.sleep(0.02)
        limits = self._server.limits
        log.info("portal on %s (at most %d connections, %d per client; read timeout %g s)",
                 self.url, limits.max_connections, limits.max_connections_per_client,
                 limits.read_timeout)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(STOP_TIMEOUT)
