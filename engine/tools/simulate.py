"""``encore simulate``: the retry engine's timeline on a virtual clock, at once.

It runs the real daemon — dispatcher, :class:`~engine.delivery.worker.MessageWorker`,
:class:`~engine.retry.RetryPolicy`, guards — on a virtual clock through the test harness
(:class:`~engine.testing.VirtualDaemon`), against a simulated service on an in-memory
SQLite store, then reads the timeline back from the attempt rows it wrote — the same rows a
real run writes.

With ``--breaker-threshold N`` the item also has its real circuit breaker
(:mod:`engine.delivery.breaker`), as the daemon builds it: the message's own failed attempts open
it, a retry that falls while it is open puts the message back in the queue until the open
period ends, and the dispatcher's next claim is the breaker's probe. The timeline then also
holds ``breaker_open`` (it opened, or opened again after a failed probe), ``breaker_hold``
(an attempt held back), ``breaker_half_open`` (the probe is let through) and
``breaker_close`` (the probe succeeded).
"""
from __future__ import annotations

import json
import logging
import random
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import click

from engine.cli.params import FiniteFloat
from engine.clock import Clock, VirtualClock
from engine.delivery.guards import GuardSettings
from engine.errors import ConfigurationError
from engine.retry import RetrySettings
from engine.settings import validate_settings
from engine.store import queries
from engine.store.sql import SqlStore
from engine.store.statuses import Status
from engine.testing import (
    ServerBehaviour,
    SimulatedOperation,
    SimulatedServerAdapter,
    VirtualDaemon,
)

ITEM = "Simulated"
# The loggers ``encore simulate`` silences while it runs: its timeline says what they would.
NOISY_LOGGERS = ("alembic", "adapters.failover", "engine.store.eventlog", "engine.delivery.worker",
                 "engine.delivery.breaker", "engine.runtime.cluster", "engine.runtime.daemon",
                 "engine.runtime.lifecycle", "engine.delivery.item")
MAX_SECONDS = 1e9  # seconds (about 31 years) any simulated time may take: the virtual clock's
#                    dates must stay within the calendar
MAX_SERVERS = 100  # simulated servers
SECONDS = FiniteFloat(minimum=0, maximum=MAX_SECONDS)
# The options' defaults: the settings' declared defaults.
RETRY = RetrySettings.defaults()
GUARDS = GuardSettings.defaults()
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
    adapters: list[SimulatedServerAdapter] = []

    def adapter(clock: Clock) -> SimulatedServerAdapter:
        adapters.append(SimulatedServerAdapter(clean, behaviour=behaviour, servers=servers,
                                               clock=clock, item_name=ITEM))
        return adapters[-1]

    # Nothing else runs: the daemon needs to wake only for the message (its parked times
    # and the breaker's), not to poll, beat or look for dead daemons every few seconds.
    harness = VirtualDaemon.for_item(ITEM, SimulatedOperation, clean, adapter=adapter,
                                     rng=random.Random(seed), poll_interval=MAX_SECONDS,
                                     lease_seconds=MAX_SECONDS)
    breaker_events: list[TimelineEvent] = []
    _listen_to_breaker(harness, breaker_events)
    store, clock = harness.store, harness.clock
    message_id = store.enqueue(target=ITEM, body_class=None, body="{}", now=clock.now())
    try:
        harness.run()
    except RuntimeError as exc:
        raise ConfigurationError(f"the simulation does not end ({exc}): give it an end "
                                 "(--failure-timeout, --max-attempts)") from exc
    timeline = _timeline(store, message_id, clock, behaviour, breaker_events)
    final = store.get_message(message_id)
    assert final is not None
    errors = queries.events(store, queries.EventFilter(type="Error", message_id=message_id))
    result = SimulationResult(timeline=timeline, status=final.status, attempts=final.attempts,
                              error_events=len(errors),
                              server_requests=adapters[0].total_requests)
    harness.stop()
    return result


def _listen_to_breaker(harness: VirtualDaemon, events: list[TimelineEvent]) -> None:
    """Tell ``events`` of every transition of the item's circuit breaker, if it has one."""
    guards = harness.daemon.guards(ITEM)
    if guards is None or guards.breaker is None:
        return
    clock = harness.clock

    def t(when: datetime) -> float:
        return round((when - clock.start).total_seconds(), 6)

    def tell(kind: str, when: datetime, attempt: int, until: datetime | None) -> None:
        detail = {"half_open": "one probe attempt", "close": "the probe succeeded"}.get(
            kind, f"until {t(until):g}" if until is not None else "until the probe ends")
        events.append(TimelineEvent(t(when), f"breaker_{kind}", attempt, None, detail))
    guards.breaker.listener = tell


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
    if final.status == Status.COMPLETED:
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


class _Jitter(click.ParamType):
    """``--jitter``: ``full``, or seconds as :data:`SECONDS`."""

    name = "seconds|full"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float | str:
        return "full" if value == "full" else SECONDS.convert(value, param, ctx)


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
@click.option("--bad-server-cooldown", type=FiniteFloat(minimum=0, maximum=MAX_SECONDS),
              default=ADAPTER.bad_server_cooldown, show_default=True,
              help="seconds a failed server is skipped while another is healthy; 0 = never")
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
              default=GUARDS.breaker_threshold, show_default=True,
              help="consecutive failed attempts that open the circuit breaker; 0 = none")
@click.option("--breaker-open-seconds", type=SECONDS, default=GUARDS.breaker_open_seconds,
              show_default=True, help="seconds the breaker stays open before its probe attempt")
@click.option("--seed", type=int, default=0, show_default=True, help="random seed for jitter")
@click.option("--json", "as_json", is_flag=True, help="print the timeline as JSON")
def simulate_command(response_timeout: float, retry_interval: float, failure_timeout: float,
                     server_delay: float, servers: int, bad_server_cooldown: float,
                     no_idempotent: bool,
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
                "bad_server_cooldown": bad_server_cooldown, "breaker_threshold": breaker_threshold,
                "breaker_open_seconds": breaker_open_seconds}
    behaviour = ServerBehaviour(delay=server_delay, fail_first=fail_first, status=status,
                                retry_after=retry_after)
    # the timeline says it all: the engine's own log lines are silenced while it runs, and
    # given back their levels after (the command may run inside a larger process: tests)
    quiet = [logging.getLogger(name) for name in NOISY_LOGGERS]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        result = simulate(settings, behaviour, servers=servers, seed=seed)
    finally:
        for logger, level in zip(quiet, levels):
            logger.setLevel(level)
    if as_json:
        click.echo(json.dumps([{k: v for k, v in asdict(e).items() if k != "detail"}
                               for e in result.timeline]))
        return
    width = max([16] + [len(e.event) for e in result.timeline])
    for e in result.timeline:
        where = f"server {chr(ord('A') + e.server)}" if e.server is not None and servers > 1 else ""
        label = f"attempt {e.attempt}" if e.attempt else ""
        line = f"{_clock(e.t):>9}  {e.event:<{width}} {label:<11} {where:<9} {e.detail}"
        click.echo(line.rstrip())
    click.echo(f"\n{result.server_requests} request(s) sent, {result.attempts} attempt(s), "
               f"{result.error_events} Error event(s); message ended {result.status}")


simulate_command.name = "simulate"
