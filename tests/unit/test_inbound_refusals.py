"""Refused inbound requests reach the event log at most once per client and minute, with the
count of those only counted (docs/security.md and docs/inbound.md) — on a virtual monotonic
clock."""
from __future__ import annotations

from typing import Any

from engine.inbound.refusals import RefusalLog


class Events:
    def __init__(self) -> None:
        self.written: list[tuple[str, str, dict[str, Any]]] = []

    def write(self, type_: str, text: str, **context: Any) -> None:
        self.written.append((type_, text, context))


def test_one_event_per_client_and_minute_with_the_count() -> None:
    now = [0.0]
    events = Events()
    refusals = RefusalLog(events, monotonic=lambda: now[0])
    assert refusals.refused("Soap", "10.0.0.5", "not XML") is True
    for second in range(1, 60):  # a flood within the minute: counted, not written
        now[0] = float(second)
        assert refusals.refused("Soap", "10.0.0.5", "not XML") is False
    assert refusals.refused("Soap", "10.0.0.6", "not XML") is True  # another client
    assert refusals.refused("Http", "10.0.0.5", "bad JSON") is True  # another service
    now[0] = 60.0
    assert refusals.refused("Soap", "10.0.0.5", "no DTDs") is True
    texts = [text for _, text, _ in events.written]
    assert len(texts) == 4
    assert texts[0].startswith("Soap refused a request from 10.0.0.5: not XML;")
    assert "(59 more refused since the last event about this client)" in texts[3]
    assert all(type_ == "Warning" for type_, _, _ in events.written)
    assert events.written[2][2]["config_name"] == "Http"
