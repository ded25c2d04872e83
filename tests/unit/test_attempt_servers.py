"""``message_attempt.server`` names every server an attempt went to, in order
(:func:`engine.attempt.servers_text`), and reads back into them (:func:`servers_of`)."""
from __future__ import annotations

from datetime import UTC, datetime

from engine.attempt import servers_of, servers_text
from engine.portal.trace_attempts import server_label
from engine.store.rows import AttemptRow


def test_the_servers_of_a_failover_are_joined_in_order_and_split_back() -> None:
    servers = ["http://a.example:8080/pay", "http://b.example/pay?x=1,2"]  # a comma, no space
    text = servers_text(servers)
    assert text == "http://a.example:8080/pay → http://b.example/pay?x=1,2"
    assert servers_of(text) == servers


def test_no_server_is_none_and_one_server_is_itself() -> None:
    assert servers_text([]) is None and servers_of(None) == [] and servers_of("") == []
    assert servers_text(["stub"]) == "stub" and servers_of("stub") == ["stub"]


def test_the_trace_draws_a_failover_attempt_to_the_server_where_it_ended() -> None:
    attempt = AttemptRow(id=1, message_id=1, attempt=1, server="http://a → http://b",
                         started_at=datetime(2030, 1, 1, tzinfo=UTC), ended_at=None,
                         outcome=None, status_code=None, error_text=None)
    assert server_label(attempt) == "server http://b"
