"""The trace of a session as text: every message, attempt and event on one time line, each hop
indented under the message that sent it. Attempts are told as in the Visual Trace
(:mod:`engine.portal.trace_attempts`).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engine.errors import OperatorError
from engine.portal.trace_attempts import CUT_SHORT, cut_short
from engine.store import queries
from engine.store.inbound import InboundCall, calls_of
from engine.store.sql import SqlStore

INDENT = "  "  # per hop


@dataclass(frozen=True, order=True)
class TraceLine:
    """One line; lines at the same time keep the order of their messages (an earlier
    message caused a later one), then ``order`` (created, sent, ended, event, ending)."""

    at: datetime
    message: int
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


def hop_depths(messages: Sequence[Mapping[str, Any]]) -> dict[int, int]:
    """How many hops each message is from the session's first: a request sent by an item
    is one deeper than the latest earlier request to that item; a response is as deep as
    its request."""
    depths: dict[int, int] = {}
    latest_to: dict[str, int] = {}  # item → the latest request it received
    for m in sorted(messages, key=lambda m: m["id"]):
        if m["kind"] == "response":
            depths[m["id"]] = depths.get(m["corresponding_id"], 0)
            continue
        parent = latest_to.get(m["source"] or "")
        depths[m["id"]] = 0 if parent is None else depths[parent] + 1
        latest_to[m["target"]] = m["id"]
    return depths


def trace_lines(store: SqlStore, ident: int) -> list[str]:
    """The trace of the session that message (or session) ``ident`` belongs to."""
    session = session_of(store, ident)
    messages = queries.messages(store, session_id=session)
    depths = hop_depths(messages)
    several = sum(m["kind"] == "request" for m in messages) > 1
    lines: list[TraceLine] = []
    for m in messages:
        lines.extend(_message_lines(store, m, INDENT * depths[m["id"]], several))
    for mid, call in calls_of(store, [m["id"] for m in messages]).items():
        lines.extend(_call_lines(mid, call, INDENT * depths[mid]))
    for e in queries.events(store, queries.EventFilter(session_id=session)):
        mid = e["message_id"] or 0
        of = f" (message {mid})" if several and mid else ""
        lines.append(TraceLine(e["time_logged"], mid, 3, f"{INDENT * depths.get(mid, 0)}"
                                                        f"    [{e['type']}]{of} {e['text']}"))
    if not lines:
        return []
    lines.sort()
    origin = lines[0].at
    head = [f"session {session}: {_hops(messages)}"] if several else []
    return head + [f"{(line.at - origin).total_seconds():+9.3f}s  {line.text}"
                   for line in lines]


def _message_lines(store: SqlStore, m: Mapping[str, Any], pad: str,
                   several: bool) -> list[TraceLine]:
    mid = m["id"]
    arrow = f"{m['source'] or '-'} -> {m['target'] or '-'}"
    lines = [TraceLine(m["time_created"], mid, 0,
                       f"{pad}message {mid} ({m['kind']}) {arrow} created")]
    name = f"attempt {{}} of message {mid}" if several else "attempt {}"
    for a in store.attempts(mid):
        attempt = name.format(a.attempt)
        began = f"sent to {a.server}" if a.server else f"began on {m['target']}"
        lines.append(TraceLine(a.started_at, mid, 1, f"{pad}  {attempt} {began}"))
        if cut_short(a, m["status"]):
            later = "" if a.ended_at is None else \
                f"; taken back {(a.ended_at - a.started_at).total_seconds():.3f} s after it began"
            lines.append(TraceLine(a.ended_at or a.started_at, mid, 2,
                                   f"{pad}  {attempt} {CUT_SHORT}{later}"))
            continue
        if a.ended_at is None:
            lines.append(TraceLine(a.started_at, mid, 2, f"{pad}  {attempt} in flight"))
            continue
        took = (a.ended_at - a.started_at).total_seconds()
        result = "ok" if a.outcome == "ok" else f"{a.outcome}: {a.error_text}"
        lines.append(TraceLine(a.ended_at, mid, 2,
                               f"{pad}  {attempt} ended after {took:.3f} s: {result}"))
    if m["kind"] == "request" and m["time_completed"] is not None:
        ending = m["status"] + (f": {m['error_text']}" if m["error_text"] else "")
        lines.append(TraceLine(m["time_completed"], mid, 4, f"{pad}message {mid} {ending}"))
    elif m["kind"] == "request":
        nxt = f", next attempt at {m['next_attempt_at']:%H:%M:%S.%f}"[:-3] \
            if m["next_attempt_at"] else ""
        lines.append(TraceLine(m["time_created"], mid, 5,
                               f"{pad}message {mid} is {m['status']}{nxt}"))
    return lines


def _call_lines(mid: int, call: InboundCall, pad: str) -> list[TraceLine]:
    """The caller of an inbound service: what it asked (before the message it made) and
    what it was answered."""
    who = f"caller {call.caller}" + (f" ({call.principal})" if call.principal else "")
    lines = [TraceLine(call.received_at, mid, -1,
                       f"{pad}{who} -> {call.service}: {call.request}")]
    if call.answered_at is not None:
        lines.append(TraceLine(call.answered_at, mid, 6, f"{pad}{call.service} -> {who} "
                                                         f"answered: {call.answer or '-'}"))
    return lines


def _hops(messages: Sequence[Mapping[str, Any]]) -> str:
    """The requests of the session in order, e.g. ``cli -> Router, Router -> PaymentsPT``."""
    return ", ".join(f"{m['source'] or '-'} -> {m['target']}"
                     for m in messages if m["kind"] == "request")
