"""Properties of whole deliveries (worker + policy + store) over random settings, on the
virtual clock through ``engine.tools.simulate``."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.testing import ServerBehaviour
from engine.tools.simulate import simulate

seconds = st.floats(min_value=0.5, max_value=20, allow_nan=False).map(lambda x: round(x, 2))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(response_timeout=seconds, retry_interval=st.floats(0.5, 15).map(lambda x: round(x, 2)),
       failure_timeout=st.sampled_from([0, 1, 5, 12.5, 30]), delay=seconds,
       strict=st.booleans(), servers=st.integers(1, 3))
def test_a_delivery_keeps_the_retry_rules(response_timeout: float, retry_interval: float,
                                          failure_timeout: float, delay: float, strict: bool,
                                          servers: int) -> None:
    result = simulate({"response_timeout": response_timeout, "retry_interval": retry_interval,
                       "failure_timeout": failure_timeout, "strict_failure_timeout": strict,
                       "bad_server_cooldown": 3600.0}, ServerBehaviour(delay=delay),
                      servers=servers)
    starts = [e.t for e in result.timeline if e.event == "attempt_start"]
    ends = [e.t for e in result.timeline if e.event in ("attempt_timeout", "attempt_error")]
    endings = [e for e in result.timeline if e.event in ("give_up", "success")]
    assert len(endings) == 1  # exactly one ending
    assert result.attempts == len(starts) == result.server_requests
    if delay < response_timeout and not strict:  # an answer at the deadline is too late
        assert result.status == "Completed" and result.error_events == 0
        return
    if result.status == "Completed":  # strict clipping can only make it fail
        return
    assert len(ends) == len(starts)
    # exactly one first-failure event and one give-up event
    assert result.error_events == 2
    for k in range(1, len(starts)):
        assert starts[k] >= ends[k - 1] - 1e-6  # attempts never overlap
        assert abs(starts[k] - max(ends[k - 1], starts[k - 1] + retry_interval)) < 1e-6
        # no attempt starts once the give-up condition held at the previous failure
        assert ends[k - 1] - starts[0] < failure_timeout
    if strict:  # nothing runs past the budget
        assert all(end - starts[0] <= failure_timeout + 1e-6 for end in ends)
    else:
        assert ends[-1] - starts[0] >= failure_timeout
