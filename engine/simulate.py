"""``encore simulate``: the retry engine's timeline on a virtual clock, at once.

It runs the real :class:`~engine.worker.MessageWorker` and :class:`~engine.retry.RetryPolicy`
against a simulated service on an in-memory SQLite store, then reads the timeline back from
the attempt rows it wrote — the same rows a real run writes.
"""
from __future__ import annotations

import json
import logging
import random
from dataclasses import asdict, dataclass
from typing import Any

import click

from engine.clock import VirtualClock
from engine.errors import ConfigurationError
from engine.settings import validate_settings
from engine.store import queries
from engine.store.sql import SqlStore
from engine.testing import ServerBehaviour, SimulatedOperation, SimulatedServerAdapter
from engine.worker import MessageWorker

ITEM = "Simulated"


@dataclass(frozen=True)
class TimelineEvent:
    """One line of the timeline: ``t`` seconds after the first attempt started."""

    t: float
    event: str  # attempt_start|attempt_timeout|attempt_error|late_response|retry_wait|give_up|success
    attempt: int | None = None
    server: int | None = None
    detail: str = ""


@dataclass(frozen=True)
class SimulationResult:
    timeline: list[TimelineEvent]
    status: str
    attempts: int
    error_events: int
    server_requests: int


def simulate(settings: dict[str, Any], behaviour: ServerBehaviour, *, servers: int = 1,
             seed: int = 0) -> SimulationResult:
    """Deliver one message under ``settings`` (item settings, validated here)."""
    clean = validate_settings(ITEM, settings, SimulatedOperation.declared_settings())
    clock = VirtualClock()
    store = SqlStore("sqlite://")
    store.upgrade()
    adapter = SimulatedServerAdapter(clean, behaviour=behaviour, servers=servers, clock=clock,
                                     item_name=ITEM)
    adapter.start()
    host = SimulatedOperation(ITEM, clean, events=store.events, adapter=adapter)
    worker = MessageWorker.from_settings(host, clean, store=store, clock=clock,
                                         rng=random.Random(seed))
    message_id = store.enqueue(target=ITEM, body_class=None, body="{}", now=clock.now())
    row = store.claim_next(ITEM, owner="simulate", now=clock.now(), lease_seconds=3600)
    assert row is not None
    worker.deliver(row)
    timeline = _timeline(store, message_id, clock, behaviour)
    final = store.get_message(message_id)
    assert final is not None
    errors = queries.events(store, queries.EventFilter(type="Error", message_id=message_id))
    result = SimulationResult(timeline=timeline, status=final.status, attempts=final.attempts,
                              error_events=len(errors), server_requests=adapter.total_requests)
    store.dispose()
    return result


def _timeline(store: SqlStore, message_id: int, clock: VirtualClock,
              behaviour: ServerBehaviour) -> list[TimelineEvent]:
    origin = clock.start
    attempts = store.attempts(message_id)
    servers = {name: i for i, name in enumerate(sorted({a.server for a in attempts if a.server}))}

    def t(value: Any) -> float:
        return round((value - origin).total_seconds(), 6)

    events: list[TimelineEvent] = []
    for index, a in enumerate(attempts):
        server = servers.get(a.server or "")
        events.append(TimelineEvent(t(a.started_at), "attempt_start", a.attempt, server))
        if a.outcome != "ok":
            kind = "attempt_timeout" if a.outcome == "timeout" else "attempt_error"
            events.append(TimelineEvent(t(a.ended_at), kind, a.attempt, server, a.error_text or ""))
            if index + 1 < len(attempts):
                events.append(TimelineEvent(t(a.ended_at), "retry_wait", a.attempt, server,
                                            f"until {t(attempts[index + 1].started_at):g}"))
    starts = {round((a.started_at - origin).total_seconds(), 6): a.attempt for a in attempts}
    for when, server in behaviour.late_responses:  # a late response answers the attempt that
        owner = starts.get(round(when - behaviour.delay, 6))  # started `delay` seconds before
        events.append(TimelineEvent(round(when, 6), "late_response", owner, server, "discarded"))
    final = store.get_message(message_id)
    assert final is not None and final.time_completed is not None
    if final.status == "Completed":
        events.append(TimelineEvent(t(final.time_completed), "success", final.attempts))
    else:
        events.append(TimelineEvent(t(final.time_completed), "give_up", final.attempts,
                                    detail=final.error_text or ""))
    rank = {"attempt_start": 0, "attempt_timeout": 1, "attempt_error": 1, "late_response": 2,
            "retry_wait": 3, "success": 4, "give_up": 4}
    events.sort(key=lambda e: (e.t, e.attempt or 0, rank[e.event]))
    return events


def _clock(t: float) -> str:
    minutes, seconds = divmod(t, 60)
    return f"{int(minutes):02d}:{seconds:06.3f}".rstrip("0").rstrip(".")


@click.command()
@click.option("--response-timeout", type=float, default=30.0, show_default=True)
@click.option("--retry-interval", type=float, default=5.0, show_default=True)
@click.option("--failure-timeout", type=float, default=15.0, show_default=True,
              help="-1 = forever (then bound it with --max-attempts)")
@click.option("--server-delay", type=float, default=0.0, show_default=True,
              help="seconds the service takes to answer")
@click.option("--servers", type=int, default=1, show_default=True)
@click.option("--no-idempotent", is_flag=True, help="never re-send an outcome-unknown request")
@click.option("--fail-first", type=int, default=None, help="the first K requests fail")
@click.option("--status", type=int, default=None, help="failing requests answer this HTTP status")
@click.option("--retry-after", default=None, help="Retry-After header of failing requests")
@click.option("--backoff", default="fixed", show_default=True)
@click.option("--backoff-base", type=float, default=1.0, show_default=True)
@click.option("--backoff-multiplier", type=float, default=2.0, show_default=True)
@click.option("--backoff-max", type=float, default=60.0, show_default=True)
@click.option("--jitter", default="0", show_default=True, help="seconds, or 'full'")
@click.option("--max-attempts", type=int, default=0, show_default=True)
@click.option("--strict", is_flag=True, help="strict_failure_timeout = true")
@click.option("--seed", type=int, default=0, show_default=True, help="random seed for jitter")
@click.option("--json", "as_json", is_flag=True, help="print the timeline as JSON")
def simulate_command(response_timeout: float, retry_interval: float, failure_timeout: float,
                     server_delay: float, servers: int, no_idempotent: bool,
                     fail_first: int | None, status: int | None, retry_after: str | None,
                     backoff: str, backoff_base: float, backoff_multiplier: float,
                     backoff_max: float, jitter: str, max_attempts: int, strict: bool,
                     seed: int, as_json: bool) -> None:
    """Print the retry timeline the engine produces, on a virtual clock, at once."""
    if failure_timeout == -1 and max_attempts == 0 and (fail_first is None):
        raise ConfigurationError("--failure-timeout -1 retries forever: add --max-attempts N "
                                 "or --fail-first K so the simulation ends")
    settings = {"response_timeout": response_timeout, "retry_interval": retry_interval,
                "failure_timeout": failure_timeout, "idempotent": not no_idempotent,
                "backoff": backoff, "backoff_base": backoff_base,
                "backoff_multiplier": backoff_multiplier, "backoff_max": backoff_max,
                "jitter": jitter if jitter == "full" else float(jitter),
                "max_attempts": max_attempts, "strict_failure_timeout": strict,
                "bad_server_cooldown": 3600.0}
    behaviour = ServerBehaviour(delay=server_delay, fail_first=fail_first, status=status,
                                retry_after=retry_after)
    for noisy in ("alembic", "engine.store.eventlog"):  # the timeline says it all
        logging.getLogger(noisy).setLevel(logging.CRITICAL + 1)
    result = simulate(settings, behaviour, servers=servers, seed=seed)
    if as_json:
        click.echo(json.dumps([{k: v for k, v in asdict(e).items() if k != "detail"}
                               for e in result.timeline]))
        return
    for e in result.timeline:
        where = f"server {chr(ord('A') + e.server)}" if e.server is not None and servers > 1 else ""
        label = f"attempt {e.attempt}" if e.attempt else ""
        click.echo(f"{_clock(e.t):>9}  {e.event:<16} {label:<11} {where:<9} {e.detail}".rstrip())
    click.echo(f"\n{result.server_requests} request(s) sent, {result.attempts} attempt(s), "
               f"{result.error_events} Error event(s); message ended {result.status}")


simulate_command.name = "simulate"
