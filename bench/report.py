"""Results of the scenarios, the targets of issue 8, and the printed table."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# key → (target text, predicate on the value)
TARGETS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "overhead_ratio": ("≥ 0.90", lambda v: v >= 0.90),
    "noop_msgs_per_s": ("≥ 2000", lambda v: v >= 2000),
    "noop_msgs_per_s_pg": ("≥ 800", lambda v: v >= 800),
    "noop_drain_msgs_per_s": ("≥ 5000", lambda v: v >= 5000),
    "noop_drain_msgs_per_s_pg": ("≥ 2500", lambda v: v >= 2500),
    # Encore's PostgreSQL drain ÷ pgqueuer's, same database, same count, same run.
    "pgqueuer_drain_ratio": ("≥ 1.2", lambda v: v >= 1.2),
    "cpu_ms_per_msg": ("≤ 0.5", lambda v: v <= 0.5),
    "intake_msgs_per_s": ("≥ 3000", lambda v: v >= 3000),
    "intake_many_msgs_per_s": ("≥ 20000", lambda v: v >= 20000),
    # Intake over HTTP (issue 15), one client, keep-alive, durable; issue 21 set its target.
    "intake_http_msgs_per_s": ("≥ 1000", lambda v: v >= 1000),
    # Also ≥ 0.9 × bare_requests_speedup_16 of the same run: see RELATIVE.
    "pool_speedup_16": ("≥ 13, ≥ 0.9 × bare", lambda v: v >= 13),
    # The peer pool_speedup_16 is held to: informational, always met.
    "bare_requests_speedup_16": ("peer", lambda v: True),
    "timing_max_dev_ms": ("≤ 20", lambda v: v <= 20),
    "parked_10k_rss_mb": ("≤ 200", lambda v: v <= 200),
    "parked_10k_idle_cpu": ("≤ 0.05", lambda v: v <= 0.05),
    "parked_10k_idle_cpu_pool16": ("≤ 0.05", lambda v: v <= 0.05),
    "pg_two_daemon_ratio": ("≥ 1.8", lambda v: v >= 1.8),
    # Encore within 20 % of the 1 s deadline; plain requests shown for contrast.
    "deadline_vs_requests_s": ("Encore ≈ 1 s", lambda v: abs(v[0] - 1.0) <= 0.2),
    # Issue 21 (bench/latency.py): how fast Encore answers. Milliseconds unless told.
    "sync_roundtrip_ms_p50": ("≤ 3", lambda v: v <= 3),
    "sync_roundtrip_ms_p99": ("≤ 15", lambda v: v <= 15),
    "sync_roundtrip_ms_p50_pg": ("≤ 5", lambda v: v <= 5),
    "router_hop_ms_p50": ("≤ 1.5", lambda v: v <= 1.5),
    "process_call_ms_p50": ("≤ 1", lambda v: v <= 1),
    "pickup_ms_p50": ("≤ 10", lambda v: v <= 10),
    "pickup_ms_p50_pg": ("≤ 5", lambda v: v <= 5),
    # engine.client's send_message + wait_for_response from another process (issue 39: one
    # waiter, one speed — as fast as the HTTP ?wait round trip)
    "client_roundtrip_ms_p50": ("≤ 2", lambda v: v <= 2),
    # 16 client threads against the portal, and against a bare Starlette/uvicorn endpoint
    # doing one durable SQLite insert per POST (bench/bare_intake.py), same run.
    "intake_http_16_msgs_per_s": ("measured", lambda v: True),
    "bare_intake_http_msgs_per_s": ("peer", lambda v: True),
    "intake_http_ratio": ("≥ 1.0", lambda v: v >= 1.0),
    # Celery + Redis delay().get() of a no-op task (bench/celery_peer.py); the ratio is
    # Celery's p50 ÷ sync_roundtrip_ms_p50 of the same run.
    "celery_roundtrip_ms_p50": ("peer", lambda v: True),
    "sync_vs_celery": ("≥ 1.0", lambda v: v >= 1.0),
    # Seconds: a whole `encore send` process, and a bare `python -c pass` beside it.
    "cli_send_s": ("≤ 0.35", lambda v: v <= 0.35),
    "python_pass_s": ("informational", lambda v: True),
    # Issue 27 (bench/pool.py): more workers must never mean fewer messages. No-op drains
    # (queue filled first) with pool_size = 4 ÷ pool_size = 1, same database, same run.
    "noop_pool4_ratio": ("≥ 1.0", lambda v: v >= 1.0),
    "noop_pool4_ratio_pg": ("≥ 1.0", lambda v: v >= 1.0),
    # HttpOperation pool 4 against a 2 ms loopback service ÷ bare requests with 4 threads.
    "pool4_fast_ratio": ("≥ 0.85", lambda v: v >= 0.85),
    # Encore's pool 4 no-op drain (SQLite) ÷ dramatiq with 4 threads on RabbitMQ.
    "dramatiq_noop_pool4_ratio": ("≥ 1.5", lambda v: v >= 1.5),
    # Issue 23 (bench/viewer.py, 1,000,000 messages; 100,000 with --quick): the Message
    # Viewer's indexed property search for one message, and a streamed CSV export.
    "viewer_prop_search_ms": ("≤ 100", lambda v: v <= 100),
    "viewer_prop_search_ms_pg": ("≤ 100", lambda v: v <= 100),
    "viewer_export_rows_per_s": ("≥ 20000", lambda v: v >= 20000),
    "viewer_export_rows_per_s_pg": ("≥ 20000", lambda v: v >= 20000),
    # Issue 36 (bench/purge.py): the purge of 200,000 finished requests with their responses,
    # attempts and events (seconds; the same size with --quick).
    "purge_200k_s": ("≤ 10", lambda v: v <= 10),
    "purge_200k_s_pg": ("≤ 10", lambda v: v <= 10),
    # Issue 25 (bench/inbound.py): what a SoapService → Router → SoapOperation chain adds
    # to a direct zeep → spyne call (ms), and an async HttpService's intake with 16 clients.
    "inbound_soap_ms_p50": ("≤ 5", lambda v: v <= 5),
    "inbound_http_msgs_per_s": ("≥ 3000", lambda v: v >= 3000),
    # Issue 36 (bench/hostile_xml.py): the longest delivery delay of another item while
    # envelopes of 60,000 attributes on one element are posted to a SoapService (ms).
    "xml_attr_stall_ms": ("≤ 100", lambda v: v <= 100),
    # Issue 36 (bench/login_flood.py): 80 parallel logins within the limits against encore
    # run: the daemon's peak RSS growth (MiB), and delivery p99 idle and under the flood (ms).
    "login_flood_rss_mb": ("≤ 300", lambda v: v <= 300),
    "login_idle_p99_ms": ("peer", lambda v: True),
    "login_flood_p99_ms": ("≤ idle + 100", lambda v: True),
}
# Targets that also compare a key with another key of the same run:
# key → (the other key, predicate on (value, other value)). The verdict needs both, so it is
# given once every scenario has run (``table``); "n/a" when the other key is unknown.
RELATIVE: dict[str, tuple[str, Callable[[Any, Any], bool]]] = {
    "pool_speedup_16": ("bare_requests_speedup_16", lambda v, bare: v >= 0.9 * bare),
    "login_flood_p99_ms": ("login_idle_p99_ms", lambda v, idle: v <= idle + 100),
}
KEYS = tuple(TARGETS)


@dataclass
class Row:
    """One line of the table: a key figure (``key`` set) or a figure for context."""

    label: str
    value: Any
    unit: str = ""
    key: str | None = None
    note: str = ""


@dataclass
class Outcome:
    """What one scenario found: its key figures and the rows that explain them."""

    values: dict[str, Any] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def key(self, key: str, label: str, value: Any, unit: str = "", note: str = "") -> None:
        self.values[key] = value
        self.rows.append(Row(label, value, unit, key, note))

    def info(self, label: str, value: Any, unit: str = "", note: str = "") -> None:
        self.rows.append(Row(label, value, unit, None, note))


def verdict(key: str, value: Any, values: dict[str, Any] | None = None) -> str:
    """"met", "MISSED" or "n/a" (no value, or a relative target whose other key is unknown);
    ``values``: every key figure of the run, for the RELATIVE targets."""
    if value is None:
        return "n/a"
    if not TARGETS[key][1](value):
        return "MISSED"
    if key in RELATIVE:
        other, check = RELATIVE[key]
        peer = (values or {}).get(other)
        if peer is None:
            return "n/a"
        return "met" if check(value, peer) else "MISSED"
    return "met"


def fmt(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return " / ".join(fmt(v) for v in value)
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 1:
            return f"{value:.2f}"
        return f"{value:.3f}"
    return str(value)


def table(rows: list[Row], values: dict[str, Any] | None = None) -> str:
    """The human-readable table: key figures with target and verdict, context rows indented.
    ``values``: every key figure of the run (for the verdicts that compare two keys)."""
    lines = [f"{'figure':<44} {'value':>16}  {'target':<20} {'':<7} note", "-" * 106]
    for row in rows:
        value = f"{fmt(row.value)} {row.unit}".rstrip()
        if row.key is not None:
            lines.append(f"{row.key:<44} {value:>16}  {TARGETS[row.key][0]:<20} "
                         f"{verdict(row.key, row.value, values):<7} {row.label}"
                         + (f"; {row.note}" if row.note else ""))
        else:
            lines.append(f"  {row.label:<42} {value:>16}  {'':<20} {'':<7} {row.note}")
    return "\n".join(lines)
