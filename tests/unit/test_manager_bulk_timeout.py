"""``put_many`` is one backend call for the whole batch, so its timeout grows with the batch: a bulk import
that takes its backend longer than ``operation_timeout_s`` is not cut off (it used to be, at 100,000 memories
into PostgreSQL on a loaded machine), while a hung small write still times out."""

from __future__ import annotations

import time

import pytest

from memroute.config.settings import ManagerSettings
from memroute.errors import BackendUnavailableError
from memroute.models import Memory, new_memory_id, utcnow
from memroute.routing.manager import BULK_SECONDS_PER_MEMORY, MemoryManager
from memroute.testing.memory import InMemoryBackend


class Slow(InMemoryBackend):
    """Takes ``delay`` seconds for every bulk write (as a large transaction does)."""

    delay = 0.0

    def put_many(self, memories):  # type: ignore[no-untyped-def]
        time.sleep(self.delay)
        return super().put_many(memories)


def _batch(count: int) -> list[Memory]:
    now = utcnow()
    return [Memory(id=new_memory_id(), api_key_id="a", key=f"k{i}", content="x", created_at=now, updated_at=now)
            for i in range(count)]


def test_the_put_many_timeout_scales_with_the_batch(tmp_path) -> None:
    backend = Slow("main")
    manager = MemoryManager(backend, [], settings=ManagerSettings(health_interval_s=0, operation_timeout_s=0.1,
                                                                  breaker_failures=5),
                            outbox_path=":memory:", replay_in_background=False)
    manager.initialize()
    try:
        count = int(0.5 / BULK_SECONDS_PER_MEMORY)  # half a second more than the 0.1 s base
        backend.delay = 0.3
        assert manager.put_many(_batch(count)) == count
        with pytest.raises(BackendUnavailableError, match="timed out"):
            manager.put_many(_batch(1))
    finally:
        backend.delay = 0.0
        manager.close()
