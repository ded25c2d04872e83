"""``encore status``: the items, their queues and breakers, what runs them, and every daemon."""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import click

from engine.cli import report
from engine.cli.context import Context, pass_ctx
from engine.cli.database import warn_lost_file
from engine.cli.lazy import lazy_module
from engine.config.production import ItemEntry
from engine.errors import ConfigurationError, EncoreError
from engine.store.breaker_row import BreakerRow
from engine.store.url import safe_url

if TYPE_CHECKING:
    from engine.store.sql import SqlStore

queries = lazy_module("engine.store.queries")  # on first use: engine.cli.commands says why


@click.command()
@pass_ctx
def status(ctx: Context) -> None:
    """Items, queue depths, retries, last errors, what runs (the daemons running each item,
    ready or not, refused by the last reload) beside what the file says, and every daemon:
    alive or not, the items it serves, and the leases it holds."""
    warn_lost_file(ctx.database_url())
    production, store = ctx.outline, ctx.store
    stats, overrides = queries.queue_stats(store), store.item_overrides()
    now = store.db_now()
    breakers = _breakers(store)
    reports = _running_reports(store, now, production.lease_seconds)
    leader = _live_leader(store, now, reports)
    rows = []
    for item in production.entries:
        s = stats.get(item.name, {})
        oldest = s.get("oldest")
        last_error = s.get("last_error")
        on_leader = leader if _is_service(item) else None
        rows.append((item.name, "yes" if overrides.get(item.name, item.enabled) else "no",
                     _running_text(item.name, reports, leader=on_leader), item.pool_size,
                     s.get("queued", 0),
                     f"{(now - oldest).total_seconds():.0f}s" if oldest else "-",
                     s.get("retrying", 0), _breaker_text(item, breakers, now),
                     item.raw_settings.get("rate_limit") or "-",
                     last_error[1] if last_error else "-"))
    for warning in production.refusals():
        click.echo(f"warning: {warning}; `encore run` refuses it (`encore check` says more)",
                   err=True)
    click.echo(f"production {production.name} on {safe_url(store.url)}")
    click.echo(report.table(("item", "enabled", "running", "pool", "queued", "oldest",
                             "retrying", "breaker", "rate limit", "last error"), rows))
    click.echo("")
    click.echo(_daemon_table(store, now, production.lease_seconds))


def _alive(row: dict[str, Any], now: datetime, lease_seconds: float) -> str:
    """``yes``; ``no`` when its heartbeat is older than a lease; ``no (pid 12 a zombie)``
    for a daemon of this host whose process is dead, whatever its heartbeat says
    (:func:`~engine.runtime.liveness.why_local_daemon_dead`)."""
    from engine.runtime.liveness import why_local_daemon_dead

    why = why_local_daemon_dead(row)
    if why is not None:
        return f"no ({why})"
    return "yes" if row["heartbeat_at"] >= now - timedelta(seconds=lease_seconds) else "no"


def _running_reports(store: SqlStore, now: datetime, lease_seconds: float
                     ) -> dict[str, dict[str, dict[str, Any]]]:
    """What each live daemon reports of its items (``daemon.item_states``)."""
    from engine.store.running import read_states

    return {d["id"]: read_states(d.get("item_states"))[0] for d in queries.daemons(store)
            if _alive(d, now, lease_seconds) == "yes"}


def _running_text(name: str, reports: dict[str, dict[str, dict[str, Any]]], *,
                  leader: str | None = None) -> str:
    """``2 daemons, ready: <id>, <id>``, ``1 daemon, not ready: <id>``, ``refused …``, ``no
    daemon``; ``no daemon reports it`` for an item none of the live daemons runs. An inbound
    service is reported by each daemon serving it; a business service that none reports
    runs on the schedule of ``leader`` (the live daemon holding the leader lease)."""
    states = {daemon_id: r[name] for daemon_id, r in reports.items() if name in r}
    refused = next((str(s["refused"]) for s in states.values() if s.get("refused")), None)
    on = {d: s for d, s in states.items() if s.get("state") in ("ready", "not_ready")}
    failed = next((s for s in states.values() if s.get("state") == "failed"), None)
    if on:
        count = f"{len(on)} daemon{'s' if len(on) > 1 else ''}"
        ready = "ready" if all(s["state"] == "ready" for s in on.values()) else "not ready"
        text = f"{count}, {ready}: {', '.join(sorted(on))}"
        return f"{text}; change refused: {refused}" if refused else text
    if failed is not None:
        return f"failed: {failed.get('detail', '?')}"
    if refused:
        return f"refused by the last reload: {refused}"
    if leader is not None:
        return f"1 daemon, ready: {leader} (the leader, on its schedule)"
    return "no daemon" if not reports else "no daemon reports it"


def _live_leader(store: SqlStore, now: datetime,
                 reports: dict[str, dict[str, dict[str, Any]]]) -> str | None:
    """The live daemon holding the leader lease (it runs the business services), if any."""
    from engine.runtime.cluster import LEADER

    try:
        leases = store.leases.all()
    except EncoreError:  # a schema from before scale-out
        return None
    return next((lease.owner for lease in leases if lease.name == LEADER
                 and lease.expires_at >= now and lease.owner in reports), None)


def _is_service(entry: ItemEntry) -> bool:
    """Whether ``entry`` is a service (not an operation or process); False if its class
    does not import (the warnings say why)."""
    from engine.config.user_modules import resolve_class
    from engine.host import BusinessOperation
    from engine.process import BusinessProcess

    try:
        cls = resolve_class(entry.class_path, item=entry.name)
    except ConfigurationError:
        return False
    return not issubclass(cls, (BusinessOperation, BusinessProcess))


def _breakers(store: SqlStore) -> dict[str, BreakerRow] | None:
    """Every item's circuit breaker; None on a schema from before breakers."""
    try:
        return store.breakers.all()
    except EncoreError:
        return None


def _breaker_text(item: ItemEntry, breakers: dict[str, BreakerRow] | None,
                  now: datetime) -> str:
    """``closed``, ``closed, 2 failed``, ``open, probe in 25s``, ``half-open`` (its probe in
    flight); ``-`` without a breaker, ``?`` on a schema from before breakers."""
    if not item.raw_settings.get("breaker_threshold"):
        return "-"
    if breakers is None:
        return "?"
    row = breakers.get(item.name)
    if row is None or row.state == "closed":
        failures = 0 if row is None else row.failures
        return f"closed, {failures} failed" if failures else "closed"
    if row.state == "open" and row.open_until is not None:
        left = max((row.open_until - now).total_seconds(), 0.0)
        return f"open, probe in {left:.0f}s"
    return "half-open"


def _daemon_table(store: SqlStore, now: datetime, lease_seconds: float) -> str:
    daemons = queries.daemons(store)
    if not daemons:
        return "no daemon running"
    holds: dict[str, list[str]] = {}
    try:
        leases = store.leases.all()
    except EncoreError:  # a schema from before scale-out: no lease table yet
        leases = None
    for lease in leases or ():
        if lease.expires_at >= now:
            holds.setdefault(lease.owner, []).append(lease.name)
    return report.table(
        ("daemon", "host", "pid", "started (UTC)", "heartbeat (UTC)", "alive", "items",
         "leases"),
        [(d["id"], d["host"], d["pid"], d["started_at"], d["heartbeat_at"],
          _alive(d, now, lease_seconds), d["items"] or "-",
          ", ".join(holds.get(d["id"], [])) or ("-" if leases is not None else "?"))
         for d in daemons])
