"""An attempt its daemon's death cut short, as the store leaves it (an open attempt of a
message whose expired claim was taken back; then ended as outcome unknown by the next
delivery), reads as cut short in both traces — ``encore trace`` and the Visual Trace — on
every store, with no server invented and no duration."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import timedelta

from engine.cli.trace import trace_lines
from engine.errors import CRASH_TEXT
from engine.portal.trace_attempts import CUT_SHORT
from engine.portal.trace_view import session_trace
from engine.store.sql import SqlStore
from engine.store.transition import AttemptEnd, Transition

SVG = "{http://www.w3.org/2000/svg}"
LEASE = 30.0  # seconds of the dead daemon's claim


def a_delivery_cut_short(store: SqlStore) -> tuple[int, int]:
    """A message to Router claimed by a daemon that began attempt 1 and died; its lease
    expired and the claim was taken back. Returns the message and attempt ids."""
    t0 = store.db_now()
    mid = store.enqueue(target="Router", body_class=None, body="{}", source="cli", now=t0)
    claimed = store.claim("Router", owner="dead-daemon", now=t0, lease_seconds=LEASE)
    attempt = store.begin_attempt(mid, 1, started_at=t0, token=claimed[0].row.claim_token)
    assert store.release_expired_claims("Router", now=t0 + timedelta(seconds=LEASE + 1)) == 1
    return mid, attempt


def cut_groups(store: SqlStore, session: int) -> list[ET.Element]:
    root = ET.fromstring(session_trace(store, session)["svg"])
    assert [g.get("data-participant") for g in root.iter(f"{SVG}g")
            if g.get("data-participant")] == ["cli", "Router"]  # no server invented
    return [g for g in root.iter(f"{SVG}g") if g.get("data-cut-short") == "true"]


def test_an_attempt_left_open_by_a_dead_daemon_reads_as_cut_short(store: SqlStore) -> None:
    mid, _ = a_delivery_cut_short(store)
    lines = trace_lines(store, mid)
    assert any(line.endswith(f"attempt 1 {CUT_SHORT}") for line in lines), lines
    assert not any("in flight" in line or " sent" in line for line in lines)
    assert any(line.endswith("attempt 1 began on Router") for line in lines)
    assert len(cut_groups(store, mid)) == 1


def test_an_attempt_recovered_as_outcome_unknown_reads_as_cut_short_with_no_duration(
        store: SqlStore) -> None:
    mid, attempt = a_delivery_cut_short(store)
    taken_back = store.attempts(mid)[0].started_at + timedelta(seconds=3.71)
    store.apply(Transition(mid, None, attempt=AttemptEnd(attempt, taken_back, outcome="error",
                                                         error_text=CRASH_TEXT)))
    lines = trace_lines(store, mid)
    cut = [line for line in lines if CUT_SHORT in line]
    assert len(cut) == 1 and cut[0].endswith("taken back 3.710 s after it began")
    assert not any("ended after" in line for line in lines)
    (group,) = cut_groups(store, mid)
    assert "3.710" not in "".join(t.text or "" for t in group.iter(f"{SVG}text"))
