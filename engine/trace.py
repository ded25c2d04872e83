"""The visual trace of a session, as text: every message and every attempt on a time line.

Offsets are seconds from the session's first message, laid out the way the seed article lays
out its timeline: sent, timeout, retry, give-up, with the event-log rows in between.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from engine.errors import OperatorError
from engine.store import queries
from engine.store.sql import SqlStore


@dataclass(frozen=True, order=True)
class TraceLine:
    at: datetime
    order: int
    text: str


def session_of(store: SqlStore, ident: int) -> int:
    """The session of message ``ident``, or ``ident`` itself when it is a session id."""
    row = store.get_message(ident)
    if row is not None and row.session_id is not None:
        return row.session_id
    if queries.messages(store, session_id=ident):
        return ident
    raise OperatorError(f"no message or session with id {ident}")


def trace_lines(store: SqlStore, ident: int) -> list[str]:
    """The trace of the session that message (or session) ``ident`` belongs to."""
    session = session_of(store, ident)
    messages = queries.messages(store, session_id=session)
    lines: list[TraceLine] = []
    for m in messages:
        arrow = f"{m['source'] or '-'} -> {m['target'] or '-'}"
        lines.append(TraceLine(m["time_created"], 0,
                               f"message {m['id']} ({m['kind']}) {arrow} created"))
        for a in store.attempts(m["id"]):
            where = f" to {a.server}" if a.server else ""
            lines.append(TraceLine(a.started_at, 1, f"  attempt {a.attempt} sent{where}"))
            if a.ended_at is None:
                lines.append(TraceLine(a.started_at, 2, f"  attempt {a.attempt} in flight"))
                continue
            took = (a.ended_at - a.started_at).total_seconds()
            result = "ok" if a.outcome == "ok" else f"{a.outcome}: {a.error_text}"
            lines.append(TraceLine(a.ended_at, 2,
                                   f"  attempt {a.attempt} ended after {took:.3f} s: {result}"))
        if m["kind"] == "request" and m["time_completed"] is not None:
            ending = m["status"] + (f": {m['error_text']}" if m["error_text"] else "")
            lines.append(TraceLine(m["time_completed"], 4, f"message {m['id']} {ending}"))
        elif m["kind"] == "request":
            nxt = f", next attempt at {m['next_attempt_at']:%H:%M:%S.%f}"[:-3] \
                if m["next_attempt_at"] else ""
            lines.append(TraceLine(m["time_created"], 5,
                                   f"message {m['id']} is {m['status']}{nxt}"))
    for e in queries.events(store, queries.EventFilter(session_id=session)):
        lines.append(TraceLine(e["time_logged"], 3, f"    [{e['type']}] {e['text']}"))
    if not lines:
        return []
    lines.sort()
    origin = lines[0].at
    return [f"{(line.at - origin).total_seconds():+9.3f}s  {line.text}" for line in lines]
