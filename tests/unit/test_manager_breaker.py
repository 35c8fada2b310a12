"""The circuit breaker state machine, driven by a manual clock."""

from __future__ import annotations

from memroute.routing.breaker import CircuitBreaker
from memroute.testing.faults import ManualClock


def test_opens_after_consecutive_failures_only():
    breaker = CircuitBreaker(failures=3, reset_s=10, clock=ManualClock())
    breaker.record_failure("a")
    breaker.record_failure("b")
    breaker.record_success()  # resets the streak
    breaker.record_failure("c")
    breaker.record_failure("d")
    assert breaker.state == "closed" and breaker.allow()
    breaker.record_failure("e")
    assert breaker.state == "open" and not breaker.allow() and breaker.last_error == "e"


def test_half_open_lets_exactly_one_probe_through():
    clock = ManualClock()
    breaker = CircuitBreaker(failures=1, reset_s=10, clock=clock)
    breaker.record_failure("down")
    clock.advance(9.9)
    assert not breaker.allow()
    clock.advance(0.1)
    assert breaker.state == "half-open"
    assert breaker.allow()
    assert not breaker.allow()  # the probe is in flight
    breaker.record_failure("still down")
    assert breaker.state == "open" and not breaker.allow()
    clock.advance(10)
    assert breaker.allow()
    breaker.record_success()
    assert breaker.state == "closed" and breaker.allow() and breaker.allow()
