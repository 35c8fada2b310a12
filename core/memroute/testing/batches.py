"""The batched-create part of the backend conformance suite: ``create_many``.

:class:`~memroute.testing.backend.BackendContract` inherits these tests and every backend runs them: the
interface's default ``create_many`` (``create`` in a loop) must pass as much as a backend's own one-transaction
version (capability ``batch_create``, which the service's group commit uses). A batch must behave exactly like
the same creates one after another: upserts inside the batch merge and two tenants' items never mix. A
backend declaring ``batch_create`` also returns an item's own error in its place and stores the others.
"""

from __future__ import annotations

from typing import ClassVar

import pytest

from memroute.errors import ConflictError
from memroute.interfaces import MemoryBackend
from memroute.models import Memory, NewMemory

__all__ = ["BatchCreateTests"]

_A = "tenant-a"
_B = "tenant-b"


def _memory(outcome: object, what: str) -> Memory:
    assert isinstance(outcome, Memory), f"create_many: {what}: expected the stored memory, got {outcome!r}"
    return outcome


class BatchCreateTests:
    """Conformance tests for ``MemoryBackend.create_many`` (mixed into ``BackendContract``)."""

    __test__: ClassVar[bool] = False

    def test_create_many_is_the_creates_in_order(self, backend: MemoryBackend) -> None:
        first = NewMemory(api_key_id=_A, key="lang", content="I prefer Go", metadata={"a": 1})
        other_tenant = NewMemory(api_key_id=_B, key="lang", content="I prefer Rust")
        again = NewMemory(api_key_id=_A, key="lang", content="I prefer TypeScript", metadata={"b": 2})
        fresh = NewMemory(api_key_id=_A, key="city", content="I live in Lisbon")
        outcomes = backend.create_many([first, other_tenant, again, fresh])
        assert len(outcomes) == 4, f"create_many: expected 4 outcomes, got {len(outcomes)}"
        labels = ("first", "other tenant", "upsert", "fresh")
        a1, b, a2, city = (_memory(outcome, label) for outcome, label in zip(outcomes, labels, strict=True))
        assert (a1.id, a1.api_key_id, a1.content) == (first.id, _A, "I prefer Go")
        assert (b.id, b.api_key_id, b.content) == (other_tenant.id, _B, "I prefer Rust"), (
            "create_many: the other tenant's item with the same key must be its own memory")
        assert a2.id == a1.id, "create_many: a later item with an earlier one's key must upsert into it"
        assert (a2.content, a2.metadata) == ("I prefer TypeScript", {"a": 1, "b": 2})
        assert city.id == fresh.id
        stored = backend.get(a1.id)
        assert stored is not None and stored.content == "I prefer TypeScript" and stored.api_key_id == _A
        other = backend.get(b.id)
        assert other is not None and other.content == "I prefer Rust" and other.api_key_id == _B
        assert backend.get_by_key(_B, "city") is None, "create_many: tenant b got tenant a's memory"

    def test_create_many_returns_an_items_conflict_in_its_place(self, backend: MemoryBackend) -> None:
        # Only a backend declaring batch_create promises this of one transaction; ids are memroute's UUIDs, so a
        # clash is this test's doing, the stand-in for any error that belongs to one item of a batch.
        if not backend.capabilities.batch_create:
            pytest.skip(f"{type(backend).__name__} declares capability batch_create=False")
        taken = backend.create(NewMemory(api_key_id=_A, key="taken", content="already here"))
        before = NewMemory(api_key_id=_A, key="before", content="stored")
        # the same tenant: some backends keep ids unique per tenant only (PostgreSQL's key is (api_key_id, id))
        clash = NewMemory(api_key_id=_A, key="other", content="reuses an id", id=taken.id)
        after = NewMemory(api_key_id=_B, key="after", content="stored too")
        outcomes = backend.create_many([before, clash, after])
        assert isinstance(outcomes[1], ConflictError), (
            f"create_many: an item whose id another memory holds must come back as ConflictError, got {outcomes[1]!r}")
        assert _memory(outcomes[0], "before the conflict").id == before.id
        assert _memory(outcomes[2], "after the conflict").id == after.id
        assert backend.get(before.id) is not None and backend.get(after.id) is not None
        kept = backend.get(taken.id)
        assert kept is not None and (kept.api_key_id, kept.content) == (_A, "already here")

    def test_create_many_of_nothing(self, backend: MemoryBackend) -> None:
        assert list(backend.create_many([])) == []
