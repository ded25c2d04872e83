"""The fault campaign's PostgreSQL: a server given by URL, or a primary and synchronous
standby of the campaign's own (tests/integration/pg_cluster.py).

Either way every client reaches every node through a :class:`~bench.chaos_proxy.FaultProxy`
of its own, and the database URL it is given names its proxies:

- :class:`ExternalPg` (``--pg-url``, a database the campaign may wipe): one node. A
  *restart* is seen through the proxies (every connection reset, new ones refused for a
  second); there is no failover.
- :class:`ClusterPg` (the server's binaries installed): two nodes, the URL names both
  (``?host=…&host=…&target_session_attrs=read-write``). A *restart* is a real one
  (``pg_ctl stop -m immediate``, then start); a *failover* kills the primary, promotes the
  standby a second later (as a failover manager would, dropping the synchronous standby it
  no longer has) and rebuilds the dead node as the new synchronous standby
  (``pg_basebackup -R``), so the next failover finds one.
"""
from __future__ import annotations

import shutil
import time
from typing import TYPE_CHECKING

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from bench.chaos_proxy import FaultProxy

if TYPE_CHECKING:
    from tests.integration.pg_cluster import PgNode

__all__ = ["ClusterPg", "ExternalPg", "PgBackend"]


class PgBackend:
    """What the campaign needs of its PostgreSQL."""

    kind = "?"
    can_failover = False
    nodes: list[tuple[str, int]]  # (host, port) of each node, in a stable order

    def direct_url(self) -> str:
        raise NotImplementedError

    def client_url(self, proxies: list[FaultProxy]) -> str:
        """The URL of a client whose proxies (one per node, in :attr:`nodes` order) are
        ``proxies``."""
        raise NotImplementedError

    def restart(self, proxies: list[FaultProxy]) -> str:
        raise NotImplementedError

    def failover(self) -> str:
        raise NotImplementedError

    def close(self) -> None:
        pass


class ExternalPg(PgBackend):
    kind = "external"

    def __init__(self, url: str) -> None:
        self.url = make_url(url.replace("postgresql://", "postgresql+psycopg://", 1)
                            if url.startswith("postgresql://") else url)
        self.nodes = [(self.url.host or "127.0.0.1", self.url.port or 5432)]
        self._wipe()

    def _wipe(self) -> None:
        engine = create_engine(self.url)
        with engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
        engine.dispose()

    def direct_url(self) -> str:
        return self.url.render_as_string(hide_password=False)

    def client_url(self, proxies: list[FaultProxy]) -> str:
        return self.url.set(host="127.0.0.1", port=proxies[0].port).render_as_string(
            hide_password=False)

    def restart(self, proxies: list[FaultProxy]) -> str:
        cut = sum(p.cut(refuse_for=1.0) for p in proxies)
        time.sleep(1.0)
        return f"{cut} connections reset, new ones refused for 1 s"


class ClusterPg(PgBackend):
    kind = "cluster"
    can_failover = True

    def __init__(self) -> None:
        from tests.integration.pg_cluster import PgCluster, find_bindir, make_root
        bindir = find_bindir()
        if bindir is None:
            raise RuntimeError("the PostgreSQL server binaries (initdb, pg_ctl, "
                               "pg_basebackup, psql) are not installed: set PG_BINDIR, or "
                               "give --pg-url")
        self.root = make_root()
        self.cluster = PgCluster(bindir, self.root)
        self.cluster.start()
        self.slots = [self.cluster.primary, self.cluster.standby]  # fixed ports
        self.primary, self.standby = self.cluster.primary, self.cluster.standby
        self._quick_reconnect(self.standby)
        self.nodes = [("127.0.0.1", node.port) for node in self.slots]
        self.failovers = 0

    @staticmethod
    def _quick_reconnect(standby: PgNode) -> None:
        """A standby retries its primary every 0.5 s (5 s by default): after a restart,
        synchronous commits wait for it."""
        standby.configure(wal_retrieve_retry_interval="500ms")
        standby.sql("SELECT pg_reload_conf()")

    def direct_url(self) -> str:
        hosts = "&".join(f"host=127.0.0.1:{node.port}" for node in self.slots)
        return f"postgresql+psycopg://postgres@/encore?{hosts}&target_session_attrs=read-write"

    def client_url(self, proxies: list[FaultProxy]) -> str:
        hosts = "&".join(f"host=127.0.0.1:{p.port}" for p in proxies)
        return f"postgresql+psycopg://postgres@/encore?{hosts}&target_session_attrs=read-write"

    def restart(self, proxies: list[FaultProxy]) -> str:
        self.primary.kill()
        time.sleep(0.5)
        self.primary.start()
        return f"primary on port {self.primary.port} stopped (immediate) and started"

    def failover(self) -> str:
        from tests.integration.pg_cluster import STANDBY_NAME
        old, new = self.primary, self.standby
        old.kill()
        time.sleep(1.0)
        new.promote()
        new.sql("ALTER SYSTEM RESET synchronous_standby_names")
        new.sql("SELECT pg_reload_conf()")
        self.primary, self.standby = new, old
        self.failovers += 1
        self._rebuild(old, new, STANDBY_NAME)
        return (f"primary {old.port} killed, {new.port} promoted, {old.port} rebuilt as its "
                "synchronous standby")

    def _rebuild(self, node: PgNode, primary: PgNode, name: str) -> None:
        shutil.rmtree(node.data, ignore_errors=True)
        self.cluster.run("pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port),
                         "-U", "postgres", "-D", str(node.data), "-R", "-X", "stream",
                         "--no-sync", "--checkpoint=fast")
        node.configure(port=str(node.port), cluster_name=name,
                       synchronous_standby_names="", wal_retrieve_retry_interval="500ms")
        node.start()
        primary.sql(f"ALTER SYSTEM SET synchronous_standby_names = '{name}'")
        primary.sql("SELECT pg_reload_conf()")
        deadline = time.monotonic() + 60
        while primary.sql("SELECT sync_state FROM pg_stat_replication "
                          f"WHERE application_name = '{name}'") != "sync":
            if time.monotonic() > deadline:
                raise RuntimeError("the rebuilt standby never became synchronous")
            time.sleep(0.1)

    def close(self) -> None:
        try:
            self.cluster.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
