"""Named leases in the ``lease`` table: what only one of the daemons sharing a database may do
(docs/architecture.md). :meth:`SqlLeases.acquire` is one atomic upsert conditional on owner or
expiry, so two daemons never both succeed."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import case, delete, or_, select
from sqlalchemy.dialects import postgresql, sqlite

from engine.clock import as_utc
from engine.store.models import lease

if TYPE_CHECKING:
    from engine.store.connector import Database


@dataclass(frozen=True)
class LeaseRow:
    """A ``lease`` row (timestamps aware UTC)."""

    name: str
    owner: str
    acquired_at: datetime
    expires_at: datetime


class SqlLeases:
    """The ``lease`` table of one store (``store.leases``)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        dialect = db.engine.dialect.name
        self._insert: Any = postgresql.insert if dialect == "postgresql" else sqlite.insert

    def acquire(self, name: str, owner: str, *, now: datetime, lease_seconds: float) -> bool:
        """Take or renew lease ``name`` for ``owner`` until ``now + lease_seconds``; True
        when ``owner`` holds it afterwards."""
        until = now + timedelta(seconds=lease_seconds)
        ins = self._insert(lease).values(name=name, owner=owner, acquired_at=now,
                                         expires_at=until)
        c = lease.c
        stmt = ins.on_conflict_do_update(
            index_elements=[c.name],
            set_={"owner": ins.excluded.owner, "expires_at": ins.excluded.expires_at,
                  "acquired_at": case((c.owner == ins.excluded.owner, c.acquired_at),
                                      else_=ins.excluded.acquired_at)},
            where=or_(c.owner == owner, c.expires_at < now),
        ).returning(c.owner)
        # autocommit: a daemon frozen before a COMMIT would hold up the owner's renewal
        with self._db.single() as conn:
            return conn.execute(stmt).first() is not None

    def release(self, name: str, owner: str) -> bool:
        """Give up lease ``name`` if ``owner`` holds it; True if it did."""
        with self._db.tx() as conn:
            return bool(conn.execute(delete(lease).where(lease.c.name == name,
                                                         lease.c.owner == owner)).rowcount)

    def release_all(self, owner: str) -> list[str]:
        """Give up every lease of ``owner``; their names."""
        with self._db.tx() as conn:
            return sorted(conn.execute(delete(lease).where(lease.c.owner == owner)
                                       .returning(lease.c.name)).scalars())

    def get(self, name: str) -> LeaseRow | None:
        """Lease ``name`` as stored (it may have expired), or None."""
        with self._db.tx() as conn:
            row = conn.execute(select(lease).where(lease.c.name == name)).mappings().first()
        return _row(row) if row else None

    def all(self) -> list[LeaseRow]:
        """Every stored lease, expired ones included, by name."""
        with self._db.tx() as conn:
            rows = conn.execute(select(lease).order_by(lease.c.name)).mappings().all()
        return [_row(r) for r in rows]


def _row(row: Any) -> LeaseRow:
    acquired, expires = as_utc(row["acquired_at"]), as_utc(row["expires_at"])
    assert acquired is not None and expires is not None
    return LeaseRow(name=row["name"], owner=row["owner"], acquired_at=acquired,
                    expires_at=expires)
