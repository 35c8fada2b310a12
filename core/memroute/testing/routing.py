"""The tenant-routing part of the backend conformance suite (capability ``tenant_routing``).

:class:`~memroute.testing.backend.BackendContract` inherits these tests; a backend that does not declare
``tenant_routing`` skips them. One that does must act, in each ``*_owned`` call, only on memories of the tenant
it names: another tenant's memory with the id is "no such id" — never read, changed or deleted.
"""

from __future__ import annotations

from typing import ClassVar

import pytest

from memroute.interfaces import MemoryBackend, TenantRouting
from memroute.models import MemoryPatch, NewMemory, new_memory_id

__all__ = ["TenantRoutingTests"]

_A = "tenant-a"
_B = "tenant-b"


def _routed(backend: MemoryBackend) -> TenantRouting:
    if not backend.capabilities.tenant_routing:
        pytest.skip(f"{type(backend).__name__} declares capability tenant_routing=False")
    assert isinstance(backend, TenantRouting), (
        f"{type(backend).__name__} declares tenant_routing but lacks get_owned / get_many_owned / update_owned / "
        "delete_owned")
    return backend


class TenantRoutingTests:
    """Conformance tests for :class:`~memroute.interfaces.TenantRouting` (mixed into ``BackendContract``)."""

    __test__: ClassVar[bool] = False

    def test_owned_reads_see_only_the_named_tenant(self, backend: MemoryBackend) -> None:
        routed = _routed(backend)
        mine = backend.create(NewMemory(api_key_id=_A, key="k", content="tenant a's memory"))
        theirs = backend.create(NewMemory(api_key_id=_B, key="k", content="tenant b's memory"))
        got = routed.get_owned(_A, mine.id)
        assert got is not None and got.id == mine.id and got.content == mine.content, "get_owned() of its own id"
        assert routed.get_owned(_A, theirs.id) is None, "get_owned() returned another tenant's memory"
        assert routed.get_owned(_A, new_memory_id()) is None
        found = routed.get_many_owned(_A, [mine.id, theirs.id, new_memory_id()])
        assert set(found) == {mine.id}, f"get_many_owned() returned ids {sorted(found)}"
        assert routed.get_many_owned(_A, []) == {}

    def test_owned_writes_never_touch_another_tenant(self, backend: MemoryBackend) -> None:
        routed = _routed(backend)
        mine = backend.create(NewMemory(api_key_id=_A, key="k", content="tenant a's memory"))
        theirs = backend.create(NewMemory(api_key_id=_B, key="k", content="tenant b's memory"))
        assert routed.update_owned(_A, theirs.id, MemoryPatch(content="hijacked")) is None, (
            "update_owned() changed another tenant's memory")
        assert routed.delete_owned(_A, theirs.id) is False, "delete_owned() deleted another tenant's memory"
        kept = backend.get(theirs.id)
        assert kept is not None and kept.content == theirs.content, "tenant b's memory after tenant a's calls"
        updated = routed.update_owned(_A, mine.id, MemoryPatch(content="changed"))
        assert updated is not None and updated.content == "changed" and updated.api_key_id == _A
        assert routed.update_owned(_A, mine.id, MemoryPatch()) is not None, "an empty patch returns the memory"
        assert routed.delete_owned(_A, mine.id) is True and backend.get(mine.id) is None
        assert routed.delete_owned(_A, mine.id) is False, "delete_owned() of a deleted id"
        assert routed.update_owned(_A, new_memory_id(), MemoryPatch(content="x")) is None
