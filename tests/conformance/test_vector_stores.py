"""The built-in vector stores pass memroute's VectorStoreContract, and agree with each other."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from memroute.interfaces import ComponentContext, EmbeddingSignature, VectorItem, VectorStore
from memroute.models import SearchQuery
from memroute.testing import VectorStoreContract
from memroute_builtins.vectors.qdrant import QdrantSettings, QdrantStore
from memroute_builtins.vectors.sqlite_vec.store import SqliteVecSettings, SqliteVecStore


def _context(data_dir: Path) -> ComponentContext:
    return ComponentContext(instance_name="vectors", data_dir=data_dir)


class TestSqliteVecFloat32(VectorStoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[VectorStore]:
        store = SqliteVecStore(SqliteVecSettings(), _context(tmp_path))
        yield store
        store.close()

    @pytest.fixture
    def reopen(self, tmp_path: Path):
        def again(store: VectorStore) -> VectorStore:
            store.close()
            return SqliteVecStore(SqliteVecSettings(), _context(tmp_path))

        return again


def _reopen(settings: SqliteVecSettings, tmp_path: Path) -> Callable[[VectorStore], VectorStore]:
    def again(store: VectorStore) -> VectorStore:
        store.close()
        return SqliteVecStore(settings, _context(tmp_path))

    return again


class TestSqliteVecInt8(VectorStoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[VectorStore]:
        store = SqliteVecStore(SqliteVecSettings(quantization="int8"), _context(tmp_path))
        yield store
        store.close()

    @pytest.fixture
    def reopen(self, tmp_path: Path) -> Callable[[VectorStore], VectorStore]:
        return _reopen(SqliteVecSettings(quantization="int8"), tmp_path)


class TestSqliteVecPromoted(VectorStoreContract):
    """Every tenant past 2 vectors moves to the large-chunk table: the contract runs across both tiers."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[VectorStore]:
        store = SqliteVecStore(SqliteVecSettings(promote_at=2, quantization="int8"), _context(tmp_path))
        yield store
        store.close()

    @pytest.fixture
    def reopen(self, tmp_path: Path) -> Callable[[VectorStore], VectorStore]:
        return _reopen(SqliteVecSettings(promote_at=2, quantization="int8"), tmp_path)


class TestSqliteVecPromotedFloat32(VectorStoreContract):
    """The large tier (numpy matrices over the BLOB table) for float32, with a cache too small to keep the
    crowd tenant (searched uncached) and persistence across reopen (the matrix reloads from SQLite)."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[VectorStore]:
        store = SqliteVecStore(SqliteVecSettings(promote_at=2, cache_max_mb=0.05), _context(tmp_path))
        yield store
        store.close()

    @pytest.fixture
    def reopen(self, tmp_path: Path):
        def again(store: VectorStore) -> VectorStore:
            store.close()
            return SqliteVecStore(SqliteVecSettings(promote_at=2, cache_max_mb=0.05), _context(tmp_path))

        return again


class TestQdrantLocalMemory(VectorStoreContract):
    persistent = False

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[VectorStore]:
        store = QdrantStore(QdrantSettings(location=":memory:"), _context(tmp_path))
        yield store
        store.close()


class TestQdrantLocalPath(VectorStoreContract):
    # qdrant-client's on-disk local mode commits every point separately (~15 ms each here); the in-memory
    # class above runs the full 1,000-vector crowd.
    crowd_size = 100

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[VectorStore]:
        store = QdrantStore(QdrantSettings(), _context(tmp_path))
        yield store
        store.close()

    @pytest.fixture
    def reopen(self, tmp_path: Path):
        def again(store: VectorStore) -> VectorStore:
            store.close()
            return QdrantStore(QdrantSettings(), _context(tmp_path))

        return again


# --- the two stores agree --------------------------------------------------------------------------------

def _same_data(stores: list[VectorStore], dim: int = 64, tenants: int = 3, per_tenant: int = 150):
    rng = np.random.default_rng(42)
    now = datetime(2026, 6, 1, tzinfo=timezone.utc)
    signature = EmbeddingSignature(source="cross", model="random", dimensions=dim)
    items = []
    for tenant in range(tenants):
        rows = rng.standard_normal((per_tenant, dim)).astype(np.float32)
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        items += [VectorItem(memory_id=str(uuid.uuid4()), api_key_id=f"t{tenant}", session_id=None,
                             created_at=now, expires_at=None, vector=v) for v in rows]
    for store in stores:
        store.bind(signature)
        store.upsert(items)
    probes = rng.standard_normal((20, dim)).astype(np.float32)
    probes /= np.linalg.norm(probes, axis=1, keepdims=True)
    return probes, SearchQuery(api_key_id="t1", now=now)


@pytest.mark.parametrize("center", [True, False], ids=["centred", "plain"])
@pytest.mark.parametrize("tier", ["small", "large"])
@pytest.mark.parametrize("quantization,min_overlap", [("float32", 10), ("int8", 8)])
def test_sqlite_vec_and_qdrant_give_the_same_top_10(tmp_path: Path, quantization: str, min_overlap: int,
                                                    tier: str, center: bool) -> None:
    # 150 vectors per tenant: below promote_at (vec0) or past it (the numpy large tier).
    promote_at = 512 if tier == "small" else 100
    # Both rank by the centred query (the default) or both by plain cosine. The hub penalty is sqlite-vec's
    # own refinement (docs/vectors.md), off here.
    sqlite = SqliteVecStore(SqliteVecSettings(quantization=quantization, promote_at=promote_at, center=center,
                                              hub_penalty=0.0), _context(tmp_path))
    qdrant = QdrantStore(QdrantSettings(location=":memory:", center=center), _context(tmp_path))
    try:
        probes, query = _same_data([sqlite, qdrant])
        overlaps = []
        for probe in probes:
            a = sqlite.query(probe, query, 10)
            b = qdrant.query(probe, query, 10)
            overlaps.append(len({h.memory_id for h in a} & {h.memory_id for h in b}))
            if quantization == "float32":
                assert [h.memory_id for h in a] == [h.memory_id for h in b]
                assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)
        assert min(overlaps) >= min_overlap, overlaps
        if quantization == "int8":
            assert np.mean(overlaps) >= 9.0, overlaps  # int8 recall@10 against exact float search
    finally:
        sqlite.close()
        qdrant.close()
