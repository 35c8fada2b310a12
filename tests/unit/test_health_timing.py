"""HealthResult.timed: the one place a health probe is timed (backends, vector stores, the manager)."""

from __future__ import annotations

import pytest

from memroute.config.settings import ManagerSettings
from memroute.errors import BackendError
from memroute.models import HealthResult
from memroute.routing.calls import BackendCall, BackendCaller, CircuitOpenError
from memroute.testing.memory import InMemoryBackend


def test_a_probe_that_returns_is_ok_with_its_mapping_as_details():
    result = HealthResult.timed(lambda: {"memories": 3})
    assert result.ok and result.error is None
    assert result.details == {"memories": 3}
    assert result.latency_ms >= 0


def test_a_probe_that_returns_something_else_is_ok_without_details():
    result = HealthResult.timed(lambda: 42)
    assert result.ok and result.details == {}


def test_a_probe_that_raises_reports_the_message_and_never_raises():
    def probe() -> None:
        raise RuntimeError("disk on fire")

    result = HealthResult.timed(probe)
    assert not result.ok
    assert result.error == "disk on fire"


def test_a_nested_result_is_the_answer():
    inner = HealthResult(ok=False, latency_ms=1.5, error="inner")
    assert HealthResult.timed(lambda: inner) is inner


def test_backend_and_vector_store_defaults_use_it():
    backend = InMemoryBackend("mem")
    backend.initialize()
    assert backend.health().ok


def test_a_typed_call_runs_on_the_backend_and_errors_are_wrapped():
    backend = InMemoryBackend("mem")
    caller = BackendCaller([backend], ManagerSettings(), clock=lambda: 0.0)
    with pytest.raises(CircuitOpenError, match="not initialized"):
        caller.call(backend, BackendCall("get", lambda b: b.get("x")))
    assert caller.initialize(backend) is None
    assert caller.call(backend, BackendCall("name", lambda b: b.name)) == "mem"

    def boom(_b: object) -> None:
        raise OSError("no")

    with pytest.raises(BackendError, match=r"backend 'mem': explode failed: no"):
        caller.call(backend, BackendCall("explode", boom))
    assert caller.breaker("mem").consecutive_failures == 1
    caller.shutdown()
