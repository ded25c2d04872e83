"""The outbound adapter contract: attempts, failover and error translation.

Workers share an adapter, so attempt state is thread-local. Every transport method goes through
:meth:`OutboundAdapter.call`, which picks the server, opens the deadline scope and turns
third-party exceptions into Encore's errors (here and nowhere else).
"""
from __future__ import annotations

import logging
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from adapters.credentials import Credentials, resolve_credentials
from adapters.deadline import TryScope, attempt_deadline, try_scope
from adapters.failover import ServerPool
from adapters.settings import (
    COMMON_SETTINGS,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_RESPONSE_TIMEOUT,
    AdapterSettings,
)
from adapters.urls import redact_userinfo, take_url_credentials, url_credentials_warning
from engine.attempt import AttemptContext, HttpExchange, servers_text
from engine.clock import Clock, SystemClock
from engine.errors import (
    AdapterError,
    AdapterNotReady,
    ConfigurationError,
    NotSent,
    ResponseTimeout,
)
from engine.settings import Setting, validate_settings

__all__ = ["DEFAULT_CONNECT_TIMEOUT", "DEFAULT_RESPONSE_TIMEOUT", "AttemptContext",
           "InvalidRequest", "OutboundAdapter"]

log = logging.getLogger(__name__)


class InvalidRequest(NotSent):
    """The request cannot be sent as given; sending it again would fail the same way."""

    outcome = "error"
    retryable = False


class OutboundAdapter(ABC):
    """Base of every outbound adapter; subclasses declare ``SETTINGS`` and ``settings_class``.

    Of ``settings`` it keeps and validates only the keys it declares."""

    SETTINGS: ClassVar[tuple[Setting, ...]] = COMMON_SETTINGS
    settings_class: ClassVar[type[AdapterSettings]] = AdapterSettings

    def __init__(self, settings: Mapping[str, Any], *, item_name: str = "", pool_size: int = 1,
                 env: Mapping[str, str] | None = None, clock: Clock | None = None) -> None:
        own = self._own_settings(settings, item_name)
        self.settings, self.url_credentials, self._url_credential_keys = \
            take_url_credentials(own)
        self.adapter_settings = self.settings_class.from_validated(self.settings)
        self.item_name = item_name
        self.pool_size = pool_size
        self.env: Mapping[str, str] = env if env is not None else {}
        self.clock: Clock = clock or SystemClock()
        self.credentials: Credentials | None = None
        self._servers: ServerPool | None = None
        self._local = threading.local()

    @classmethod
    def _own_settings(cls, settings: Mapping[str, Any], item: str) -> dict[str, Any]:
        names = {n for s in cls.SETTINGS for n in s.names()}
        mine = {k: v for k, v in settings.items() if k in names and v is not None}
        return validate_settings(item, mine, cls.SETTINGS)

    @property
    def response_timeout(self) -> float:
        """Seconds for a whole attempt; -1 = no limit (see :func:`attempt_deadline`)."""
        return self.adapter_settings.response_timeout

    @property
    def idempotent(self) -> bool:
        """False: an outcome-unknown failure must not be re-sent (docs/retries.md)."""
        return self.adapter_settings.idempotent

    @property
    def on_unknown_outcome(self) -> str:
        """``"error"`` or ``"suspend"``: the fate of an outcome-unknown non-idempotent message."""
        return self.adapter_settings.on_unknown_outcome

    @property
    def retry_on_status(self) -> tuple[int, ...]:
        """HTTP statuses for which the adapter asks for a retry."""
        return self.adapter_settings.retry_on_status

    def start(self) -> list[str]:
        """Prepare the transport; return warnings. Raises AdapterNotReady (try later) or
        ConfigurationError."""
        options = self.adapter_settings
        if options.credentials:
            self.credentials = resolve_credentials(options.credentials, self.env,
                                                   item=self.item_name)
        for key, path in (("ca_bundle", options.ca_bundle), ("client_cert", options.client_cert),
                          ("client_key", options.client_key)):
            if path and not os.path.isfile(path):
                raise AdapterNotReady(f"item {self.item_name!r}: {key} {path!r} is not a "
                                      "readable file")
        self._open()
        servers = self._targets()
        if not servers:
            raise ConfigurationError("no server to send to; set url or servers",
                                     item=self.item_name or None, key="servers")
        self._servers = ServerPool(servers, cooldown=options.bad_server_cooldown,
                                   clock=self.clock, item_name=self.item_name)
        warnings = []
        if self._url_credential_keys:
            warnings.append(url_credentials_warning(self.item_name, self._url_credential_keys))
        if not options.ssl_verify:
            warnings.append(f"TLS certificate verification is off for item {self.item_name!r} "
                            "(ssl_verify = false): its servers' identity is not checked")
        return warnings

    def stop(self) -> None:
        """Release connections."""

    def next_server(self) -> str | None:
        """The server the next attempt goes to first; None before :meth:`start`."""
        return self._servers.pick() if self._servers is not None else None

    def begin_attempt(self, ctx: AttemptContext) -> None:
        self._local.ctx = ctx
        self._local.tried = []
        self._local.recorded = ctx.server
        self._local.exchange = None

    def end_attempt(self) -> str | None:
        """Close the attempt; return the servers it went to, in order."""
        server = servers_text(getattr(self._local, "tried", None) or [])
        self._local.ctx = None
        self._local.tried = []
        return server

    def current_attempt(self) -> AttemptContext:
        """The attempt in progress, or one with a fresh deadline when called outside the worker."""
        ctx = getattr(self._local, "ctx", None)
        if ctx is None:
            ctx = AttemptContext(deadline=attempt_deadline(self.clock.monotonic(),
                                                           self.response_timeout),
                                 idempotency_key="")
        return ctx

    def note_server(self, server: str) -> None:
        """Record ``server`` for the current attempt before a request leaves for it, so a
        kill -9 cannot hide where it went."""
        tried: list[str] | None = getattr(self._local, "tried", None)
        if tried is None:
            tried = self._local.tried = []
        if server in tried:
            return
        tried.append(server)
        text = servers_text(tried)
        ctx = getattr(self._local, "ctx", None)
        if (text != getattr(self._local, "recorded", None) and ctx is not None
                and ctx.record_server is not None and text is not None):
            ctx.record_server(text)
        self._local.recorded = text

    def exchange(self) -> HttpExchange | None:
        """The last HTTP request of this thread's current (or just ended) attempt, or None."""
        return getattr(self._local, "exchange", None)

    def attempt_headers(self) -> dict[str, str]:
        """HTTP headers every request of the current attempt carries."""
        ctx = self.current_attempt()
        header, key = self.adapter_settings.idempotency_header, ctx.idempotency_key
        return {**ctx.headers, header: key} if header and key else dict(ctx.headers)

    def call(self, request: Any) -> Any:
        """Send ``request`` within the attempt's deadline, failing over on *not sent*
        errors while time is left; return the answer."""
        if self._servers is None:
            raise AdapterNotReady(f"item {self.item_name!r}: the adapter is not started")
        ctx = self.current_attempt()
        tried: list[str] = []
        while (server := self._servers.pick(exclude=tried)) is not None:
            tried.append(server)
            self.note_server(server)
            try:
                result = self._try_server(server, request, ctx)
            except AdapterError as err:
                self._settle_error(err, server)
                if not self._fail_over(err, ctx, tried):
                    raise
                log.info("item %s: %s not sent (%s); trying the next server",
                         self.item_name, server, err)
                continue
            self._servers.mark_good(server)
            return result
        raise AssertionError("unreachable: a pool always offers a first server")

    def _try_server(self, server: str, request: Any, ctx: AttemptContext) -> Any:
        with try_scope(ctx.deadline, self.clock.monotonic) as scope:
            try:
                result = self._transmit(server, request, scope)
            except AdapterError:
                raise
            except Exception as exc:  # third-party: translated here, and only here
                err = self._classify(exc, scope, server)
                if err is None:
                    raise
                raise err from exc
            finally:
                if scope.exchange is not None:
                    self._local.exchange = scope.exchange
            if scope.expired():  # a response completed after the deadline is discarded
                raise ResponseTimeout(f"the response from {server} came after the response "
                                      f"timeout of {self.response_timeout:g} seconds")
        return result

    def _settle_error(self, err: AdapterError, server: str) -> None:
        err.server = server
        err.text = self.redact(err.text)
        err.args = (err.text,)
        if err.retryable and self._servers is not None:
            self._servers.mark_bad(server)

    def _fail_over(self, err: AdapterError, ctx: AttemptContext, tried: list[str]) -> bool:
        assert self._servers is not None
        return (isinstance(err, NotSent) and err.retryable
                and self._servers.pick(exclude=tried) is not None
                and ctx.deadline > self.clock.monotonic())

    def redact(self, text: str) -> str:
        """``text`` without any secret of this item or any URL's user and password."""
        for secret in (self.credentials, *self.url_credentials.values()):
            if secret is not None:
                text = secret.redact(text)
        return redact_userinfo(text)

    @abstractmethod
    def _open(self) -> None:
        """Build the transport (sessions, clients) from the settings; called by :meth:`start`."""

    @abstractmethod
    def _targets(self) -> list[str]:
        """The URLs to fail over across, in order of preference (after the transport is ready)."""

    @abstractmethod
    def _transmit(self, server: str, request: Any, scope: TryScope) -> Any:
        """Send ``request`` to ``server`` once under ``scope``'s deadline; return the answer."""

    @abstractmethod
    def _classify(self, exc: Exception, scope: TryScope, server: str) -> AdapterError | None:
        """Encore's error for a third-party exception, or None to let it through unchanged."""
