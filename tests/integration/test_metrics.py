"""The metrics endpoint over real HTTP: Prometheus text 0.0.4, counters, the histogram,
label escaping, /healthz, 404s, and loopback by default."""
from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import pytest
import requests

from engine.observe.metrics import DEFAULT_BUCKETS, Metrics, MetricsServer

TIMEOUT = 5.0  # seconds for one HTTP request to the local server

# name{labels} value — the label block is optional; values are Go floats (+Inf, NaN, 1e-05)
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> tuple[dict[tuple[str, frozenset[tuple[str, str]]], float],
                              dict[str, str], dict[str, str]]:
    """Samples keyed by (name, labels), plus the TYPE and HELP of each metric family."""
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    types: dict[str, str] = {}
    helps: dict[str, str] = {}
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line[len("# TYPE "):].split(" ", 1)
            types[name] = kind
        elif line.startswith("# HELP "):
            name, doc = line[len("# HELP "):].split(" ", 1)
            helps[name] = doc
        else:
            match = SAMPLE.match(line)
            assert match, f"not a sample line: {line!r}"
            name, block, value = match.groups()
            labels = frozenset((k, unescape(v)) for k, v in LABEL.findall(block or ""))
            samples[(name, labels)] = float(value)
    return samples, types, helps


def unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


class Health:
    """A health check the test can flip."""

    def __init__(self) -> None:
        self.ok, self.reason = True, "ok"
        self.lock = threading.Lock()

    def __call__(self) -> tuple[bool, str]:
        with self.lock:
            return self.ok, self.reason


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def health() -> Health:
    return Health()


@pytest.fixture
def server(metrics: Metrics, health: Health) -> Iterator[MetricsServer]:
    srv = MetricsServer(metrics, health=health)
    srv.start()
    yield srv
    srv.stop()


def scrape(server: MetricsServer) -> str:
    reply = requests.get(f"{server.url}/metrics", timeout=TIMEOUT)
    assert reply.status_code == 200
    assert reply.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return reply.text


def test_the_server_listens_on_loopback_by_default(server: MetricsServer) -> None:
    assert server.url.startswith("http://127.0.0.1:")
    assert not server.url.endswith(":0")


def test_attempts_give_ups_and_the_histogram_are_scraped(metrics: Metrics,
                                                         server: MetricsServer) -> None:
    metrics.observe_attempt("Payments", "ok", 0.03)
    metrics.observe_attempt("Payments", "ok", 0.3)
    metrics.observe_attempt("Payments", "timeout", 7.0)
    metrics.observe_attempt("Payments", "timeout", 75.0)
    metrics.observe_attempt("Orders", "http_status", 1.0)
    metrics.give_up("Payments")

    samples, types, helps = parse(scrape(server))

    assert types == {"encore_queue_depth": "gauge", "encore_attempts_total": "counter",
                     "encore_give_ups_total": "counter", "encore_attempt_seconds": "histogram"}
    assert set(helps) == set(types)
    assert samples[key("encore_attempts_total", item="Payments", outcome="ok")] == 2
    assert samples[key("encore_attempts_total", item="Payments", outcome="timeout")] == 2
    assert samples[key("encore_attempts_total", item="Orders", outcome="http_status")] == 1
    assert samples[key("encore_give_ups_total", item="Payments")] == 1
    assert key("encore_give_ups_total", item="Orders") not in samples

    buckets = {le: samples[key("encore_attempt_seconds_bucket", item="Payments", le=le)]
               for le in ("0.05", "0.5", "5.0", "10.0", "60.0", "+Inf")}
    assert buckets == {"0.05": 1, "0.5": 2, "5.0": 2, "10.0": 3, "60.0": 3, "+Inf": 4}
    assert samples[key("encore_attempt_seconds_count", item="Payments")] == 4
    assert samples[key("encore_attempt_seconds_sum", item="Payments")] == pytest.approx(82.33)
    # exactly the documented buckets plus +Inf, cumulative and never decreasing
    les = [dict(labels)["le"] for (name, labels) in samples
           if name == "encore_attempt_seconds_bucket" and ("item", "Orders") in labels]
    assert les == [repr(float(b)) for b in DEFAULT_BUCKETS] + ["+Inf"]
    counts = [samples[key("encore_attempt_seconds_bucket", item="Orders", le=le)] for le in les]
    assert counts == sorted(counts) and counts[-1] == 1


def test_counters_grow_between_scrapes(metrics: Metrics, server: MetricsServer) -> None:
    metrics.observe_attempt("Payments", "ok", 0.1)
    first, _, _ = parse(scrape(server))
    metrics.observe_attempt("Payments", "ok", 0.1)
    metrics.give_up("Payments")
    second, _, _ = parse(scrape(server))

    assert first[key("encore_attempts_total", item="Payments", outcome="ok")] == 1
    assert second[key("encore_attempts_total", item="Payments", outcome="ok")] == 2
    assert second[key("encore_give_ups_total", item="Payments")] == 1


def test_queue_depth_is_read_from_its_source_at_each_scrape(metrics: Metrics,
                                                           server: MetricsServer) -> None:
    depths = {"Payments": 3, "Orders": 0}
    metrics.set_queue_depth_source(lambda: dict(depths))

    first, _, _ = parse(scrape(server))
    depths["Payments"] = 7
    second, _, _ = parse(scrape(server))

    assert first[key("encore_queue_depth", item="Payments")] == 3
    assert first[key("encore_queue_depth", item="Orders")] == 0
    assert second[key("encore_queue_depth", item="Payments")] == 7


def test_a_failing_queue_depth_source_does_not_break_the_scrape(metrics: Metrics,
                                                               server: MetricsServer) -> None:
    def broken() -> dict[str, int]:
        raise ConnectionError("database unreachable")

    metrics.set_queue_depth_source(broken)
    metrics.observe_attempt("Payments", "ok", 0.1)

    samples, types, _ = parse(scrape(server))

    assert types["encore_queue_depth"] == "gauge"
    assert not [k for k in samples if k[0] == "encore_queue_depth"]
    assert samples[key("encore_attempts_total", item="Payments", outcome="ok")] == 1


def test_label_values_are_escaped(metrics: Metrics, server: MetricsServer) -> None:
    awkward = 'Pay "quoted" \\ back\nslash'
    metrics.observe_attempt(awkward, "ok", 0.1)

    text = scrape(server)
    samples, _, _ = parse(text)

    assert 'item="Pay \\"quoted\\" \\\\ back\\nslash"' in text
    assert samples[key("encore_attempts_total", item=awkward, outcome="ok")] == 1


def test_healthz_answers_200_ok_when_healthy(server: MetricsServer) -> None:
    reply = requests.get(f"{server.url}/healthz", timeout=TIMEOUT)

    assert reply.status_code == 200
    assert reply.text.strip() == "ok"


def test_healthz_answers_503_with_the_reason_when_unhealthy(server: MetricsServer,
                                                            health: Health) -> None:
    with health.lock:
        health.ok, health.reason = False, "database unreachable for 45 s"

    reply = requests.get(f"{server.url}/healthz", timeout=TIMEOUT)

    assert reply.status_code == 503
    assert reply.text.strip() == "database unreachable for 45 s"


def test_a_health_check_that_raises_means_503_naming_only_the_error_type(
        metrics: Metrics) -> None:
    def broken() -> tuple[bool, str]:
        raise RuntimeError('connection to server at "10.1.2.3" failed for user "encore"')

    with MetricsServer(metrics, health=broken) as srv:
        reply = requests.get(f"{srv.url}/healthz", timeout=TIMEOUT)

    assert reply.status_code == 503
    assert reply.text == "health check failed: RuntimeError\n"  # the details go to the log


@pytest.mark.parametrize(("host", "exposed"), [
    ("127.0.0.1", False),  # loopback, the default
    ("::1", False),  # IPv6 loopback
    ("localhost", False),  # loopback by name
    ("0.0.0.0", True),  # every interface
    ("10.1.2.3", True),  # one of this machine's network addresses
])
def test_an_endpoint_beyond_loopback_has_a_warning(metrics: Metrics, host: str,
                                                   exposed: bool) -> None:
    warning = MetricsServer(metrics, host=host, port=9464).exposure_warning()
    assert (warning is not None) is exposed
    if exposed:
        assert f"listens on {host}:9464, beyond loopback" in warning


@pytest.mark.parametrize("path", [
    "/",  # no index page
    "/metric",  # near miss
    "/healthz/extra",  # nothing below
])
def test_other_paths_answer_404(server: MetricsServer, path: str) -> None:
    assert requests.get(f"{server.url}{path}", timeout=TIMEOUT).status_code == 404


def test_a_query_string_is_ignored(server: MetricsServer) -> None:
    reply = requests.get(f"{server.url}/metrics?name[]=x", timeout=TIMEOUT)

    assert reply.status_code == 200


def test_stop_closes_the_port(metrics: Metrics) -> None:
    srv = MetricsServer(metrics)
    srv.start()
    url = srv.url
    srv.stop()
    srv.stop()  # twice is harmless

    with pytest.raises(requests.ConnectionError):
        requests.get(f"{url}/metrics", timeout=TIMEOUT)


def test_concurrent_observations_are_all_counted(metrics: Metrics,
                                                 server: MetricsServer) -> None:
    def observe() -> None:
        for _ in range(500):
            metrics.observe_attempt("Payments", "ok", 0.2)

    threads = [threading.Thread(target=observe) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    samples, _, _ = parse(scrape(server))
    assert samples[key("encore_attempts_total", item="Payments", outcome="ok")] == 4000
    assert samples[key("encore_attempt_seconds_count", item="Payments")] == 4000
