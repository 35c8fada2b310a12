"""The fault-injecting backend wrapper (memroute.testing.faults) obeys its commands."""

from __future__ import annotations

import threading

import pytest

from memroute.errors import BackendUnavailableError
from memroute.models import NewMemory, SearchQuery
from memroute.testing.faults import FaultyBackend
from memroute.testing.memory import InMemoryBackend


@pytest.fixture
def faulty():
    backend = FaultyBackend(InMemoryBackend("inner"), hang_timeout_s=5)
    backend.initialize()
    yield backend
    backend.close()


def new(key: str = "k") -> NewMemory:
    return NewMemory(api_key_id="t", key=key, content="c")


def test_fail_selected_operations_then_recover(faulty):
    memory = faulty.create(new())
    faulty.fail("get", message="boom")
    with pytest.raises(BackendUnavailableError, match="boom"):
        faulty.get(memory.id)
    assert faulty.search(SearchQuery(api_key_id="t", text="c"))  # untouched operation still works
    health = faulty.health()
    assert health.ok  # health was not targeted
    faulty.fail()
    assert not faulty.health().ok
    with pytest.raises(BackendUnavailableError):
        faulty.create(new("j"))
    assert faulty.inner.get_many([memory.id]) and len(faulty.inner.snapshot()) == 1  # no partial write
    faulty.recover()
    assert faulty.get(memory.id).same_as(memory)
    assert faulty.calls["get"] == 2 and faulty.calls["create"] == 2


def test_hang_blocks_until_released(faulty):
    faulty.hang("create")
    results = []
    thread = threading.Thread(target=lambda: results.append(faulty.create(new())))
    thread.start()
    assert faulty.wait_for_hung(1)
    assert results == [] and faulty.hung_calls == 1
    faulty.release()
    thread.join(5)
    assert len(results) == 1 and faulty.hung_calls == 0


def test_hang_gives_up_after_its_timeout():
    faulty = FaultyBackend(InMemoryBackend("inner"), hang_timeout_s=0.01)
    faulty.hang()
    with pytest.raises(BackendUnavailableError, match="hung"):
        faulty.get("x")


def test_unknown_operation_is_rejected(faulty):
    with pytest.raises(ValueError, match="unknown operation"):
        faulty.fail("explode")
