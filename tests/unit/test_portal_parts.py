"""Pieces of the portal without a server: the Visual Trace's SVG, query filters, the login
limiter, and the [portal] table of the production file."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engine.config.production import parse_production
from engine.errors import ConfigurationError
from engine.portal.filters import FilterError, event_filter, message_filter
from engine.portal.trace_svg import FAIL, OK, render_trace
from engine.serving.auth import LoginLimiter, LoginThrottled
from engine.store.rows import AttemptRow

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
SVG = "{http://www.w3.org/2000/svg}"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def seed_session(error_text: str = "FailureTimeout of 30 seconds exceeded") -> tuple[Any, ...]:
    """The seed timeline: four attempts at 0, 10, 20, 30 s, each timing out after 7 s."""
    request = {"id": 7, "session_id": 7, "source": "cli", "target": "Payments",
               "kind": "request", "status": "Error", "error_text": error_text,
               "time_created": at(0), "time_completed": at(37)}
    attempts = {7: [AttemptRow(k, 7, k, "http://pay:8765/", at(10 * (k - 1)),
                               at(10 * (k - 1) + 7), "timeout", None, "no answer")
                    for k in range(1, 5)]}
    events = [{"id": 1, "type": "Error", "text": "attempt 1 failed", "time_logged": at(7),
               "config_name": "Payments"},
              {"id": 2, "type": "Error", "text": error_text, "time_logged": at(37),
               "config_name": "Payments"}]
    return [request], attempts, events


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def test_the_trace_has_one_group_per_attempt_with_its_number_and_outcome() -> None:
    root = parse(render_trace(*seed_session()))
    groups = root.findall(f".//{SVG}g[@data-attempt]")
    assert [(g.get("data-attempt"), g.get("data-outcome")) for g in groups] == \
        [(str(k), "timeout") for k in range(1, 5)]
    labels = ["".join(g.itertext()) for g in groups]
    assert "#1 timeout · 7.000 s" in labels[0] and "late reply discarded" in labels[0]
    assert all(line.get("stroke") == FAIL for g in groups for line in g.findall(f"{SVG}line"))


def test_time_flows_down_and_retry_waits_show_as_gaps() -> None:
    root = parse(render_trace(*seed_session()))
    starts = [float(g.find(f"{SVG}rect").get("y"))
              for g in root.findall(f".//{SVG}g[@data-attempt]")]
    assert starts == sorted(starts) and len(set(starts)) == 4
    gaps = [start - prev for prev, start in zip(starts, starts[1:])]
    assert max(gaps) - min(gaps) < 1  # equal spacing: 10 s apart on one scale
    waits = root.findall(f".//{SVG}g[@class='retry-wait']")
    assert ["".join(w.itertext()) for w in waits] == ["wait 3.000 s"] * 3


def test_the_message_arrow_links_to_the_message_and_participants_are_columns() -> None:
    messages, attempts, events = seed_session()
    response = {"id": 8, "session_id": 7, "source": "Payments", "target": "cli",
                "kind": "response", "status": "Completed", "error_text": None,
                "time_created": at(38), "time_completed": at(38)}
    root = parse(render_trace([*messages, response], attempts, events))
    links = root.findall(f".//{SVG}a")
    assert [a.get("href") for a in links] == ["/messages/7", "/messages/8"]
    assert [a.find(f"{SVG}g").get("data-message") for a in links] == ["7", "8"]
    names = [g.get("data-participant") for g in root.findall(f".//{SVG}g[@data-participant]")]
    assert names == ["cli", "Payments", "server http://pay:8765/"]
    assert len(root.findall(f".//{SVG}text[@data-event]")) == 2


def test_a_successful_attempt_is_green() -> None:
    messages, _, _ = seed_session()
    ok = {7: [AttemptRow(1, 7, 1, "http://pay:8765/", at(0), at(0.2), "ok", 200, None)]}
    group = parse(render_trace(messages, ok, [])).find(f".//{SVG}g[@data-attempt]")
    assert group.get("data-outcome") == "ok"
    assert {line.get("stroke") for line in group.findall(f"{SVG}line")} == {OK}
    assert group.find(f"{SVG}rect").get("fill") == OK


def test_markup_in_an_error_or_an_event_stays_text() -> None:
    svg = render_trace(*seed_session("<script>alert(1)</script>"))
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    parse(svg)  # well-formed


@pytest.mark.parametrize("params, error", [
    ({"status": "Lost"}, "status"),          # not a status
    ({"session": "abc"}, "session"),         # not a number
    ({"since": "last week"}, "since"),       # not a time
    ({"until": "2026-13-01"}, "until"),      # not a date
])
def test_a_bad_filter_is_refused_naming_the_parameter(params: dict[str, str],
                                                      error: str) -> None:
    with pytest.raises(FilterError, match=error):
        message_filter(params)


def test_filters_read_durations_iso_times_and_switches() -> None:
    flt = message_filter({"since": "2h", "until": "2026-11-30T08:00", "errors": "1",
                          "target": " ", "q": "x"})
    assert flt.target is None and flt.errors and flt.q == "x"
    assert flt.until == T0
    assert flt.since is not None and flt.since.tzinfo is not None
    assert event_filter({"type": "Error", "message": "5"}).message_id == 5
    with pytest.raises(FilterError, match="type"):
        event_filter({"type": "Debug"})


def test_the_login_limiter_refuses_after_the_failures_and_forgets_after_the_window() -> None:
    now = [0.0]
    limiter = LoginLimiter(failures=3, window=60, monotonic=lambda: now[0])
    for _ in range(3):
        limiter.check(["user:a", "addr:x"])
        limiter.failed(["user:a", "addr:x"])
    with pytest.raises(LoginThrottled):
        limiter.check(["user:b", "addr:x"])  # the address is throttled for every name
    now[0] = 61.0
    limiter.check(["user:a", "addr:x"])


BASE = """
[production]
name = "P"
"""


def test_the_portal_table_is_optional_and_has_loopback_defaults() -> None:
    assert parse_production(BASE, env={}).portal is None
    portal = parse_production(BASE + "[portal]\n", env={}).portal
    assert portal is not None and (portal.host, portal.port, portal.tls) == ("127.0.0.1", 8080,
                                                                             False)


@pytest.mark.parametrize("table, says", [
    ('prot = 1', "Did you mean 'port'"),            # a misspelt key
    ('port = "80"', "expected integer"),            # a wrong type
    ('port = 70000', "out of range"),               # not a port
    ('tls_cert = "c.pem"', "tls_key"),              # half of TLS
])
def test_a_bad_portal_table_is_refused_naming_the_key(table: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says) as info:
        parse_production(BASE + "[portal]\n" + table + "\n", env={})
    assert "[portal]" in str(info.value)
