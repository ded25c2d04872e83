"""The production as the portal's front page and ``GET /api/v1/status`` show it: per item
enabled, pool, queued, in flight, retrying, oldest queued wait, last error, breaker state
and the daemon holding its FIFO lease; every daemon with host, PID and heartbeat age."""
from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from engine.cluster import LEADER, is_fifo, item_lease_name
from engine.store import viewer

if TYPE_CHECKING:
    from engine.portal.app import Portal


def production_view(portal: Portal) -> dict[str, Any]:
    """``{"items": [...], "daemons": [...], "leader": id | None, "now": time}``."""
    store, production = portal.store, portal.production
    now = store.db_now()
    status = viewer.production_status(store, portal.items, now=now)
    overrides = store.item_overrides()
    holders = status.leases
    items = []
    for item in production.items:
        s = status.items[item.name]
        items.append({
            "name": item.name, "class": item.class_path,
            "enabled": overrides.get(item.name, item.enabled), "pool_size": item.pool_size,
            "queued": s.queued, "in_flight": s.in_flight, "retrying": s.retrying,
            "oldest_wait": (now - s.oldest_queued).total_seconds() if s.oldest_queued else None,
            "last_error": s.last_error,
            "breaker": (s.breaker or {}).get("state", "closed"),
            "fifo": is_fifo(item), "fifo_holder": holders.get(item_lease_name(item.name)),
        })
    alive_after = now - timedelta(seconds=production.lease_seconds)
    daemons = [{"id": d["id"], "host": d["host"], "pid": d["pid"],
                "started_at": d["started_at"], "heartbeat_at": d["heartbeat_at"],
                "heartbeat_age": (now - d["heartbeat_at"]).total_seconds(),
                "alive": d["heartbeat_at"] >= alive_after, "items": d["items"] or ""}
               for d in status.daemons]
    return {"items": items, "daemons": daemons, "leader": holders.get(LEADER), "now": now}
