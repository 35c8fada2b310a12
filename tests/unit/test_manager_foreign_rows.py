"""The manager re-checks what every backend returns (issue 16, item 3).

Behind a server that ignored the owner, ``list(api_key_id="A")`` and ``export("A")`` returned B's memories
and ``add(api_key_id="A", ...)`` returned B's memory: docs/failover.md said every result is re-checked, and
it was not. ``Careless`` is a backend that ignores the tenant the way such a server does.
"""

from __future__ import annotations

import builtins
import logging

import attrs
import pytest

from memroute.config.settings import ManagerSettings
from memroute.errors import BackendUnavailableError
from memroute.models import BackendHit, ListFilter, ListPage, Memory, MemoryPatch, NewMemory, SearchQuery
from memroute.routing.manager import MemoryManager
from memroute.testing.memory import InMemoryBackend

SETTINGS = ManagerSettings(health_interval_s=0, breaker_failures=3)


class Careless(InMemoryBackend):
    """Answers every read for every tenant, and a create with whatever memory holds the key."""

    def list(self, filter: ListFilter) -> ListPage:
        return super().list(attrs.evolve(filter, api_key_id=None))

    def search(self, query: SearchQuery) -> builtins.list[BackendHit]:
        hits: builtins.list[BackendHit] = []
        for tenant in ("a", "b"):
            hits += super().search(attrs.evolve(query, api_key_id=tenant))
        return hits

    def create(self, new: NewMemory) -> Memory:
        for memory in super().list(ListFilter(limit=10_000)).data:
            if memory.key == new.key:
                return memory  # the server matched the key alone
        return super().create(new)

    def get_many(self, memory_ids):
        return {m.id: m for m in super().list(ListFilter(limit=10_000)).data}

    def update(self, memory_id: str, patch: MemoryPatch) -> Memory | None:
        updated = super().update(memory_id, patch)
        others = [m for m in super().list(ListFilter(limit=10_000)).data if m.id != memory_id]
        return others[0] if updated is not None and others else updated


@pytest.fixture
def manager():
    careless = Careless("careless")
    manager = MemoryManager(careless, settings=SETTINGS, replay_in_background=False)
    manager.initialize()
    theirs = InMemoryBackend.create(careless, NewMemory(api_key_id="b", key="shared", content="B's ramen secret"))
    manager.theirs = theirs  # type: ignore[attr-defined]
    yield manager
    manager.close()


def test_list_export_and_search_drop_another_tenants_rows(manager, caplog):
    InMemoryBackend.create(manager.primary, NewMemory(api_key_id="a", key="mine", content="A's ramen note"))
    with caplog.at_level(logging.WARNING, logger="memroute.routing.manager"):
        page = manager.list(ListFilter(api_key_id="a"))
        exported = list(manager.iter_all("a"))
        hits = manager.search(SearchQuery(api_key_id="a", text="ramen", strategy="hybrid")).hits
    assert [m.api_key_id for m in page.data] == ["a"] and page.total == 1
    assert [m.api_key_id for m in exported] == ["a"]
    assert [h.memory.api_key_id for h in hits] == ["a"]
    assert "another tenant" in caplog.text and "careless" in caplog.text


def test_a_create_answered_with_another_tenants_memory_is_a_backend_failure(manager):
    with pytest.raises(BackendUnavailableError, match="another memory"):
        manager.create(NewMemory(api_key_id="a", key="shared", content="A's own"))
    assert manager.breaker("careless").consecutive_failures == 1


def test_get_many_and_update_keep_to_the_ids_asked_for(manager):
    mine = InMemoryBackend.create(manager.primary, NewMemory(api_key_id="a", key="mine", content="A's"))
    assert set(manager.get_many([mine.id])) == {mine.id}
    with pytest.raises(BackendUnavailableError, match="another memory"):
        manager.update(mine.id, MemoryPatch(content="changed"))
