"""``VectorStoreContract``: the conformance suite every vector store passes.

Subclass it and override one fixture, ``store``, that yields a fresh, empty store ready for ``bind``
(the contract binds it itself). Optionally override ``reopen`` (persistence) — see its docstring.

Example::

    class TestMyStore(VectorStoreContract):
        @pytest.fixture
        def store(self, tmp_path):
            store = MyStore(path=tmp_path / "index")
            yield store
            store.close()
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import attrs
import numpy as np
import pytest

from memroute.errors import MemrouteError, ValidationError, VectorStoreError
from memroute.interfaces import EmbeddingSignature, VectorItem, VectorStore
from memroute.models import SearchQuery

__all__ = ["VectorStoreContract"]

DIM = 32
SIGNATURE = EmbeddingSignature(source="contract", model="random-unit", dimensions=DIM)
OTHER_SIGNATURE = EmbeddingSignature(source="contract", model="another-model", dimensions=DIM)
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
BAD_INPUT = (ValidationError, VectorStoreError)


def unit_rows(count: int, dim: int = DIM, seed: int = 0) -> np.ndarray:
    """``count`` random L2-normalised float32 rows."""
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((count, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def item(vector: Any, api_key_id: str = "tenant-a", *, session_id: str | None = None,
         created_at: datetime = NOW - timedelta(days=1), expires_at: datetime | None = None,
         memory_id: str | None = None) -> VectorItem:
    return VectorItem(memory_id=memory_id or str(uuid.uuid4()), api_key_id=api_key_id, session_id=session_id,
                      created_at=created_at, expires_at=expires_at, vector=vector)


def search(api_key_id: str = "tenant-a", **kwargs: Any) -> SearchQuery:
    return SearchQuery(api_key_id=api_key_id, now=NOW, **kwargs)


class VectorStoreContract:
    """Behaviour every :class:`~memroute.interfaces.VectorStore` must have. Override ``store``."""

    crowd_size: int = 1000
    """How many near-duplicates the other tenant holds in the owner-filter test. Lower it only for a store
    whose writes are slow by design (say why in the subclass)."""
    persistent: bool = True
    """Set to ``False`` for a store whose data does not survive ``close()`` (the reopen test is skipped)."""

    @pytest.fixture
    def store(self) -> Iterator[VectorStore]:
        """A fresh, empty store. Override in the subclass."""
        raise NotImplementedError("override the `store` fixture to yield a fresh VectorStore")

    @pytest.fixture
    def reopen(self) -> Callable[[VectorStore], VectorStore] | None:
        """Override to return ``f(store) -> store`` that closes ``store`` and opens a new one on the same data,
        for the persistence test. ``None`` skips it."""
        return None

    @pytest.fixture
    def bound(self, store: VectorStore) -> VectorStore:
        assert store.bind(SIGNATURE) is True, "bind() on a new store must return True"
        return store

    # -- binding ----------------------------------------------------------------------------------------

    def test_signature_is_none_before_bind_and_recorded_after(self, store: VectorStore) -> None:
        assert store.signature() is None
        assert store.bind(SIGNATURE) is True
        assert store.signature() == str(SIGNATURE)
        assert store.bind(SIGNATURE) is True, "re-binding the same signature must keep the index"

    def test_bind_with_another_signature_resets_the_index(self, bound: VectorStore) -> None:
        bound.upsert([item(v) for v in unit_rows(5)])
        assert bound.count() == 5
        assert bound.bind(OTHER_SIGNATURE) is False, "a different signature must report a reset"
        assert bound.signature() == str(OTHER_SIGNATURE)
        assert bound.count() == 0 and bound.ids() == set()
        assert bound.query(unit_rows(1)[0], search(), 5) == []

    def test_bind_with_another_dimension_accepts_the_new_size(self, bound: VectorStore) -> None:
        bound.upsert([item(unit_rows(1)[0])])
        wider = EmbeddingSignature(source="contract", model="wide", dimensions=DIM * 2)
        assert bound.bind(wider) is False
        bound.upsert([item(unit_rows(1, DIM * 2)[0])])
        assert bound.count() == 1

    # -- round trip -------------------------------------------------------------------------------------

    def test_nearest_is_self_with_descending_scores(self, bound: VectorStore) -> None:
        rows = unit_rows(50, seed=1)
        items = [item(v) for v in rows]
        bound.upsert(items)
        for index in (0, 17, 49):
            hits = bound.query(rows[index], search(), 10)
            assert len(hits) == 10
            assert hits[0].memory_id == items[index].memory_id, "a stored vector's nearest neighbour is itself"
            # A store may rank by a refinement of the cosine (sqlite-vec's centring and hub penalty); then
            # ``cosine`` carries the plain one.
            assert (hits[0].score if hits[0].cosine is None else hits[0].cosine) == pytest.approx(1.0, abs=0.02)
            scores = [h.score for h in hits]
            assert scores == sorted(scores, reverse=True), "hits must be best first"
            assert all(-1.0 <= s <= 1.0 for s in scores), "scores are cosine similarities"

    def test_scores_are_cosine_similarities(self, bound: VectorStore) -> None:
        rows = unit_rows(20, seed=2)
        items = [item(v) for v in rows]
        bound.upsert(items)
        probe = unit_rows(1, seed=3)[0]
        expected = {it.memory_id: float(np.dot(probe, v)) for it, v in zip(items, rows, strict=True)}
        for hit in bound.query(probe, search(), 20):
            # A store may rank by a refinement of the cosine (sqlite-vec's centring); then ``cosine`` is it.
            cosine = hit.score if hit.cosine is None else hit.cosine
            assert cosine == pytest.approx(expected[hit.memory_id], abs=0.05)

    def test_ids_are_canonical_and_accept_any_uuid_spelling(self, bound: VectorStore) -> None:
        memory_id = uuid.uuid4()
        vector = unit_rows(1)[0]
        bound.upsert([item(vector, memory_id=str(memory_id).upper())])
        assert bound.ids() == {str(memory_id)}
        assert bound.query(vector, search(), 1)[0].memory_id == str(memory_id)

    def test_query_of_an_empty_tenant_is_empty(self, bound: VectorStore) -> None:
        assert bound.query(unit_rows(1)[0], search("nobody"), 5) == []

    # -- tenant isolation -------------------------------------------------------------------------------

    def test_k_applies_after_the_owner_filter(self, bound: VectorStore) -> None:
        rows = unit_rows(5, seed=4)
        mine = [item(v, "tenant-a") for v in rows]
        # Tenant B holds 1,000 near-duplicates of A's first vector: a global top-k would be all B's.
        noise = unit_rows(self.crowd_size, seed=5) * 0.01
        crowd = rows[0] + noise
        crowd /= np.linalg.norm(crowd, axis=1, keepdims=True)
        bound.upsert(mine)
        bound.upsert([item(v, "tenant-b") for v in crowd])
        hits = bound.query(rows[0], search("tenant-a"), 5)
        assert {h.memory_id for h in hits} == {i.memory_id for i in mine}
        other = bound.query(rows[0], search("tenant-b"), 5)
        assert len(other) == 5 and not {h.memory_id for h in other} & {i.memory_id for i in mine}

    def test_count_and_ids_per_tenant(self, bound: VectorStore) -> None:
        a = [item(v, "tenant-a") for v in unit_rows(3, seed=6)]
        b = [item(v, "tenant-b") for v in unit_rows(2, seed=7)]
        bound.upsert(a + b)
        assert bound.count("tenant-a") == 3 and bound.count("tenant-b") == 2 and bound.count() == 5
        assert bound.count("tenant-c") == 0
        assert bound.ids("tenant-a") == {i.memory_id for i in a}
        assert bound.ids("tenant-b") == {i.memory_id for i in b}
        assert bound.ids() == {i.memory_id for i in a + b}

    def test_reupsert_under_another_owner_moves_the_vector(self, bound: VectorStore) -> None:
        vector = unit_rows(1)[0]
        first = item(vector, "tenant-a")
        bound.upsert([first])
        bound.upsert([item(vector, "tenant-b", memory_id=first.memory_id)])
        assert bound.query(vector, search("tenant-a"), 5) == []
        assert [h.memory_id for h in bound.query(vector, search("tenant-b"), 5)] == [first.memory_id]
        assert bound.count() == 1

    # -- filters ----------------------------------------------------------------------------------------

    def test_session_filter(self, bound: VectorStore) -> None:
        rows = unit_rows(3, seed=8)
        s1, s2, none = item(rows[0], session_id="s1"), item(rows[1], session_id="s2"), item(rows[2])
        bound.upsert([s1, s2, none])
        assert {h.memory_id for h in bound.query(rows[0], search(session_id="s1"), 10)} == {s1.memory_id}
        assert {h.memory_id for h in bound.query(rows[0], search(), 10)} == {s1.memory_id, s2.memory_id,
                                                                               none.memory_id}

    def test_expired_vectors_are_not_returned(self, bound: VectorStore) -> None:
        rows = unit_rows(4, seed=9)
        expired = item(rows[0], expires_at=NOW - timedelta(seconds=1))
        at_now = item(rows[1], expires_at=NOW)
        later = item(rows[2], expires_at=NOW + timedelta(seconds=1))
        never = item(rows[3])
        bound.upsert([expired, at_now, later, never])
        found = {h.memory_id for h in bound.query(rows[0], search(), 10)}
        assert found == {later.memory_id, never.memory_id}, "expired means expires_at <= now"

    def test_retention_window(self, bound: VectorStore) -> None:
        rows = unit_rows(3, seed=10)
        old = item(rows[0], created_at=NOW - timedelta(days=40))
        edge = item(rows[1], created_at=NOW - timedelta(days=30))
        recent = item(rows[2], created_at=NOW - timedelta(days=2))
        bound.upsert([old, edge, recent])
        found = {h.memory_id for h in bound.query(rows[0], search(retention_days=30), 10)}
        assert found == {edge.memory_id, recent.memory_id}
        assert len(bound.query(rows[0], search(), 10)) == 3

    def test_k_counts_only_admitted_vectors(self, bound: VectorStore) -> None:
        rows = unit_rows(30, seed=11)
        # The 20 nearest are expired; k=5 must still find 5 live vectors.
        expired = [item(rows[0] + 0.001 * r, expires_at=NOW - timedelta(days=1)) for r in unit_rows(20, seed=12)]
        live = [item(v) for v in rows[10:]]
        bound.upsert(expired + live)
        hits = bound.query(rows[0], search(), 5)
        assert len(hits) == 5 and {h.memory_id for h in hits} <= {i.memory_id for i in live}

    # -- delete and replace -----------------------------------------------------------------------------

    def test_delete(self, bound: VectorStore) -> None:
        rows = unit_rows(3, seed=13)
        items = [item(v) for v in rows]
        bound.upsert(items)
        bound.delete([items[0].memory_id, str(uuid.uuid4())])  # an unknown id is ignored
        assert bound.ids() == {items[1].memory_id, items[2].memory_id}
        assert items[0].memory_id not in {h.memory_id for h in bound.query(rows[0], search(), 10)}
        bound.delete([])
        assert bound.count() == 2

    def test_reupsert_replaces_vector_and_fields(self, bound: VectorStore) -> None:
        rows = unit_rows(2, seed=14)
        first = item(rows[0], session_id="s1")
        bound.upsert([first])
        bound.upsert([item(rows[1], session_id="s2", memory_id=first.memory_id)])
        assert bound.count() == 1
        hit = bound.query(rows[1], search(), 1)[0]
        assert hit.memory_id == first.memory_id and hit.score == pytest.approx(1.0, abs=0.02)
        assert bound.query(rows[1], search(session_id="s1"), 5) == []

    def test_duplicate_ids_in_one_batch_keep_the_last(self, bound: VectorStore) -> None:
        rows = unit_rows(2, seed=15)
        memory_id = str(uuid.uuid4())
        bound.upsert([item(rows[0], memory_id=memory_id), item(rows[1], memory_id=memory_id)])
        assert bound.count() == 1
        assert bound.query(rows[1], search(), 1)[0].score == pytest.approx(1.0, abs=0.02)

    # -- bad input --------------------------------------------------------------------------------------

    def test_dimension_mismatch_is_a_clear_error(self, bound: VectorStore) -> None:
        good = item(unit_rows(1)[0])
        with pytest.raises(VectorStoreError, match="dimension"):
            bound.upsert([good, item(unit_rows(1, DIM + 1)[0])])
        assert bound.count() == 0, "a bad batch must not be partly written"
        with pytest.raises(VectorStoreError, match="dimension"):
            bound.query(unit_rows(1, DIM - 1)[0], search(), 5)

    @pytest.mark.parametrize("vector", [
        np.zeros(DIM, dtype=np.float32),
        np.full(DIM, np.nan, dtype=np.float32),
        np.ones((2, DIM), dtype=np.float32),
        "not a vector",
    ], ids=["zero", "nan", "2-d", "string"])
    def test_malformed_vectors_are_rejected(self, bound: VectorStore, vector: Any) -> None:
        with pytest.raises(BAD_INPUT):
            bound.upsert([item(vector)])
        with pytest.raises(BAD_INPUT):
            bound.query(vector, search(), 5)
        assert bound.count() == 0

    @pytest.mark.parametrize("field,value", [("memory_id", "not-a-uuid"), ("api_key_id", "")])
    def test_malformed_items_are_rejected(self, bound: VectorStore, field: str, value: str) -> None:
        good = item(unit_rows(1)[0])
        changes: dict[str, Any] = {field: value}
        bad = attrs.evolve(good, **changes)
        with pytest.raises(BAD_INPUT):
            bound.upsert([item(unit_rows(1, seed=1)[0]), bad])
        assert bound.count() == 0

    @pytest.mark.parametrize("k", [0, -1, 10**9, 2.5, True])
    def test_bad_k_is_rejected(self, bound: VectorStore, k: Any) -> None:
        with pytest.raises(BAD_INPUT):
            bound.query(unit_rows(1)[0], search(), k)

    def test_bad_ids_to_delete_are_rejected(self, bound: VectorStore) -> None:
        with pytest.raises(BAD_INPUT):
            bound.delete(["not-a-uuid"])
        with pytest.raises(MemrouteError):
            bound.delete(str(uuid.uuid4()))  # a bare string is not a list of ids

    def test_use_before_bind_is_a_clear_error(self, store: VectorStore) -> None:
        with pytest.raises(VectorStoreError, match="bind"):
            store.upsert([item(unit_rows(1)[0])])
        with pytest.raises(VectorStoreError, match="bind"):
            store.query(unit_rows(1)[0], search(), 5)

    def test_bind_rejects_a_non_signature(self, store: VectorStore) -> None:
        with pytest.raises(VectorStoreError):
            store.bind("contract:random-unit:32")  # type: ignore[arg-type]

    # -- health and persistence -------------------------------------------------------------------------

    def test_health(self, bound: VectorStore) -> None:
        result = bound.health()
        assert result.ok, result.error
        assert result.latency_ms >= 0

    def test_persistence_across_reopen(self, bound: VectorStore,
                                       reopen: Callable[[VectorStore], VectorStore] | None) -> None:
        if not self.persistent or reopen is None:
            pytest.skip("store is not persistent (or the subclass gives no reopen fixture)")
        rows = unit_rows(10, seed=16)
        items = [item(v, "tenant-a" if i % 2 else "tenant-b") for i, v in enumerate(rows)]
        bound.upsert(items)
        again = reopen(bound)
        try:
            assert again.signature() == str(SIGNATURE)
            assert again.bind(SIGNATURE) is True, "the same signature after a reopen keeps the index"
            assert again.ids() == {i.memory_id for i in items}
            assert again.query(rows[1], search("tenant-a"), 1)[0].memory_id == items[1].memory_id
            assert again.bind(OTHER_SIGNATURE) is False
        finally:
            again.close()
