"""Prometheus metrics and a health check, served over HTTP.

:class:`Metrics` is the registry workers feed (one per daemon, so daemons in one process never mix);
:class:`MetricsServer` serves ``GET /metrics`` and ``GET /healthz``.
"""
from __future__ import annotations

import errno
import logging
import math
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from engine.attempt import AttemptObserver, AttemptReport
from engine.errors import ConfigurationError
from engine.observe.network import is_loopback

__all__ = ["CONTENT_TYPE", "DEFAULT_BUCKETS", "ItemMetrics", "Metrics", "MetricsServer"]

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Upper bounds (seconds) of the attempt-duration histogram; +Inf is always added.
DEFAULT_BUCKETS: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

HealthCheck = Callable[[], tuple[bool, str]]

# no `<name>_created` series: dashboards read the plain 0.0.4 format
prometheus_client.disable_created_metrics()


class Metrics:
    """Counters, gauges and a histogram per item, rendered for Prometheus: ``encore_queue_depth``
    (read at each scrape), ``encore_attempts_total{outcome}``, ``encore_give_ups_total`` (retries
    ran out), ``encore_attempt_seconds``; with a breaker or a rate limit, ``encore_breaker_open``
    (1 while open or half-open, as last read) and ``encore_rate_limit_wait_seconds_total``."""

    def __init__(self, buckets: Iterable[float] = DEFAULT_BUCKETS) -> None:
        self.buckets = tuple(sorted(float(b) for b in buckets if not math.isinf(b)))
        self.registry = CollectorRegistry(auto_describe=True)
        self._queue_depth: Callable[[], Mapping[str, int]] | None = None
        self.registry.register(_QueueDepthCollector(self._read_queue_depths))
        self._attempts = Counter("encore_attempts", "Attempts, by item and outcome.",
                                 ["item", "outcome"], registry=self.registry)
        self._give_ups = Counter("encore_give_ups",
                                 "Messages that ended in Error after their retries ran out.",
                                 ["item"], registry=self.registry)
        self._seconds = Histogram("encore_attempt_seconds", "Duration of attempts in seconds.",
                                  ["item"], buckets=self.buckets, registry=self.registry)
        self._lock = threading.Lock()
        # cached children: .labels() per attempt would cost a locked lookup
        self._attempt_children: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._breaker_open: Gauge | None = None
        self._rate_waits: Counter | None = None
        # the console's per-minute counters, fed by the same observer; set by the daemon
        self.rollup: Any = None

    def observe_attempt(self, item: str, outcome: str, seconds: float) -> None:
        """Count one attempt of ``item`` ending with ``outcome`` after ``seconds``."""
        children = self._attempt_children.get((item, outcome))
        if children is None:
            children = self._attempt_children.setdefault(
                (item, outcome), (self._attempts.labels(item, outcome), self._seconds.labels(item)))
        children[0].inc()
        children[1].observe(max(float(seconds), 0.0))

    def give_up(self, item: str) -> None:
        """Count one message of ``item`` that gave up."""
        self._give_ups.labels(item).inc()

    def set_breaker_open(self, item: str, is_open: bool) -> None:
        """The circuit breaker of ``item`` is open or half-open (True) or closed (False)."""
        with self._lock:
            if self._breaker_open is None:
                self._breaker_open = Gauge(
                    "encore_breaker_open",
                    "1 while the item's circuit breaker is open or half-open, 0 while closed.",
                    ["item"], registry=self.registry)
        self._breaker_open.labels(item).set(1 if is_open else 0)

    def rate_limited(self, item: str, seconds: float) -> None:
        """A worker of ``item`` waits ``seconds`` for a slot of its rate limit."""
        with self._lock:
            if self._rate_waits is None:
                self._rate_waits = Counter(
                    "encore_rate_limit_wait_seconds",
                    "Seconds workers waited for a slot of the item's rate limit.",
                    ["item"], registry=self.registry)
        self._rate_waits.labels(item).inc(max(float(seconds), 0.0))

    def set_queue_depth_source(self, source: Callable[[], Mapping[str, int]] | None) -> None:
        """``source()`` returns the queue depth per item at each scrape; None: no samples."""
        self._queue_depth = source

    def render(self) -> str:
        """Every metric in the Prometheus text exposition format 0.0.4."""
        return generate_latest(self.registry).decode("utf-8")

    def _read_queue_depths(self) -> Mapping[str, int]:
        source = self._queue_depth
        if source is None:
            return {}
        try:
            return dict(source())
        except Exception:
            log.exception("could not read queue depths for the metrics")
            return {}


class ItemMetrics(AttemptObserver):
    """One item's delivery metrics, as delivery middleware; shared by its workers."""

    def __init__(self, metrics: Metrics, item: str) -> None:
        self.metrics = metrics
        self.item = item

    def after_attempt(self, row: object, report: AttemptReport) -> None:
        self.metrics.observe_attempt(self.item, report.outcome, report.seconds)
        if self.metrics.rollup is not None:
            self.metrics.rollup.attempt(self.item, report.outcome, report.seconds,
                                        report.number)

    def on_complete(self, row: object, number: int) -> None:
        if self.metrics.rollup is not None:
            self.metrics.rollup.completed(self.item)

    def on_give_up(self, row: object, text: str) -> None:
        self.metrics.give_up(self.item)
        if self.metrics.rollup is not None:
            self.metrics.rollup.gave_up(self.item)


class _QueueDepthCollector:
    """``encore_queue_depth``, read from the database at each scrape."""

    def __init__(self, read: Callable[[], Mapping[str, int]]) -> None:
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("encore_queue_depth", "Messages waiting in the item's queue.",
                                   labels=["item"])
        for item, depth in sorted(self._read().items()):
            family.add_metric([item], depth)
        yield family

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("encore_queue_depth", "Messages waiting in the item's queue.",
                                labels=["item"])


class MetricsServer:
    """Serves ``GET /metrics`` and ``GET /healthz`` from a daemon thread. ``port=0`` picks a free
    port; ``host`` defaults to loopback. ``health()`` returns ``(ok, reason)``: 200 or 503."""

    def __init__(self, metrics: Metrics, host: str = "127.0.0.1", port: int = 0,
                 health: HealthCheck | None = None) -> None:
        self.metrics = metrics
        self.host = host
        self.port = port
        self.health = health
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` of the running server (the actual port when 0 was asked)."""
        if self._server is None:
            raise RuntimeError("the metrics server is not started")
        host, port = self._server.server_address[:2]
        return f"http://[{host!s}]:{port}" if ":" in str(host) else f"http://{host!s}:{port}"

    def start(self) -> None:
        """Bind and serve in a daemon thread; raises :class:`ConfigurationError` when it cannot
        bind."""
        if self._server is not None:
            raise RuntimeError("the metrics server is already started")
        try:
            server = _Server((self.host, self.port), _Handler, owner=self)
        except OSError as exc:
            raise _bind_error(self.host, self.port, exc) from exc
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="encore-metrics", daemon=True)
        self._thread.start()
        log.info("metrics and health check at %s/metrics, %s/healthz", self.url, self.url)

    def stop(self) -> None:
        """Stop serving and close the socket. Safe to call twice."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> MetricsServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def exposure_warning(self) -> str | None:
        """The ``Warning`` text for an endpoint listening beyond loopback; None on loopback."""
        if is_loopback(self.host):
            return None
        return (f"the metrics endpoint listens on {self.host}:{self.port}, beyond loopback: "
                "whoever can reach it reads item names, queue depths and the daemon's health "
                "without authentication; set metrics_host to 127.0.0.1 (behind a proxy), or "
                "restrict the port with a firewall")

    def check_health(self) -> tuple[bool, str]:
        """The health callback's answer; one that raises means unhealthy (only its type is returned,
        the rest is logged)."""
        if self.health is None:
            return True, "ok"
        try:
            ok, reason = self.health()
        except Exception as exc:
            log.exception("health check failed")
            return False, f"health check failed: {type(exc).__name__}"
        return bool(ok), str(reason or ("ok" if ok else "unhealthy"))


def _bind_error(host: str, port: int, exc: OSError) -> ConfigurationError:
    """Why the metrics endpoint cannot listen on ``host:port``, and what to do."""
    where = f"cannot serve the metrics on {host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return ConfigurationError(f"{where}: port {port} is already in use (by another "
                                  "`encore run`, or another program); choose another "
                                  "metrics_port, or 0 for none", key="metrics_port")
    if exc.errno == errno.EACCES:
        return ConfigurationError(f"{where}: permission denied (ports below 1024 need "
                                  "privileges)", key="metrics_port")
    if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
        return ConfigurationError(f"{where}: {host!r} is not an address of this machine",
                                  key="metrics_host")
    return ConfigurationError(f"{where}: {exc.strerror or exc}", key="metrics_port")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *,
                 owner: MetricsServer) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.owner = owner
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("metrics request from %s failed", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "encore-metrics"

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        owner = self.server.owner
        if path == "/metrics":
            try:
                body = owner.metrics.render()
            except Exception:
                log.exception("could not render the metrics")
                self._reply(500, "could not render the metrics\n")
                return
            self._reply(200, body, content_type=CONTENT_TYPE)
        elif path == "/healthz":
            ok, reason = owner.check_health()
            self._reply(200 if ok else 503, reason + "\n")
        else:
            self._reply(404, "not found: try /metrics or /healthz\n")

    def _reply(self, status: int, text: str, *,
               content_type: str = "text/plain; charset=utf-8") -> None:
        data = text.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("metrics %s - %s", self.address_string(), format % args)
