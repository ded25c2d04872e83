"""A PostgreSQL primary and its synchronous standby of the test's own, on free loopback ports.

:class:`PgCluster` runs the server's own tools — ``initdb``, ``pg_basebackup -R``, ``pg_ctl
start / stop -m immediate / promote`` — on data directories under a temporary directory, as
the ``postgres`` user when the test runs as root (PostgreSQL refuses to run as root). The
fixture :func:`pg_cluster` skips, saying why, only when those binaries are not installed;
everything else that goes wrong fails the test.

The primary names the standby in ``synchronous_standby_names``, so a durable commit returns
only once the standby has the commit record: what a test saw committed survives the
primary's death. The standby is configured to become a primary on its own after
``promote`` (no ``synchronous_standby_names``: nobody is left to wait for).
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

DATABASE = "encore"
STANDBY_NAME = "encore_standby"  # the standby's cluster_name: its application_name upstream
TOOLS = ("initdb", "pg_ctl", "pg_basebackup", "psql")


def find_bindir() -> Path | None:
    """The directory of the server's tools: PG_BINDIR, pg_config's, Debian's newest, PATH."""
    candidates = [os.environ.get("PG_BINDIR", "")]
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            candidates.append(subprocess.run([pg_config, "--bindir"], capture_output=True,
                                             text=True, timeout=10).stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(str(Path(initdb).parent))
    for candidate in candidates:
        if candidate and all((Path(candidate) / tool).is_file() for tool in TOOLS):
            return Path(candidate)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgNode:
    """One server: its data directory, port and log."""

    def __init__(self, cluster: PgCluster, name: str) -> None:
        self.cluster = cluster
        self.name = name
        self.data = cluster.root / name
        self.log = cluster.root / f"{name}.log"
        self.port = free_port()

    def configure(self, **settings: str) -> None:
        """Append ``settings`` to postgresql.conf (the last line of a setting wins)."""
        lines = "".join(f"{key} = '{value}'\n" for key, value in settings.items())
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(lines)

    def start(self) -> None:
        self.cluster.run("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data),
                         "-l", str(self.log))

    def stop(self, mode: str = "fast") -> None:
        self.cluster.run("pg_ctl", "stop", "-w", "-t", "60", "-m", mode, "-D", str(self.data))

    def kill(self) -> None:
        """Stop at once, as a crash would: no checkpoint, clients cut off."""
        self.stop("immediate")

    def promote(self) -> None:
        self.cluster.run("pg_ctl", "promote", "-w", "-t", "60", "-D", str(self.data))

    def running(self) -> bool:
        return self.cluster.run("pg_ctl", "status", "-D", str(self.data),
                                check=False).returncode == 0

    def sql(self, query: str, database: str = "postgres") -> str:
        """``query``'s rows as psql prints them unaligned (``|`` between columns)."""
        return self.cluster.run("psql", "-X", "-h", "127.0.0.1", "-p", str(self.port),
                                "-U", "postgres", "-d", database, "-Atq", "-c",
                                query).stdout.strip()

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""


class PgCluster:
    """A primary and a synchronous standby replicating from it (see the module docstring)."""

    def __init__(self, bindir: Path, root: Path) -> None:
        self.bindir = bindir
        self.root = root
        self.as_postgres = os.geteuid() == 0
        self.primary = PgNode(self, "primary")
        self.standby = PgNode(self, "standby")

    # -- tools ---------------------------------------------------------------------------
    def run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [str(self.bindir / tool), *args]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120,
                                cwd=self.root)
        if check and result.returncode != 0:
            raise AssertionError(f"{tool} {' '.join(args)} failed ({result.returncode}):\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result

    # -- life ----------------------------------------------------------------------------
    def start(self) -> None:
        """initdb the primary, start it, clone the standby with ``pg_basebackup -R``, start
        it and wait until the primary sees it as its synchronous standby."""
        primary, standby = self.primary, self.standby
        self.run("initdb", "-D", str(primary.data), "-U", "postgres", "--auth=trust",
                 "--no-sync", "-E", "UTF8", "--locale=C")
        primary.configure(
            listen_addresses="127.0.0.1", port=str(primary.port),
            unix_socket_directories=str(self.root), wal_level="replica",
            max_wal_senders="5", hot_standby="on", max_connections="200",
            synchronous_commit="on",
            fsync="off",  # a process killed, not a machine: the page cache keeps the data
            shared_buffers="32MB", log_min_messages="warning")
        primary.start()
        primary.sql(f"CREATE DATABASE {DATABASE}")
        self.run("pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
                 "-D", str(standby.data), "-R", "-X", "stream", "--no-sync",
                 "--checkpoint=fast")
        standby.configure(port=str(standby.port), cluster_name=STANDBY_NAME,
                          synchronous_standby_names="")
        standby.start()
        # named only now: until a standby is there, every commit would wait for it
        primary.sql(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
        primary.sql("SELECT pg_reload_conf()")
        deadline = time.monotonic() + 30
        while primary.sql("SELECT sync_state FROM pg_stat_replication "
                          f"WHERE application_name = '{STANDBY_NAME}'") != "sync":
            if time.monotonic() > deadline:
                raise AssertionError("the standby never became synchronous:\n"
                                     + standby.log_text())
            time.sleep(0.1)

    def stop(self) -> None:
        for node in (self.standby, self.primary):
            if node.data.exists() and node.running():
                node.stop("immediate")

    # -- URLs ----------------------------------------------------------------------------
    def url(self, *, hosts: str = "both", target_session_attrs: str | None = "read-write") -> str:
        """SQLAlchemy's multi-host URL of :data:`DATABASE`: ``hosts`` "both" (the primary
        first), "primary" or "standby"."""
        nodes = {"both": (self.primary, self.standby), "primary": (self.primary,),
                 "standby": (self.standby,)}[hosts]
        query = "&".join(f"host=127.0.0.1:{n.port}" for n in nodes)
        if target_session_attrs:
            query += f"&target_session_attrs={target_session_attrs}"
        return f"postgresql+psycopg://postgres@/{DATABASE}?{query}"

    def comma_url(self) -> str:
        """libpq's comma form of :meth:`url` (hosts in the authority)."""
        return (f"postgresql://postgres@127.0.0.1:{self.primary.port},127.0.0.1:"
                f"{self.standby.port}/{DATABASE}?target_session_attrs=read-write")


def make_root() -> Path:
    """A temporary directory the server's user may write (``postgres`` when we are root)."""
    root = Path(tempfile.mkdtemp(prefix="encore-pg-cluster-"))
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(root, user.pw_uid, user.pw_gid)
    root.chmod(0o755)  # the test (root or not) reads the logs
    return root


@pytest.fixture
def pg_cluster() -> Iterator[PgCluster]:
    """A started primary and synchronous standby; stopped and removed afterwards."""
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("the PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup, psql) "
                    "are not installed: set PG_BINDIR or install postgresql")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.fail("running as root, the PostgreSQL cluster needs a 'postgres' user")
    root = make_root()
    cluster = PgCluster(bindir, root)
    try:
        cluster.start()
        yield cluster
    finally:
        try:
            cluster.stop()
        finally:
            shutil.rmtree(root, ignore_errors=True)
