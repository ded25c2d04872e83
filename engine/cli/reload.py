"""``encore reload`` (docs/operating.md): SIGHUP to each live daemon of the production on this
host, then each one's answer is its first reload event after the signal. Daemons on other
hosts are named, not signalled."""
from __future__ import annotations

import os
import signal
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

import click

from engine.cli.params import FiniteFloat
from engine.errors import EncoreError
from engine.runtime.cluster import pid_namespace
from engine.runtime.reload import REFUSED, RELOADED
from engine.store import queries

if TYPE_CHECKING:
    from engine.config.production import ProductionOutline
    from engine.store.sql import SqlStore

DEFAULT_WAIT = 60.0  # seconds to wait for every daemon's answer (a reload may load WSDLs)
POLL = 0.2  # seconds between two reads of the event log while waiting


class ReloadContext(Protocol):
    """What the command needs of the group's context object."""

    @property
    def store(self) -> SqlStore: ...

    @property
    def outline(self) -> ProductionOutline: ...


@dataclass
class Signalled:
    """A daemon asked to reload, and its answer once it came (``outcome``: ``reloaded``,
    ``refused``, or the reason it could not be asked)."""

    daemon_id: str
    pid: int
    outcome: str | None = None
    text: str = ""


@click.command()
@click.option("--wait", "wait", type=FiniteFloat(minimum=0, maximum=86400), default=DEFAULT_WAIT,
              show_default=True, metavar="S",
              help="seconds to wait for every daemon's answer")
@click.pass_obj
def reload(ctx: ReloadContext, wait: float) -> None:
    """Reload the production file in the daemons running it on this host (SIGHUP) and say
    what each did: reloaded, or refused and why. Exit 1 unless every one reloaded."""
    store, production = ctx.store, ctx.outline
    here, elsewhere = _live_daemons(store, production.name, production.lease_seconds)
    if not here:
        where = f"; on other hosts: {', '.join(d['id'] for d in elsewhere)} (the portal's " \
                "Reload reaches them)" if elsewhere else ""
        raise EncoreError(f"no daemon of production {production.name} runs on this host "
                          f"({socket.gethostname()}){where}; `encore status` lists the daemons")
    after = _last_event_id(store)
    asked = [_signal(d) for d in here]
    _wait_for_answers(store, [s for s in asked if s.outcome is None], after, wait)
    for one in asked:
        click.echo(f"daemon {one.daemon_id} (pid {one.pid}): {one.outcome or 'no answer'}"
                   + (f": {one.text}" if one.text else ""))
    for d in elsewhere:
        click.echo(f"daemon {d['id']} on host {d['host']}: not asked (another host)")
    if any(one.outcome != "reloaded" for one in asked):
        raise SystemExit(1)


def _live_daemons(store: SqlStore, production: str, lease_seconds: float
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The live daemons of ``production``: (those this process may signal, the others)."""
    alive_after = store.db_now() - timedelta(seconds=lease_seconds)
    host, namespace = socket.gethostname(), pid_namespace()
    live = [d for d in queries.daemons(store) if d["heartbeat_at"] >= alive_after
            and d.get("production") in (None, production)]
    here = [d for d in live if d["host"] == host and namespace is not None
            and d.get("pid_namespace") == namespace]
    return here, [d for d in live if d not in here]


def _last_event_id(store: SqlStore) -> int:
    newest = queries.events(store, queries.EventFilter(limit=1))
    return int(newest[-1]["id"]) if newest else 0


def _signal(daemon: dict[str, Any]) -> Signalled:
    """SIGHUP to ``daemon``; a daemon that cannot be signalled is answered at once."""
    one = Signalled(daemon["id"], int(daemon["pid"]))
    try:
        os.kill(one.pid, signal.SIGHUP)
    except ProcessLookupError:
        one.outcome, one.text = "not asked", "its process is gone"
    except PermissionError:
        one.outcome, one.text = "not asked", "not allowed to signal it (run as its user)"
    return one


def _wait_for_answers(store: SqlStore, waiting: list[Signalled], after: int,
                      wait: float) -> None:
    """Read the event log past ``after`` until each of ``waiting`` reported its reload's
    end, or ``wait`` seconds passed (then ``outcome`` stays None)."""
    by_id = {one.daemon_id: one for one in waiting}
    deadline = time.monotonic() + wait
    while True:
        for event in queries.events(store, queries.EventFilter(after_id=after)):
            after = max(after, int(event["id"]))
            _answer(by_id.get(event.get("job") or ""), event)
        if all(one.outcome is not None for one in waiting) or time.monotonic() >= deadline:
            return
        time.sleep(POLL)


def _answer(one: Signalled | None, event: dict[str, Any]) -> None:
    """Take ``event`` as the answer of ``one`` if it ends a reload and none came yet."""
    if one is None or one.outcome is not None or event.get("source_method") != "reload":
        return
    text = str(event["text"])
    if event["type"] == "Info" and text.startswith(RELOADED):
        one.outcome, one.text = "reloaded", text
    elif event["type"] == "Error" and text.startswith(REFUSED):
        one.outcome, one.text = "refused", text
