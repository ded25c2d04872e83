"""A store's record of its daemons and of the operator's switches of items."""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import select

from engine.store.connector import Database
from engine.store.models import daemon, item_state
from engine.store.notify import Announcement


class StoreDaemons:
    """The daemon and item-switch methods of :class:`~engine.store.sql.SqlStore`."""

    db: Database

    def set_item_enabled(self, name: str, enabled: bool, *, reason: str | None,
                         now: datetime) -> None:
        """Override the production file's ``enabled`` for item ``name``; tell the daemons."""
        news = [Announcement.switch(name, enabled)]
        with self.db.tx() as conn:
            conn.execute(item_state.delete().where(item_state.c.config_name == name))
            conn.execute(item_state.insert().values(config_name=name, enabled=enabled,
                                                    reason=reason, updated_at=now))
            self.db.announcer.notify(conn, news)
        self.db.announcer.call_back(news)

    def item_overrides(self) -> dict[str, bool]:
        """Items whose enabled state an operator (or action D) has set."""
        with self.db.read() as conn:
            rows = conn.execute(select(item_state.c.config_name, item_state.c.enabled)).all()
        return {name: bool(enabled) for name, enabled in rows}

    def register_daemon(self, daemon_id: str, *, host: str, pid: int, production: str,
                        items: str, now: datetime, pid_namespace: str | None = None,
                        process_start: int | None = None) -> None:
        """Register ``daemon_id``, alive at ``now``; ``process_start``: its start in clock
        ticks after boot (None: unknown)."""
        with self.db.tx() as conn:
            conn.execute(daemon.insert().values(id=daemon_id, host=host, pid=pid,
                                                production=production, started_at=now,
                                                heartbeat_at=now, items=items,
                                                pid_namespace=pid_namespace,
                                                process_start=process_start))

    def stale_daemons(self, before: datetime) -> list[str]:
        """Ids of the daemons whose last heartbeat is older than ``before``."""
        with self.db.read() as conn:
            return list(conn.execute(select(daemon.c.id).where(daemon.c.heartbeat_at < before))
                        .scalars())

    def local_daemons(self, host: str, *, namespace: str) -> list[tuple[str, int, int | None]]:
        """(id, pid, process start) of the daemons of ``host`` in PID namespace ``namespace``."""
        d = daemon.c
        with self.db.read() as conn:
            return [(r.id, r.pid, r.process_start) for r in conn.execute(
                select(d.id, d.pid, d.process_start)
                .where(d.host == host, d.pid_namespace == namespace))]

    def unregister_daemon(self, daemon_id: str) -> bool:
        """Take ``daemon_id`` off the ``daemon`` table; False if it was not there."""
        with self.db.tx() as conn:
            return bool(conn.execute(daemon.delete().where(daemon.c.id == daemon_id))
                        .rowcount)
