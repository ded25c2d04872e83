"""ServerPool's choices on a virtual clock: healthy first, bad skipped for the cooldown, and
the soonest-recovering bad server when every one is bad."""
from __future__ import annotations

from adapters.failover import ServerPool, join_path, rebase
from engine.clock import VirtualClock

A, B, C = "http://a", "http://b", "http://c"


def pool(cooldown: float = 60.0) -> tuple[ServerPool, VirtualClock]:
    clock = VirtualClock()
    return ServerPool([A, B, C], cooldown=cooldown, clock=clock), clock


def test_the_first_healthy_server_is_chosen():
    servers, _ = pool()
    assert servers.pick() == A
    servers.mark_bad(A)
    assert servers.pick() == B


def test_a_bad_server_is_healthy_again_after_its_cooldown():
    servers, clock = pool(cooldown=60)
    servers.mark_bad(A)
    clock.advance(59.9)
    assert servers.pick() == B
    clock.advance(0.2)
    assert servers.pick() == A


def test_when_all_are_bad_the_one_whose_cooldown_ends_soonest_is_used():
    servers, clock = pool()
    for server in (A, B, C):  # the seed's attempts at 0, 10, 20
        assert servers.pick() == server
        servers.mark_bad(server)
        clock.advance(10)
    assert servers.pick() == A  # attempt 4 at 30 goes back to A, as in the seed


def test_servers_tried_in_this_attempt_are_excluded():
    servers, _ = pool()
    assert servers.pick(exclude=[A]) == B
    assert servers.pick(exclude=[A, B, C]) is None


def test_an_answer_makes_a_bad_server_healthy_at_once():
    servers, _ = pool()
    servers.mark_bad(A)
    servers.mark_good(A)
    assert servers.pick() == A and not servers.is_bad(A)


def test_a_zero_cooldown_never_marks_a_server_bad():
    servers, _ = pool(cooldown=0)
    servers.mark_bad(A)
    assert servers.pick() == A


def test_a_bare_server_origin_keeps_the_address_path_and_a_full_url_is_kept():
    moved = rebase("http://wsdl-host:80/svc/pay?x=1", "https://b:8443")
    assert moved == "https://b:8443/svc/pay?x=1"
    assert rebase("http://wsdl-host/svc", "http://b/other") == "http://b/other"
    assert join_path("http://a/api", "/pay") == "http://a/api/pay"
    assert join_path("http://a/api/pay", "/") == "http://a/api/pay"
