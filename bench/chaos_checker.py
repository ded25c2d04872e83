"""The fault campaign's judge (issue 22 point 7): what must hold after any fault, read back
from the database and from the loopback server's own count of what it received.

It knows nothing of the faults; it is given a database, the items and their roles, the
messages the producer saw accepted, the server's arrivals and the daemons that should be
alive, and it lists every :class:`Violation` of these invariants:

- ``lost``: an accepted message is not in the database.
- ``not_ended``: a message is not final (Completed, Error, Discarded, Aborted), nor
  Suspended with a reason.
- ``sent_twice``: a message of a non-idempotent item was processed (answered 2xx) by the
  server more than once.
- ``completed_unanswered``: a Completed message the server never answered 2xx (a
  completion the service cannot have given).
- ``fifo_order``: a request of a FIFO item's message reached the server after a request of
  a message accepted behind it — re-sends included: ``[m1, m2, m1 again]`` breaks it
  (docs/scale-out.md: a re-sent message never arrives after a later one).
- ``reconciliation``: a message the server answered 2xx, in time and within the XML limits
  (:attr:`Arrival.usable`), did not end ``Completed`` — unless its item is not idempotent
  and it ended on an outcome-unknown reason (its delivery was cut short, or its answer
  could not be read in time: it must not be sent again, so an operator decides).
- ``claim_stolen``: a daemon lost a claim (another daemon took its message over) while no
  fault had touched it (:class:`FaultWindow`): only a faulted daemon's leases may expire.
  The evidence is the daemons' own log (:func:`claim_losses`); a loss the engine held back
  in a once-a-minute count is placed anywhere in the minute before the count's line.
- ``xml_stall``: an inbound SOAP call of hostile XML was answered later than the lease (the
  campaign times them): one document held the daemon's interpreter.
- ``first_failure``: a message with a failed attempt has not exactly one first-failure
  ``Error`` event (``source_method = 'on_first_failure'``, docs/retries.md rule 6), or one
  without a failed attempt has any.
- ``give_up``: more than one give-up ``Error`` event (``on_give_up``), or a message in
  status Error without one, or one not in Error with one.
- ``stuck``: a daemon that should be alive has no heartbeat fresher than its lease, or
  sent the server nothing once the faults had stopped (its requests name it: each daemon
  calls the server under a path of its own).

The checker is written first and kept honest: tests/unit/test_chaos_checker.py builds small
SQLite databases that break each invariant on purpose and asserts this reports exactly that.
"""
from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import select, text
from sqlalchemy.engine import Engine

from engine.clock import as_utc, utcnow
from engine.store.models import daemon
from engine.store.statuses import FINAL_STATUSES

__all__ = ["INVARIANTS", "ROLES", "Arrival", "ClaimLoss", "Evidence", "FaultWindow", "Violation",
           "check", "claim_losses", "message_tag"]

INVARIANTS = ("lost", "not_ended", "sent_twice", "completed_unanswered", "fifo_order",
              "reconciliation", "first_failure", "give_up", "stuck", "claim_stolen",
              "xml_stall")
ROLES = ("idempotent", "once", "fifo")  # what the checker holds each item to
# an attempt the engine ended without sending it (a poison message suspended first): no
# failure of the request, so no first-failure event is owed for it
UNSENT_TEXT = "not sent:"
# how the engine's reasons begin when a request may have been processed (engine.errors
# CRASH_TEXT, engine.retry.policy UNKNOWN_OUTCOME_REASON)
UNKNOWN_PREFIX = "outcome unknown"
GIVE_UP_PREFIX = "giving up: "  # how a give-up's reason begins (an Error's error text)
# what a daemon logs when a message it held was taken over (engine.delivery.item and
# engine.delivery.dispatch: ``abandoning message N``, ``message(s) [N, M] were taken over by
# another daemon``) or a lease it held (engine.runtime.cluster: ``lost lease item:Fifo to
# another daemon``); the line begins with the log's asctime
_LOSS = re.compile(r"^(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*?"
                   r"(?:abandoning message (?P<one>\d+)"
                   r"|message\(s\) \[(?P<many>[\d, ]+)\] were taken over"
                   r"|lost lease (?P<lease>\S+) to another daemon)")
LOSS_BEFORE = 1.0  # seconds a loss may be logged before its fault began (clock reading)
# The engine logs a repeated warning once a minute and then one line that says how many it
# held back since when (engine.observe.logs): such a line stands for losses from that time on
_SUMMARY = re.compile(r"more like this held back since "
                      r"(?P<since>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+)")


@dataclass(frozen=True)
class Arrival:
    """One request as the loopback server saw it: the message's tag (carried in the body),
    the server's arrival sequence number, the status it answered and the daemon that sent
    it (the first segment of the request's path)."""

    tag: str
    seq: int
    status: int
    sender: str = ""
    # why a 2xx answer could not be taken as a success by its daemon: "late" (after the
    # item's response timeout), "xml" (a document beyond the XML limits); "" when it could
    flaw: str = ""

    @property
    def processed(self) -> bool:
        return 200 <= self.status < 300

    @property
    def usable(self) -> bool:
        """Answered 2xx, in time, within the limits: the message can only end Completed."""
        return self.processed and not self.flaw


@dataclass(frozen=True)
class ClaimLoss:
    """A daemon's own account that another daemon took a message (``message_id``) or a lease
    (``message_id`` None) it held over: ``at`` is the epoch second its log line was written
    at, by the daemon's clock."""

    daemon: str
    message_id: int | None
    at: float
    text: str = ""
    span: float = 0.0  # the loss happened at most this many seconds before ``at``


@dataclass(frozen=True)
class FaultWindow:
    """A fault and whom it touched: ``daemons`` (empty: every daemon, as a database restart
    does), from ``start`` to ``end`` (epoch seconds, the campaign's clock). ``offset``:
    seconds the target's clock was stepped by (its log lines are that much off)."""

    daemons: frozenset[str]
    start: float
    end: float
    offset: float = 0.0

    def covers(self, loss: ClaimLoss, grace: float) -> bool:
        """True if ``loss`` may come of this fault: its daemon's, logged in the window or
        within ``grace`` seconds after it (the daemon notices at its next write)."""
        if self.daemons and loss.daemon not in self.daemons:
            return False
        return any(self.start - LOSS_BEFORE <= loss.at - off
                   and loss.at - off - loss.span <= self.end + grace
                   for off in {0.0, self.offset})


@dataclass(frozen=True)
class Violation:
    invariant: str
    message_id: int | None
    detail: str

    def __str__(self) -> str:
        where = f"message {self.message_id}: " if self.message_id is not None else ""
        return f"{self.invariant}: {where}{self.detail}"


@dataclass
class Evidence:
    """What the campaign gives the checker about one database."""

    roles: Mapping[str, str]  # item name → role (ROLES)
    accepted: Mapping[str, int] = field(default_factory=dict)  # tag → id the producer got
    arrivals: Iterable[Arrival] = ()
    live_pids: Iterable[int] = ()  # daemons that should be alive (their process ids)
    lease_seconds: float = 30.0
    # daemons (by the sender name of their requests) that must each have sent something
    # from arrival number ``since_seq`` on: after the last fault
    senders: Iterable[str] = ()
    since_seq: int = 0
    claim_losses: Iterable[ClaimLoss] = ()  # what the daemons logged (:func:`claim_losses`)
    faults: Iterable[FaultWindow] = ()
    loss_grace: float = 10.0  # seconds after a fault its target may still find a claim lost


@dataclass(frozen=True)
class _Message:
    id: int
    target: str
    status: str
    error_text: str | None
    tag: str | None


def message_tag(body: str | None) -> str | None:
    """The tag the campaign put in a message: an HttpOperation body (``{"body": TAG, ...}``)
    or a SoapOperation's (``{"operation": "echo", "args": {"text": TAG}}``)."""
    try:
        value = json.loads(body or "")
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    tag = value.get("body")
    if tag is None and isinstance(value.get("args"), dict):
        tag = value["args"].get("text")
    return tag if isinstance(tag, str) else None


def check(engine: Engine, evidence: Evidence) -> list[Violation]:
    """Every violation of the invariants (module docstring) in the database of ``engine``."""
    messages = _messages(engine, list(evidence.roles))
    arrivals = sorted(evidence.arrivals, key=lambda a: a.seq)
    violations = _lost(messages, evidence.accepted)
    violations += _not_ended(messages)
    violations += _sent_twice(messages, evidence.roles, arrivals)
    violations += _completed_unanswered(messages, arrivals)
    violations += _fifo_order(messages, evidence.roles, arrivals)
    violations += _reconciliation(messages, evidence.roles, arrivals)
    violations += _events(engine, messages)
    violations += _stuck(engine, list(evidence.live_pids), evidence.lease_seconds)
    violations += _silent(arrivals, list(evidence.senders), evidence.since_seq)
    violations += _claim_stolen(list(evidence.claim_losses), list(evidence.faults),
                                evidence.loss_grace)
    return violations


def claim_losses(daemon_name: str, log: str) -> list[ClaimLoss]:
    """Every claim ``daemon_name`` says in its ``log`` it lost to another daemon."""
    out = []
    for line in log.splitlines():
        found = _LOSS.search(line)
        if found is None:
            continue
        at = datetime.strptime(found["at"], "%Y-%m-%d %H:%M:%S,%f").timestamp()  # local
        text = line[found.end("at") + 1:][:300]
        summary = _SUMMARY.search(line)
        span = 0.0 if summary is None else max(at - datetime.strptime(
            summary["since"], "%Y-%m-%d %H:%M:%S,%f").timestamp(), 0.0) + 1.0
        if found["lease"]:
            out.append(ClaimLoss(daemon_name, None, at, text, span))
            continue
        ids = found["one"] or found["many"]
        out += [ClaimLoss(daemon_name, int(mid), at, text, span)
                for mid in ids.replace(",", " ").split()]
    return out


def counts(violations: Iterable[Violation]) -> dict[str, int]:
    """Violations per invariant, every invariant named (0 where none)."""
    found = Counter(v.invariant for v in violations)
    return {name: found.get(name, 0) for name in INVARIANTS}


# -- reading -------------------------------------------------------------------------------
def _messages(engine: Engine, targets: list[str]) -> dict[int, _Message]:
    query = text("SELECT id, target, status, error_text, body FROM message_header "
                 "WHERE kind = 'request'")
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    return {int(r.id): _Message(int(r.id), r.target, r.status, r.error_text,
                                message_tag(r.body))
            for r in rows if r.target in targets}


def _by_tag(arrivals: list[Arrival]) -> dict[str, list[Arrival]]:
    seen: dict[str, list[Arrival]] = defaultdict(list)
    for arrival in arrivals:
        seen[arrival.tag].append(arrival)
    return seen


# -- the invariants ------------------------------------------------------------------------
def _lost(messages: dict[int, _Message], accepted: Mapping[str, int]) -> list[Violation]:
    out = []
    for tag, mid in sorted(accepted.items(), key=lambda kv: kv[1]):
        row = messages.get(mid)
        if row is None or row.tag != tag:
            out.append(Violation("lost", mid, f"accepted as {tag!r}, not in the database"))
    return out


def _not_ended(messages: dict[int, _Message]) -> list[Violation]:
    out = []
    for row in messages.values():
        if row.status in FINAL_STATUSES:
            continue
        if row.status == "Suspended" and (row.error_text or "").strip():
            continue
        why = "Suspended without a reason" if row.status == "Suspended" else row.status
        out.append(Violation("not_ended", row.id, f"{row.target}: {why}"))
    return out


def _sent_twice(messages: dict[int, _Message], roles: Mapping[str, str],
                arrivals: list[Arrival]) -> list[Violation]:
    seen = _by_tag(arrivals)
    out = []
    for row in messages.values():
        if roles.get(row.target) != "once" or row.tag is None:
            continue
        processed = sum(1 for a in seen.get(row.tag, ()) if a.processed)
        if processed > 1:
            out.append(Violation("sent_twice", row.id,
                                 f"{row.target}: processed {processed} times by the server"))
    return out


def _completed_unanswered(messages: dict[int, _Message],
                          arrivals: list[Arrival]) -> list[Violation]:
    answered = {a.tag for a in arrivals if a.processed}
    return [Violation("completed_unanswered", row.id,
                      f"{row.target}: Completed, but the server never answered it 2xx")
            for row in messages.values()
            if row.status == "Completed" and row.tag is not None and row.tag not in answered]


def _fifo_order(messages: dict[int, _Message], roles: Mapping[str, str],
                arrivals: list[Arrival]) -> list[Violation]:
    """Accept order is the id order (one producer per FIFO item, sending one at a time);
    every request of a message — a re-send too — must reach the server before any request
    of a message accepted behind it."""
    out = []
    for item in sorted(name for name, role in roles.items() if role == "fifo"):
        ids = {m.tag: m.id for m in messages.values() if m.target == item and m.tag}
        latest: tuple[int, int] | None = None  # (id, seq) of the latest message arrived
        late: set[int] = set()
        for arrival in arrivals:
            mid = ids.get(arrival.tag)
            if mid is None:
                continue
            if latest is not None and mid < latest[0]:
                if mid not in late:
                    late.add(mid)
                    out.append(Violation("fifo_order", mid, f"{item}: request {arrival.seq} "
                                         f"reached the server after request {latest[1]} of "
                                         f"message {latest[0]}, accepted after it"))
            elif latest is None or mid > latest[0]:
                latest = (mid, arrival.seq)
    return out


def _reconciliation(messages: dict[int, _Message], roles: Mapping[str, str],
                    arrivals: list[Arrival]) -> list[Violation]:
    usable = {a.tag for a in arrivals if a.usable}
    out = []
    for row in messages.values():
        if row.tag not in usable or row.status == "Completed":
            continue
        reason = (row.error_text or "").strip()
        if roles.get(row.target) == "once" and row.status in ("Suspended", "Error") \
                and reason.removeprefix(GIVE_UP_PREFIX).startswith(UNKNOWN_PREFIX):
            continue  # may have been processed: not sent again, an operator decides
        out.append(Violation("reconciliation", row.id,
                             f"{row.target}: the server answered it 2xx, yet it ended "
                             f"{row.status}: {reason[:200] or '(no reason)'}"))
    return out


def _events(engine: Engine, messages: dict[int, _Message]) -> list[Violation]:
    failed = _failed_attempts(engine)
    events = _event_counts(engine)
    out = []
    for row in messages.values():
        first = events.get((row.id, "on_first_failure"), 0)
        owed = 1 if failed.get(row.id, 0) else 0
        if first != owed:
            out.append(Violation("first_failure", row.id,
                                 f"{row.target}: {first} first-failure Error events, "
                                 f"{failed.get(row.id, 0)} failed attempts"))
        give_ups = events.get((row.id, "on_give_up"), 0)
        owed_give_up = 1 if row.status == "Error" else 0
        if give_ups != owed_give_up:
            out.append(Violation("give_up", row.id,
                                 f"{row.target}: {give_ups} give-up Error events, status "
                                 f"{row.status}"))
    return out


def _failed_attempts(engine: Engine) -> dict[int, int]:
    query = text("SELECT message_id, count(*) AS n FROM message_attempt "
                 "WHERE ended_at IS NOT NULL AND outcome IS NOT NULL AND outcome <> 'ok' "
                 "AND (error_text IS NULL OR error_text NOT LIKE :unsent) "
                 "GROUP BY message_id")
    with engine.connect() as conn:
        rows = conn.execute(query, {"unsent": UNSENT_TEXT + "%"}).all()
    return {int(r.message_id): int(r.n) for r in rows}


def _event_counts(engine: Engine) -> dict[tuple[int, str], int]:
    query = text("SELECT message_id, source_method, count(*) AS n FROM event_log "
                 "WHERE type = 'Error' AND message_id IS NOT NULL "
                 "AND source_method IN ('on_first_failure', 'on_give_up') "
                 "GROUP BY message_id, source_method")
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    return {(int(r.message_id), r.source_method): int(r.n) for r in rows}


def _stuck(engine: Engine, pids: list[int], lease_seconds: float) -> list[Violation]:
    if not pids:
        return []
    now = _db_now(engine)
    with engine.connect() as conn:
        rows = conn.execute(select(daemon.c.pid, daemon.c.heartbeat_at)).all()
    freshest: dict[int, datetime] = {}
    for row in rows:
        beat = as_utc(row.heartbeat_at)
        if beat is not None and (row.pid not in freshest or beat > freshest[row.pid]):
            freshest[int(row.pid)] = beat
    out = []
    for pid in pids:
        beat = freshest.get(pid)
        if beat is None:
            out.append(Violation("stuck", None, f"daemon pid {pid}: no heartbeat row"))
        elif now - beat > timedelta(seconds=lease_seconds):
            age = (now - beat).total_seconds()
            out.append(Violation("stuck", None, f"daemon pid {pid}: last heartbeat {age:.1f} s "
                                 f"ago (lease {lease_seconds:g} s)"))
    return out


def _silent(arrivals: list[Arrival], senders: list[str], since: int) -> list[Violation]:
    active = {a.sender for a in arrivals if a.seq >= since}
    return [Violation("stuck", None, f"daemon {name}: sent nothing once the faults had "
                      f"stopped (from request {since} on)")
            for name in senders if name not in active]


def _claim_stolen(losses: list[ClaimLoss], faults: list[FaultWindow],
                  grace: float) -> list[Violation]:
    return [Violation("claim_stolen", loss.message_id,
                      f"daemon {loss.daemon}, touched by no fault, lost its claim at "
                      f"{datetime.fromtimestamp(loss.at).strftime('%H:%M:%S.%f')[:-3]}: "
                      f"{loss.text}")
            for loss in losses if not any(f.covers(loss, grace) for f in faults)]


def _db_now(engine: Engine) -> datetime:
    if engine.dialect.name != "postgresql":
        return utcnow()
    with engine.connect() as conn:
        value = as_utc(conn.execute(text("SELECT clock_timestamp()")).scalar_one())
    assert value is not None
    return value
