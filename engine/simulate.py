"""``encore simulate``: the retry engine's timeline on a virtual clock, at once.

It runs the real :class:`~engine.worker.MessageWorker` and :class:`~engine.retry.RetryPolicy`
against a simulated service on an in-memory SQLite store, then reads the timeline back from
the attempt rows it wrote — the same rows a real run writes.

With ``--breaker-threshold N`` the item also has its real circuit breaker
(:mod:`engine.breaker`): the message's own failed attempts open it, a retry that falls while
it is open puts the message back in the queue until the open period ends, and the next
attempt is the breaker's probe. The timeline then also holds ``breaker_open`` (it opened, or
opened again after a failed probe), ``breaker_hold`` (an attempt held back), ``breaker_half_open``
(the probe is let through) and ``breaker_close`` (the probe succeeded).
"""
from __future__ import annotations

import json
import logging
import random
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import click

from engine.breaker import BreakerSettings, CircuitBreaker
from engine.cli_params import FiniteFloat
from engine.clock import VirtualClock
from engine.errors import ConfigurationError
from engine.host import OperationSettings
from engine.retry import RetrySettings
from engine.settings import validate_settings
from engine.store import queries
from engine.store.sql import SqlStore
from engine.testing import ServerBehaviour, SimulatedOperation, SimulatedServerAdapter
from engine.worker import MessageWorker, Result

ITEM = "Simulated"
MAX_HOLDS = 10_000  # a breaker that holds the message more often than this ends the run
MAX_SECONDS = 1e9  # seconds (about 31 years) any simulated time may take: the virtual clock's
#                    dates must stay within the calendar
MAX_SERVERS = 100  # simulated servers
SECONDS = FiniteFloat(minimum=0, maximum=MAX_SECONDS)
# The options' defaults: the settings' declared defaults.
RETRY = RetrySettings.defaults()
OPERATION = OperationSettings.defaults()
ADAPTER = SimulatedServerAdapter.settings_class.defaults()


@dataclass(frozen=True)
class TimelineEvent:
    """One line of the timeline: ``t`` seconds after the first attempt started."""

    t: float
    # attempt_start|attempt_timeout|attempt_error|late_response|retry_wait|give_up|success,
    # and with a breaker breaker_open|breaker_hold|breaker_half_open|breaker_close
    event: str
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
    breaker_events: list[TimelineEvent] = []
    observers = _breaker(host.operation_settings, store, clock, breaker_events,
                         response_timeout=adapter.response_timeout)
    worker = MessageWorker.from_settings(host, clean, store=store, clock=clock,
                                         rng=random.Random(seed), observers=observers)
    message_id = store.enqueue(target=ITEM, body_class=None, body="{}", now=clock.now())
    _deliver(store, worker, clock, message_id)
    timeline = _timeline(store, message_id, clock, behaviour, breaker_events)
    final = store.get_message(message_id)
    assert final is not None
    errors = queries.events(store, queries.EventFilter(type="Error", message_id=message_id))
    result = SimulationResult(timeline=timeline, status=final.status, attempts=final.attempts,
                              error_events=len(errors), server_requests=adapter.total_requests)
    store.dispose()
    return result


def _breaker(settings: OperationSettings, store: SqlStore, clock: VirtualClock,
             events: list[TimelineEvent], *, response_timeout: float) -> list[CircuitBreaker]:
    """The item's circuit breaker, if the settings ask for one, telling ``events``."""
    breaker = BreakerSettings.from_settings(settings, response_timeout=response_timeout)
    if breaker is None:
        return []

    def t(when: datetime) -> float:
        return round((when - clock.start).total_seconds(), 6)

    def tell(kind: str, when: datetime, attempt: int, until: datetime | None) -> None:
        detail = {"half_open": "one probe attempt", "close": "the probe succeeded"}.get(
            kind, f"until {t(until):g}" if until is not None else "until the probe ends")
        events.append(TimelineEvent(t(when), f"breaker_{kind}", attempt, None, detail))
    return [CircuitBreaker(ITEM, breaker, store=store, clock=clock, owner="simulate",
                           events=store.events, listener=tell)]


def _deliver(store: SqlStore, worker: MessageWorker, clock: VirtualClock,
             message_id: int) -> None:
    """Deliver the message until it ends; a message the breaker held goes back to its queue
    and is claimed again when it is due, as a dispatcher would."""
    for _ in range(MAX_HOLDS):
        row = store.claim_next(ITEM, owner="simulate", now=clock.now(), lease_seconds=3600)
        assert row is not None
        if worker.deliver(row) is not Result.HELD:
            return
        held = store.get_message(message_id)
        assert held is not None and held.next_attempt_at is not None
        clock.advance_to((held.next_attempt_at - clock.start).total_seconds())
    raise ConfigurationError(f"the breaker held the message {MAX_HOLDS} times: give the "
                             "simulation an end (--failure-timeout, --max-attempts)")


def _timeline(store: SqlStore, message_id: int, clock: VirtualClock,
              behaviour: ServerBehaviour,
              breaker_events: list[TimelineEvent] | None = None) -> list[TimelineEvent]:
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
    events += breaker_events or []
    rank = {"breaker_half_open": -1, "attempt_start": 0, "attempt_timeout": 1,
            "attempt_error": 1, "late_response": 2, "breaker_open": 2, "retry_wait": 3,
            "breaker_hold": 3, "breaker_close": 4, "success": 5, "give_up": 5}
    events.sort(key=lambda e: (e.t, e.attempt or 0, rank[e.event]))
    return events


class _Jitter(FiniteFloat):
    """``--jitter``: ``full``, or seconds as :data:`SECONDS`."""

    name = "seconds|full"

    def __init__(self) -> None:
        super().__init__(minimum=0, maximum=MAX_SECONDS)

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float | str:
        return "full" if value == "full" else super().convert(value, param, ctx)


def _clock(t: float) -> str:
    minutes, seconds = divmod(t, 60)
    return f"{int(minutes):02d}:{seconds:06.3f}".rstrip("0").rstrip(".")


@click.command()
@click.option("--response-timeout", type=SECONDS, default=ADAPTER.response_timeout,
              show_default=True)
@click.option("--retry-interval", type=SECONDS, default=RETRY.retry_interval, show_default=True)
@click.option("--failure-timeout", type=FiniteFloat(minimum=-1, maximum=MAX_SECONDS),
              default=RETRY.failure_timeout, show_default=True,
              help="-1 = forever (then bound it with --max-attempts)")
@click.option("--server-delay", type=SECONDS, default=0.0, show_default=True,
              help="seconds the service takes to answer")
@click.option("--servers", type=click.IntRange(1, MAX_SERVERS), default=1, show_default=True)
@click.option("--no-idempotent", is_flag=True, help="never re-send an outcome-unknown request")
@click.option("--fail-first", type=click.IntRange(min=0), default=None,
              help="the first K requests fail")
@click.option("--status", type=click.IntRange(100, 599), default=None,
              help="failing requests answer this HTTP status")
@click.option("--retry-after", default=None, help="Retry-After header of failing requests")
@click.option("--backoff", default=RETRY.backoff, show_default=True)
@click.option("--backoff-base", type=SECONDS, default=RETRY.backoff_base, show_default=True)
@click.option("--backoff-multiplier", type=FiniteFloat(minimum=1, maximum=MAX_SECONDS),
              default=RETRY.backoff_multiplier, show_default=True)
@click.option("--backoff-max", type=SECONDS, default=RETRY.backoff_max, show_default=True)
@click.option("--jitter", type=_Jitter(), default=RETRY.jitter, show_default=True,
              help="seconds, or 'full'")
@click.option("--max-attempts", type=click.IntRange(min=0), default=RETRY.max_attempts,
              show_default=True)
@click.option("--strict", is_flag=True, help="strict_failure_timeout = true")
@click.option("--breaker-threshold", type=click.IntRange(min=0),
              default=OPERATION.breaker_threshold, show_default=True,
              help="consecutive failed attempts that open the circuit breaker; 0 = none")
@click.option("--breaker-open-seconds", type=SECONDS, default=OPERATION.breaker_open_seconds,
              show_default=True, help="seconds the breaker stays open before its probe attempt")
@click.option("--seed", type=int, default=0, show_default=True, help="random seed for jitter")
@click.option("--json", "as_json", is_flag=True, help="print the timeline as JSON")
def simulate_command(response_timeout: float, retry_interval: float, failure_timeout: float,
                     server_delay: float, servers: int, no_idempotent: bool,
                     fail_first: int | None, status: int | None, retry_after: str | None,
                     backoff: str, backoff_base: float, backoff_multiplier: float,
                     backoff_max: float, jitter: float | str, max_attempts: int, strict: bool,
                     breaker_threshold: int, breaker_open_seconds: float, seed: int,
                     as_json: bool) -> None:
    """Print the retry timeline the engine produces, on a virtual clock, at once."""
    if failure_timeout == -1 and max_attempts == 0 and (fail_first is None):
        raise ConfigurationError("--failure-timeout -1 retries forever: add --max-attempts N "
                                 "or --fail-first K so the simulation ends")
    settings = {"response_timeout": response_timeout, "retry_interval": retry_interval,
                "failure_timeout": failure_timeout, "idempotent": not no_idempotent,
                "backoff": backoff, "backoff_base": backoff_base,
                "backoff_multiplier": backoff_multiplier, "backoff_max": backoff_max,
                "jitter": jitter,
                "max_attempts": max_attempts, "strict_failure_timeout": strict,
                "bad_server_cooldown": 3600.0, "breaker_threshold": breaker_threshold,
                "breaker_open_seconds": breaker_open_seconds}
    behaviour = ServerBehaviour(delay=server_delay, fail_first=fail_first, status=status,
                                retry_after=retry_after)
    for noisy in ("alembic", "engine.store.eventlog", "engine.worker", "engine.breaker"):
        # the timeline says it all
        logging.getLogger(noisy).setLevel(logging.CRITICAL + 1)
    result = simulate(settings, behaviour, servers=servers, seed=seed)
    if as_json:
        click.echo(json.dumps([{k: v for k, v in asdict(e).items() if k != "detail"}
                               for e in result.timeline]))
        return
    width = max([16] + [len(e.event) for e in result.timeline])
    for e in result.timeline:
        where = f"server {chr(ord('A') + e.server)}" if e.server is not None and servers > 1 else ""
        label = f"attempt {e.attempt}" if e.attempt else ""
        click.echo(f"{_clock(e.t):>9}  {e.event:<{width}} {label:<11} {where:<9} {e.detail}".rstrip())
    click.echo(f"\n{result.server_requests} request(s) sent, {result.attempts} attempt(s), "
               f"{result.error_events} Error event(s); message ended {result.status}")


simulate_command.name = "simulate"
