"""The production as the front page and ``GET /api/v1/status`` show it (docs/portal.md).
Each item's status light comes from what the daemons report running, never from the file
alone."""
from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from engine.config.production import ItemConfig, ProductionConfig
from engine.errors import ItemNotFound
from engine.host import BusinessOperation
from engine.process import BusinessProcess
from engine.runtime.cluster import LEADER, is_fifo, item_lease_name
from engine.runtime.liveness import why_local_daemon_dead
from engine.store import running, viewer
from engine.store.sql import SqlStore

if TYPE_CHECKING:
    from engine.portal.context import Portal

GREEN, YELLOW, RED, GREY = "green", "yellow", "red", "grey"
# how the event of a refused reload begins (engine.runtime.reload): a refusal that a later
# reload fixed is no longer an item's last error
RELOAD_REFUSED = "reload refused"
FAILED_OUTCOMES = ("timeout", "connect_error", "reset", "http_status", "fault", "error")


def kind_of(item: ItemConfig) -> str:
    """``service``, ``process`` or ``operation``: the diagram's column of ``item``."""
    if issubclass(item.cls, BusinessProcess):
        return "process"
    if issubclass(item.cls, BusinessOperation):
        return "operation"
    return "service"


def targets_of(item: ItemConfig) -> list[str]:
    """Every item ``item`` declares it sends to: a service's or process's ``targets``, a
    router's rules and ``default_target``, in the file's order, each once."""
    found: list[str] = []
    listed = item.settings.get("targets")
    if isinstance(listed, (list, tuple)):
        found.extend(str(t) for t in listed)
    found.extend(ref.target for ref in item.cls.declared_targets(item.settings))
    return list(dict.fromkeys(t for t in found if t != item.name))


def production_view(portal: Portal) -> dict[str, Any]:
    """``{"items": [...], "daemons": [...], "leader": id | None, "now": time,
    "file_changed": bool, "reload_refused": [reason, ...]}``."""
    return view_of(portal.store, portal.production)


def is_enabled(store: SqlStore, production: ProductionConfig, name: str) -> bool:
    """Whether item ``name`` is enabled: as an operator last set it, else as the file says."""
    return store.item_overrides().get(name, production.item(name).enabled)


def production_view_of_item(store: SqlStore, production: ProductionConfig,
                            name: str) -> dict[str, Any]:
    """The row of item ``name`` in :func:`view_of`; ItemNotFound if there is none."""
    if name not in {i.name for i in production.items}:
        raise ItemNotFound(f"no item named {name!r} in the production (items: "
                           f"{', '.join(sorted(i.name for i in production.items)) or 'none'})")
    view = view_of(store, production, only=name)
    return next(i for i in view["items"] if i["name"] == name)


def view_of(store: SqlStore, production: ProductionConfig, *,
            only: str | None = None) -> dict[str, Any]:
    """:func:`production_view` of ``production`` on ``store`` (``only``: of that item)."""
    names = [i.name for i in production.items]
    now = store.db_now()
    status = viewer.production_status(store, [only] if only else names, now=now)
    overrides = store.item_overrides()
    holders = status.leases
    alive_after = now - timedelta(seconds=production.lease_seconds)
    daemons, reports, hashes = [], {}, set()
    for d in status.daemons:
        # a daemon of this host whose process is dead is dead, whatever its last heartbeat
        alive = d["heartbeat_at"] >= alive_after and why_local_daemon_dead(d) is None
        states, loaded = running.read_states(d.get("item_states"))
        if alive:
            reports[d["id"]] = states
            hashes.add(loaded)
        daemons.append({"id": d["id"], "host": d["host"], "pid": d["pid"],
                        "started_at": d["started_at"], "heartbeat_at": d["heartbeat_at"],
                        "heartbeat_age": (now - d["heartbeat_at"]).total_seconds(),
                        "alive": alive, "items": d["items"] or ""})
    items = []
    for item in production.items:
        if only is not None and item.name != only:
            continue
        s = status.items[item.name]
        one = {
            "name": item.name, "class": item.class_path, "kind": kind_of(item),
            "targets": targets_of(item),
            "enabled": overrides.get(item.name, item.enabled), "pool_size": item.pool_size,
            "queued": s.queued, "in_flight": s.in_flight, "retrying": s.retrying,
            "oldest_wait": (now - s.oldest_queued).total_seconds() if s.oldest_queued else None,
            "last_error": s.last_error,
            "breaker": (s.breaker or {}).get("state", "closed"),
            "fifo": is_fifo(item), "fifo_holder": holders.get(item_lease_name(item.name)),
            "running": running_state(item, reports, leader=holders.get(LEADER)),
        }
        if _fixed_refusal(one):
            one["last_error"] = None
        one["light"], one["why"] = light(item, one)
        items.append(one)
    current = running.file_hash(*production.files)
    changed = bool(reports) and current is not None and any(h != current for h in hashes)
    refusals = sorted({f"{name}: {one['refused']}" if name in names else
                       str(one["refused"]) for states in reports.values()
                       for name, one in states.items() if one.get("refused")}) \
        if only is None else []
    return {"items": items, "daemons": daemons, "leader": holders.get(LEADER), "now": now,
            "file_changed": changed, "reload_refused": refusals}


def _fixed_refusal(view: dict[str, Any]) -> bool:
    """Whether the item's last error is a reload refusal that no longer holds: daemons run
    the item and none of them reports the refusal (a later reload was applied)."""
    error, run = view["last_error"], view["running"]
    return bool(error and str(error.get("text", "")).startswith(RELOAD_REFUSED)
                and run["daemons"] and not run["refused"])


def running_state(item: ItemConfig, reports: dict[str, dict[str, dict[str, Any]]], *,
                  leader: str | None) -> dict[str, Any]:
    """What the live daemons report of ``item``: ``daemons`` running it (each with its
    state), ``ready`` (every one of them), ``refused``/``failed`` (a reason, or None), the
    last attempts' outcomes, the servers with their bad marks and the WSDL's operations."""
    on, refused, failed, outcomes, servers = [], None, None, [], None
    operations: list[str] = []
    for daemon_id, states in reports.items():
        one = states.get(item.name)
        if one is None:
            continue
        state = one.get("state")
        if one.get("refused"):
            refused = str(one["refused"])
        if state == running.FAILED:
            failed = str(one.get("detail") or "failed to start")
        if state in (running.READY, running.NOT_READY):
            on.append({"daemon": daemon_id, "state": state})
            if one.get("last_outcome"):
                outcomes.append(one["last_outcome"])
            if servers is None and one.get("servers"):
                servers = one["servers"]
            operations = operations or list(one.get("operations") or [])
    # business services run on the leader; inbound services where they are served (reported)
    if kind_of(item) == "service" and leader in reports and not on:
        on.append({"daemon": leader, "state": running.READY})
    return {"daemons": on, "ready": bool(on) and all(d["state"] == running.READY for d in on),
            "refused": refused, "failed": failed, "last_outcomes": outcomes,
            "servers": servers or [], "operations": operations}


def light(item: ItemConfig, view: dict[str, Any]) -> tuple[str, str]:
    """The status light of an item (docs/portal.md) and why, from what runs."""
    run = view["running"]
    if not view["enabled"]:
        return GREY, "disabled"
    if run["failed"]:
        return RED, f"failed to start: {run['failed']}"
    if run["refused"] and not run["daemons"]:
        return RED, f"refused by the last reload: {run['refused']}"
    if not run["daemons"]:
        return GREY, "running on no daemon"
    if view["breaker"] in ("open", "half_open"):
        return RED, f"circuit breaker {view['breaker'].replace('_', '-')}"
    if not run["ready"]:
        return RED, "adapter not ready (WSDL not loaded or server files missing)"
    if any(o in FAILED_OUTCOMES for o in run["last_outcomes"]):
        return RED, "last attempt failed"
    if run["refused"]:
        return YELLOW, f"its change was refused by the last reload: {run['refused']}"
    if view["retrying"]:
        return YELLOW, f"{view['retrying']} message(s) retrying"
    alerts = item.operation_settings
    if alerts is not None:
        if alerts.queue_count_alert and view["queued"] >= alerts.queue_count_alert:
            return YELLOW, f"queue holds {view['queued']} (alert at {alerts.queue_count_alert})"
        wait = view["oldest_wait"] or 0.0
        if alerts.queue_wait_alert and wait >= alerts.queue_wait_alert:
            return YELLOW, f"oldest message waited {wait:.0f} s " \
                           f"(alert at {alerts.queue_wait_alert:g} s)"
    return GREEN, "running, ready"
