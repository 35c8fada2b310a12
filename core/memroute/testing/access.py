"""The access-tracking part of the backend conformance suite (capability ``access_tracking``).

:class:`~memroute.testing.backend.BackendContract` inherits these tests; they are kept in their own module so
the contract stays readable. A backend that does not declare ``access_tracking`` skips all but
:meth:`AccessTrackingTests.test_list_by_last_accessed_at_works_without_tracking`: ordering by
``last_accessed_at`` must work on every backend that orders (never-accessed memories sort as the oldest).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, ClassVar

import pytest

from memroute.interfaces import AccessRecorder, MemoryAccess, MemoryBackend
from memroute.models import ListFilter, Memory, MemoryPatch, NewMemory, SearchQuery, new_memory_id, utcnow

__all__ = ["AccessTrackingTests"]

_A = "tenant-a"
_B = "tenant-b"


def _at() -> datetime:
    # whole seconds, an hour ago: survives any backend's timestamp precision
    return utcnow().replace(microsecond=0) - timedelta(hours=1)


def _recorder(backend: MemoryBackend) -> AccessRecorder:
    if not backend.capabilities.access_tracking:
        pytest.skip(f"{type(backend).__name__} declares capability access_tracking=False")
    assert isinstance(backend, AccessRecorder), (
        f"{type(backend).__name__} declares access_tracking but has no record_access(api_key_id, accesses)")
    return backend


def _record(backend: MemoryBackend, tenant: str, accesses: Mapping[str, tuple[int, datetime]]) -> int:
    batch = {memory_id: MemoryAccess(count=count, at=at) for memory_id, (count, at) in accesses.items()}
    return _recorder(backend).record_access(tenant, batch)


def _new(key: str, content: str, tenant: str = _A, **fields: Any) -> NewMemory:
    return NewMemory(api_key_id=tenant, key=key, content=content, **fields)


def _got(backend: MemoryBackend, memory: Memory) -> Memory:
    found = backend.get(memory.id)
    assert found is not None, f"get() lost memory {memory.id}"
    return found


class AccessTrackingTests:
    """Conformance tests for :class:`~memroute.interfaces.AccessRecorder` (mixed into ``BackendContract``)."""

    __test__: ClassVar[bool] = False

    def test_record_access_adds_counts_and_keeps_the_latest_time(self, backend: MemoryBackend) -> None:
        at = _at()
        one = backend.create(_new("one", "first memory about tea"))
        two = backend.create(_new("two", "second memory about coffee"))
        assert (one.access_count, one.last_accessed_at) == (0, None), "a new memory must start never accessed"
        assert _record(backend, _A, {one.id: (3, at)}) == 1, "record_access must return the rows it updated"
        got = _got(backend, one)
        assert (got.access_count, got.last_accessed_at) == (3, at), "a batch of 3 accesses must add 3"
        _record(backend, _A, {one.id: (1, at - timedelta(minutes=5)), two.id: (1, at)})
        got = _got(backend, one)
        assert got.access_count == 4, "counts must add up across batches"
        assert got.last_accessed_at == at, "an older batch landing late must not move last_accessed_at back"
        assert _got(backend, two).access_count == 1
        assert got.updated_at == one.updated_at and got.content == one.content, "an access is not an edit"
        hits = backend.search(SearchQuery(api_key_id=_A, text="tea", strategy="hybrid"))
        assert one.id in [h.memory.id for h in hits], "recording access broke keyword search"

    def test_record_access_is_tenant_scoped(self, backend: MemoryBackend) -> None:
        at = _at()
        mine = backend.create(_new("shared-key", "tenant a's memory"))
        theirs = backend.create(_new("shared-key", "tenant b's memory", tenant=_B))
        missing = new_memory_id()
        written = _record(backend, _B, {mine.id: (5, at), missing: (1, at)})
        assert written == 0, "a batch for tenant B must not update tenant A's row (or a missing one)"
        got = _got(backend, mine)
        assert (got.access_count, got.last_accessed_at) == (0, None), "tenant B's batch touched tenant A's memory"
        assert _record(backend, _B, {theirs.id: (1, at)}) == 1
        assert _got(backend, theirs).access_count == 1 and _got(backend, mine).access_count == 0

    def test_upsert_update_and_put_keep_access_telemetry(self, backend: MemoryBackend) -> None:
        at = _at()
        memory = backend.create(_new("kept", "counted memory"))
        _record(backend, _A, {memory.id: (2, at)})
        upserted = backend.create(_new("kept", "restated memory"))
        assert (upserted.access_count, upserted.last_accessed_at) == (2, at), "the upsert lost the access counts"
        updated = backend.update(memory.id, MemoryPatch(content="edited memory"))
        assert updated is not None and updated.access_count == 2, "update lost the access counts"
        backend.put(Memory(id=memory.id, api_key_id=_A, key="kept", content="replicated copy",
                           created_at=memory.created_at, updated_at=utcnow()))
        got = _got(backend, memory)
        assert got.content == "replicated copy"
        assert (got.access_count, got.last_accessed_at) == (2, at), "a put of a copy without counts erased them"

    def test_put_round_trips_access_fields(self, backend: MemoryBackend) -> None:
        _recorder(backend)
        at = _at()
        memory = Memory(id=new_memory_id(), api_key_id=_A, key="imported", content="from an export",
                        created_at=at, updated_at=at, access_count=7, last_accessed_at=at + timedelta(minutes=1))
        backend.put(memory)
        got = _got(backend, memory)
        assert (got.access_count, got.last_accessed_at) == (7, at + timedelta(minutes=1)), (
            "put must store access_count and last_accessed_at as given (import / restore)")

    @pytest.mark.parametrize("order_dir", ["asc", "desc"])
    def test_list_orders_by_last_accessed_at(self, backend: MemoryBackend, order_dir: str) -> None:
        if not backend.capabilities.ordering:
            pytest.skip(f"{type(backend).__name__} declares capability ordering=False")
        at = _at()
        made = [backend.create(_new(f"o{i}", f"ordered memory {i}", now=at + timedelta(seconds=i)))
                for i in range(3)]
        _record(backend, _A, {made[0].id: (1, at + timedelta(minutes=2)), made[2].id: (1, at + timedelta(minutes=1))})
        page = backend.list(ListFilter(api_key_id=_A, order_by="last_accessed_at", order_dir=order_dir))
        expected = [made[1].id, made[2].id, made[0].id]  # never accessed first when ascending
        if order_dir == "desc":
            expected.reverse()
        assert [m.id for m in page.data] == expected, (
            f"list(order_by=last_accessed_at, {order_dir}) must order by the access time, never-accessed "
            "memories as the oldest")

    def test_list_by_last_accessed_at_works_without_tracking(self, backend: MemoryBackend) -> None:
        if not backend.capabilities.ordering:
            pytest.skip(f"{type(backend).__name__} declares capability ordering=False")
        for i in range(3):
            backend.create(_new(f"n{i}", f"never accessed {i}"))
        for order_dir in ("asc", "desc"):
            page = backend.list(ListFilter(api_key_id=_A, order_by="last_accessed_at", order_dir=order_dir))
            assert page.total == 3 and len(page.data) == 3, f"order_by=last_accessed_at ({order_dir}) lost rows"
