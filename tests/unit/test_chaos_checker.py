"""The fault campaign's checker (bench/chaos_checker.py) kept honest: a small SQLite database
written through the engine's own store holds a clean history that passes; each test then
breaks one invariant on purpose and asserts the checker reports exactly that violation."""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from bench.chaos_checker import (
    INVARIANTS,
    Arrival,
    ClaimLoss,
    Evidence,
    FaultWindow,
    Violation,
    check,
    claim_losses,
    counts,
)
from engine.clock import utcnow
from engine.store.sql import SqlStore
from engine.store.transition import AttemptEnd, Transition

ROLES = {"Idem": "idempotent", "Once": "once", "Fifo": "fifo"}
OWNER = "daemon-1"
LEASE = 5.0
GRACE = 10.0  # seconds after a fault its target may find a claim lost
T0 = 1_800_000_000.0  # an epoch second: when the synthetic faults begin


@dataclass
class History:
    """The store, and the evidence the campaign would hand the checker."""

    store: SqlStore
    accepted: dict[str, int] = field(default_factory=dict)
    arrivals: list[Arrival] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    senders: list[str] = field(default_factory=list)
    since: int = 0
    losses: list[ClaimLoss] = field(default_factory=list)
    faults: list[FaultWindow] = field(default_factory=list)

    def evidence(self) -> Evidence:
        return Evidence(roles=ROLES, accepted=dict(self.accepted), arrivals=list(self.arrivals),
                        live_pids=list(self.pids), lease_seconds=LEASE,
                        senders=list(self.senders), since_seq=self.since,
                        claim_losses=list(self.losses), faults=list(self.faults),
                        loss_grace=GRACE)

    def violations(self) -> list[Violation]:
        return check(self.store.engine, self.evidence())

    # -- writing history through the store -----------------------------------------------
    def send(self, target: str, tag: str) -> int:
        body = json.dumps({"method": "POST", "path": "/x", "body": tag})
        mid = self.store.enqueue(target=target, body_class=None, body=body)
        self.accepted[tag] = mid
        return mid

    def arrive(self, tag: str, status: int = 200, sender: str = "d1", flaw: str = "") -> None:
        self.arrivals.append(Arrival(tag, len(self.arrivals), status, sender, flaw))

    def claim(self, target: str) -> int:
        claimed = self.store.claim(target, owner=OWNER, now=utcnow(), lease_seconds=LEASE,
                                   fifo=ROLES[target] == "fifo")
        assert claimed, f"nothing to claim for {target}"
        return claimed[0].row.claim_token

    def attempt(self, mid: int, number: int, token: int, *, outcome: str = "ok",
                error: str | None = None) -> int:
        aid = self.store.begin_attempt(mid, number, started_at=utcnow(), token=token)
        if outcome != "ok":
            self.store.apply(Transition(mid, token, attempt=AttemptEnd(
                aid, utcnow(), outcome=outcome, error_text=error)))
        return aid

    def complete(self, mid: int, aid: int) -> None:
        row = self.store.get_message(mid)
        assert row is not None
        self.store.complete(row, response_class=None, response_body=None, now=utcnow(),
                            attempt=AttemptEnd(aid, utcnow(), "http://127.0.0.1/"))

    def event(self, mid: int, method: str, type_: str = "Error") -> None:
        self.store.events.write(type_, f"{method} of {mid}", message_id=mid,
                                source_method=method, config_name="x")

    def finish(self, mid: int, status: str, reason: str, token: int) -> None:
        self.store.finish(mid, status=status, error_text=reason, now=utcnow(), token=token)

    def sql(self, statement: str, **params: object) -> None:
        with self.store.engine.begin() as conn:
            conn.execute(text(statement), params)


def deliver_ok(h: History, target: str, tag: str) -> int:
    mid = h.send(target, tag)
    token = h.claim(target)
    aid = h.attempt(mid, 1, token)
    h.arrive(tag)
    h.complete(mid, aid)
    return mid


@pytest.fixture
def history(tmp_path: Path) -> Iterator[History]:
    """A clean history: every kind of ending the campaign sees, and one live daemon."""
    store = SqlStore(f"sqlite:///{tmp_path / 'chaos.db'}")
    store.upgrade()
    h = History(store)
    deliver_ok(h, "Idem", "idem-1")
    # a retry after a 503: one first failure, then success
    mid = h.send("Idem", "idem-2")
    token = h.claim("Idem")
    h.attempt(mid, 1, token, outcome="http_status", error="HTTP 503")
    h.arrive("idem-2", 503)
    h.event(mid, "on_first_failure")
    aid = h.attempt(mid, 2, token)
    h.arrive("idem-2")
    h.complete(mid, aid)
    # a give-up
    mid = h.send("Idem", "idem-3")
    token = h.claim("Idem")
    h.attempt(mid, 1, token, outcome="http_status", error="HTTP 503")
    h.arrive("idem-3", 503)
    h.event(mid, "on_first_failure")
    h.event(mid, "on_give_up")
    h.finish(mid, "Error", "FailureTimeout of 1 seconds exceeded", token)
    deliver_ok(h, "Once", "once-1")
    # a non-idempotent message whose outcome was lost: processed once, then Suspended
    mid = h.send("Once", "once-2")
    token = h.claim("Once")
    h.attempt(mid, 1, token, outcome="error", error="outcome unknown: cut short")
    h.arrive("once-2")
    h.event(mid, "on_first_failure")
    h.event(mid, "on_suspend", "Warning")
    h.finish(mid, "Suspended", "outcome unknown: the request may have been processed", token)
    # a non-idempotent message answered too late (past its response timeout): Error
    mid = h.send("Once", "once-3")
    token = h.claim("Once")
    h.attempt(mid, 1, token, outcome="timeout", error="ResponseTimeout")
    h.arrive("once-3", flaw="late")
    h.event(mid, "on_first_failure")
    h.event(mid, "on_give_up")
    h.finish(mid, "Error", "giving up: outcome unknown: the request may have been processed "
             "by the server; it was not re-sent because the item is not idempotent", token)
    for n in range(1, 4):
        deliver_ok(h, "Fifo", f"fifo-{n}")
    store.register_daemon(OWNER, host="h", pid=os.getpid(), production="P", items="[]",
                          now=utcnow())
    h.pids.append(os.getpid())
    h.since = len(h.arrivals) - 2  # the "faults" stopped before the last two requests
    deliver_ok(h, "Idem", "idem-4")  # d1 delivers after the faults
    h.senders.append("d1")
    # d2 was frozen from T0 to T0 + 4 and found a claim lost 2 s later: allowed
    h.faults.append(FaultWindow(frozenset({"d2"}), T0, T0 + 4))
    h.losses.append(ClaimLoss("d2", 41, T0 + 6))
    # the database restarted (every daemon) from T0 + 100 to + 101; d1 lost a lease in it
    h.faults.append(FaultWindow(frozenset(), T0 + 100, T0 + 101))
    h.losses.append(ClaimLoss("d1", None, T0 + 100.5))
    yield h
    store.dispose()


def only(violations: list[Violation], invariant: str) -> Violation:
    assert [v.invariant for v in violations] == [invariant], violations
    return violations[0]


def test_a_clean_history_has_no_violation(history: History) -> None:
    assert history.violations() == []
    assert counts([]) == dict.fromkeys(INVARIANTS, 0)


def test_an_accepted_message_missing_from_the_database_is_lost(history: History) -> None:
    history.accepted["idem-ghost"] = 9999
    v = only(history.violations(), "lost")
    assert v.message_id == 9999


@pytest.mark.parametrize("status", ["Queued", "Delivered", "Deferred", "Created"])
def test_a_message_not_final_is_not_ended(history: History, status: str) -> None:
    mid = history.send("Idem", "idem-late")
    history.sql("UPDATE message_header SET status = :s WHERE id = :id", s=status, id=mid)
    v = only(history.violations(), "not_ended")
    assert v.message_id == mid and status in v.detail


def test_a_suspended_message_without_a_reason_is_not_ended(history: History) -> None:
    mid = history.accepted["once-2"]
    history.sql("UPDATE message_header SET error_text = '' WHERE id = :id", id=mid)
    found = {v.invariant: v for v in history.violations()}
    # answered 2xx, it may end on an outcome-unknown reason only: no reason breaks that too
    assert sorted(found) == ["not_ended", "reconciliation"]
    assert found["not_ended"].message_id == mid
    assert "without a reason" in found["not_ended"].detail


def test_a_non_idempotent_message_processed_twice_is_sent_twice(history: History) -> None:
    history.arrive("once-1")
    v = only(history.violations(), "sent_twice")
    assert v.message_id == history.accepted["once-1"]


def test_an_idempotent_message_may_arrive_twice(history: History) -> None:
    history.arrive("idem-1")
    history.arrive("fifo-3")
    assert history.violations() == []


def test_a_refused_request_is_not_processed(history: History) -> None:
    # the server answered 503 to a second request: not processed, so not sent twice
    history.arrive("once-1", 503)
    assert history.violations() == []


def test_a_completion_the_server_never_answered(history: History) -> None:
    history.arrivals = [a for a in history.arrivals if a.tag != "idem-1"]
    v = only(history.violations(), "completed_unanswered")
    assert v.message_id == history.accepted["idem-1"]


def test_a_fifo_message_overtaking_an_earlier_one(history: History) -> None:
    first = {a.tag: a for a in history.arrivals}
    two, three = first["fifo-2"], first["fifo-3"]
    history.arrivals = [a for a in history.arrivals if a.tag not in ("fifo-2", "fifo-3")]
    history.arrivals += [Arrival("fifo-3", two.seq, 200), Arrival("fifo-2", three.seq, 200)]
    history.arrivals.sort(key=lambda a: a.seq)
    v = only(history.violations(), "fifo_order")
    assert v.message_id == history.accepted["fifo-2"]
    assert f"after request {two.seq} of message {history.accepted['fifo-3']}" in v.detail


def test_a_fifo_message_resent_after_a_later_one_breaks_fifo(history: History) -> None:
    # [t1, t2, t3, t1 again]: the re-send of fifo-1 reached the server after fifo-3
    history.arrive("fifo-1")
    v = only(history.violations(), "fifo_order")
    assert v.message_id == history.accepted["fifo-1"]
    assert f"message {history.accepted['fifo-3']}" in v.detail


def test_a_fifo_message_resent_before_the_next_one_keeps_fifo(history: History) -> None:
    # [t1, t1 again, t2, t3]: a re-send before anything later is in order
    one = next(a for a in history.arrivals if a.tag == "fifo-1")
    history.arrivals.insert(history.arrivals.index(one) + 1, Arrival("fifo-1", one.seq, 200))
    assert history.violations() == []


def test_fifo_order_is_checked_only_on_fifo_items(history: History) -> None:
    history.arrivals.insert(0, Arrival("idem-4", -1, 200))  # idem-4 arrived before idem-1
    assert history.violations() == []


@pytest.mark.parametrize(("status", "reason"), [
    ("Error", "FailureTimeout of 5 seconds exceeded"),  # given up on a stepped clock
    ("Suspended", "delivery interrupted 5 times"),  # not an outcome-unknown reason
    ("Suspended", "outcome unknown: cut short"),  # an idempotent item sends it again
])
def test_an_idempotent_message_answered_2xx_must_end_completed(
        history: History, status: str, reason: str) -> None:
    mid = history.send("Idem", "idem-answered")
    token = history.claim("Idem")
    history.attempt(mid, 1, token, outcome="error", error="outcome unknown: cut short")
    history.arrive("idem-answered")
    history.event(mid, "on_first_failure")
    if status == "Error":
        history.event(mid, "on_give_up")
    history.finish(mid, status, reason, token)
    v = only(history.violations(), "reconciliation")
    assert v.message_id == mid and f"ended {status}: {reason}" in v.detail


def test_a_non_idempotent_message_answered_2xx_ends_only_on_outcome_unknown(
        history: History) -> None:
    # once-2 was answered 2xx and Suspended as outcome unknown (clean); give it another
    # reason and it breaks reconciliation
    mid = history.accepted["once-2"]
    history.sql("UPDATE message_header SET error_text = 'delivery interrupted 5 times' "
                "WHERE id = :id", id=mid)
    v = only(history.violations(), "reconciliation")
    assert v.message_id == mid and "Once" in v.detail


def test_an_answer_in_time_makes_a_late_one_count(history: History) -> None:
    # once-3's only answer came late (Error allowed); an answer in time makes its Error a
    # violation unless it says outcome unknown — it does, so only the text matters
    mid = history.accepted["once-3"]
    history.sql("UPDATE message_header SET error_text = 'HTTP 503' WHERE id = :id", id=mid)
    assert history.violations() == []  # late: the daemon never had a usable answer
    history.arrive("once-3", 503)
    history.arrive("once-3", 200)
    found = history.violations()
    assert sorted(v.invariant for v in found) == ["reconciliation", "sent_twice"]


@pytest.mark.parametrize("flaw", ["late", "xml"])
def test_a_flawed_answer_owes_no_completion(history: History, flaw: str) -> None:
    mid = history.send("Idem", "idem-flawed")
    token = history.claim("Idem")
    history.attempt(mid, 1, token, outcome="http_status", error="answered: beyond a limit")
    history.arrive("idem-flawed", 200, flaw=flaw)
    history.event(mid, "on_first_failure")
    history.event(mid, "on_give_up")
    history.finish(mid, "Error", "FailureTimeout of 5 seconds exceeded", token)
    assert history.violations() == []


def test_a_claim_lost_by_a_daemon_no_fault_touched_is_stolen(history: History) -> None:
    history.losses.append(ClaimLoss("d1", 77, T0 + 2, "abandoning message 77"))
    v = only(history.violations(), "claim_stolen")
    assert v.message_id == 77 and "daemon d1" in v.detail


@pytest.mark.parametrize(("at", "stolen"), [
    (T0 - 0.5, False),  # logged just before the fault began (clock reading)
    (T0 + 4 + GRACE - 0.1, False),  # noticed at the daemon's next write, in the grace
    (T0 + 4 + GRACE + 0.1, True),  # after the grace: not the fault's doing
    (T0 - 5, True),  # well before the fault
])
def test_a_claim_lost_outside_its_fault_window_is_stolen(
        history: History, at: float, stolen: bool) -> None:
    history.losses.append(ClaimLoss("d2", 78, at))
    found = history.violations()
    assert [v.invariant for v in found] == (["claim_stolen"] if stolen else [])


def test_a_stepped_clock_s_own_log_lines_are_read_at_its_offset(history: History) -> None:
    history.faults.append(FaultWindow(frozenset({"d3"}), T0 + 200, T0 + 203, offset=600))
    history.losses.append(ClaimLoss("d3", 79, T0 + 801))  # its clock 600 s ahead
    history.losses.append(ClaimLoss("d3", 80, T0 + 201))  # logged once stepped back
    assert history.violations() == []
    history.losses.append(ClaimLoss("d1", 81, T0 + 201))  # d1's clock was not stepped
    v = only(history.violations(), "claim_stolen")
    assert v.message_id == 81


def test_a_loss_counted_in_a_minute_s_summary_may_be_a_minute_old(history: History) -> None:
    # a summary line logged 40 s after d2's fault ended: its losses may be from the fault
    history.losses.append(ClaimLoss("d2", 90, T0 + 44, span=65))
    assert history.violations() == []
    history.losses.append(ClaimLoss("d2", 91, T0 + 300, span=65))  # after every window
    v = only(history.violations(), "claim_stolen")
    assert v.message_id == 91


def test_claim_losses_are_read_from_the_daemon_s_log() -> None:
    log = "\n".join([
        "2026-12-03 10:00:00,250 WARNING engine.delivery.item: item Idem: message 12: its "
        "claim (token 3) expired and another daemon has taken it over; abandoning message 12",
        "2026-12-03 10:00:01,000 INFO engine.delivery.item: item Idem: message 13 done",
        "2026-12-03 10:00:02,500 WARNING engine.delivery.dispatch: item Once: message(s) "
        "[14, 15] were taken over by another daemon before their success was recorded; "
        "that daemon's delivery counts",
        "2026-12-03 10:00:03,000 WARNING engine.runtime.cluster: daemon d-1 lost lease "
        "item:Fifo to another daemon",
        "2026-12-03 10:01:03,000 WARNING engine.delivery.item: 2 more like this held back "
        "since 2026-12-03 10:00:20,000 (the last at 2026-12-03 10:00:40,000): item Idem: "
        "message 16: its claim (token 1) is no longer this worker's; another daemon has "
        "taken it over; abandoning message 16",
    ])
    found = claim_losses("pg-1", log)
    assert [(x.daemon, x.message_id) for x in found] == [
        ("pg-1", 12), ("pg-1", 14), ("pg-1", 15), ("pg-1", None), ("pg-1", 16)]
    assert found[1].at - found[0].at == pytest.approx(2.25)
    assert "lost lease item:Fifo" in found[3].text
    # the last one counts held-back ones, from the time it says the first was held back
    assert [x.span for x in found] == [0, 0, 0, 0, pytest.approx(44)]


def test_a_failed_attempt_without_its_first_failure_event(history: History) -> None:
    mid = history.accepted["idem-2"]
    history.sql("DELETE FROM event_log WHERE message_id = :id AND "
                "source_method = 'on_first_failure'", id=mid)
    v = only(history.violations(), "first_failure")
    assert v.message_id == mid and "0 first-failure" in v.detail


def test_two_first_failure_events(history: History) -> None:
    mid = history.accepted["idem-2"]
    history.event(mid, "on_first_failure")
    v = only(history.violations(), "first_failure")
    assert v.message_id == mid and "2 first-failure" in v.detail


def test_a_first_failure_event_without_a_failed_attempt(history: History) -> None:
    mid = history.accepted["idem-1"]
    history.event(mid, "on_first_failure")
    v = only(history.violations(), "first_failure")
    assert v.message_id == mid


def test_an_attempt_ended_unsent_owes_no_first_failure(history: History) -> None:
    mid = history.send("Idem", "idem-poison")
    token = history.claim("Idem")
    history.attempt(mid, 1, token, outcome="error",
                    error="not sent: the message was suspended first")
    history.finish(mid, "Suspended", "delivery interrupted 5 times", token)
    assert history.violations() == []


def test_two_give_up_events(history: History) -> None:
    mid = history.accepted["idem-3"]
    history.event(mid, "on_give_up")
    v = only(history.violations(), "give_up")
    assert v.message_id == mid and "2 give-up" in v.detail


def test_an_error_without_its_give_up_event(history: History) -> None:
    mid = history.accepted["idem-3"]
    history.sql("DELETE FROM event_log WHERE message_id = :id AND "
                "source_method = 'on_give_up'", id=mid)
    v = only(history.violations(), "give_up")
    assert v.message_id == mid and "0 give-up" in v.detail


def test_a_give_up_event_on_a_completed_message(history: History) -> None:
    mid = history.accepted["idem-1"]
    history.event(mid, "on_give_up")
    v = only(history.violations(), "give_up")
    assert v.message_id == mid and "Completed" in v.detail


def test_other_events_do_not_count(history: History) -> None:
    mid = history.accepted["idem-1"]
    history.event(mid, "on_first_failure", "Warning")
    history.event(mid, "on_complete", "Error")
    assert history.violations() == []


def test_a_live_daemon_with_a_stale_heartbeat_is_stuck(history: History) -> None:
    old = utcnow() - timedelta(seconds=LEASE + 1)
    history.store.heartbeat(OWNER, now=old, lease_seconds=LEASE)
    v = only(history.violations(), "stuck")
    assert str(os.getpid()) in v.detail and "last heartbeat" in v.detail


def test_a_live_daemon_never_registered_is_stuck(history: History) -> None:
    history.pids.append(999_999_999)
    v = only(history.violations(), "stuck")
    assert "999999999" in v.detail and "no heartbeat" in v.detail


def test_a_live_daemon_that_sends_nothing_after_the_faults_is_stuck(
        history: History) -> None:
    history.senders.append("d2")
    # an idempotent re-send from d2, but before the faults ended
    history.arrivals.insert(0, Arrival("idem-1", -1, 200, "d2"))
    v = only(history.violations(), "stuck")
    assert "d2" in v.detail and "sent nothing" in v.detail


def test_a_dead_daemon_left_behind_is_not_stuck(history: History) -> None:
    # a daemon killed -9 keeps its row; only the daemons that should be alive are judged
    history.store.register_daemon("daemon-dead", host="h", pid=1, production="P",
                                  items="[]", now=utcnow() - timedelta(hours=1))
    assert history.violations() == []


def test_items_outside_the_campaign_are_ignored(history: History) -> None:
    history.store.enqueue(target="Other", body_class=None, body="{}")
    assert history.violations() == []


def test_counts_name_every_invariant(history: History) -> None:
    history.arrive("once-1")
    history.accepted["idem-ghost"] = 9999
    history.losses.append(ClaimLoss("d9", 5, T0))
    found = counts(history.violations())
    assert found == {**dict.fromkeys(INVARIANTS, 0), "sent_twice": 1, "lost": 1,
                     "claim_stolen": 1}


def test_the_heartbeat_watch_counts_a_daemon_older_than_the_lease(history: History) -> None:
    from bench.chaos_lag import HeartbeatWatch
    watch = HeartbeatWatch(str(history.store.engine.url), lambda: {os.getpid(): "d1"}, LEASE)
    watch._look(history.store)  # the fixture's heartbeat is fresh
    assert watch.late == {}
    old = utcnow() - timedelta(seconds=LEASE + 3)
    history.store.heartbeat(OWNER, now=old, lease_seconds=LEASE)
    watch._look(history.store)
    watch._look(history.store)  # one spell, however many looks see it
    assert list(watch.late) == ["d1"] and len(watch.late["d1"]) == 1
    start, end = watch.late["d1"][0]
    assert start == pytest.approx(old.timestamp()) and end - start >= LEASE + 3
    assert watch.counts()["d1"]["spells"] == 1
