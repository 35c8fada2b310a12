"""Centred-query ranking (``center = true``, the default) in the sqlite-vec and Qdrant stores, and the indexing
fast paths: both sqlite-vec tiers and Qdrant rank exactly by brute force over the centred query, each hit
keeps its plain cosine, the cached tenant mean follows writes, ``center = false`` is plain cosine; batch
vector checks name the bad item as the per-item check does; indexing does not go through the query cache."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

import memroute
from memroute.errors import ValidationError, VectorStoreError
from memroute.interfaces import ComponentContext, EmbeddingSignature, VectorItem
from memroute.models import SearchQuery
from memroute_builtins.vectors.common import check_items, check_vector, check_vectors
from memroute_builtins.vectors.sqlite_vec.matrix_cache import center_of, centered_scores
from memroute_builtins.vectors.sqlite_vec.store import SqliteVecSettings, SqliteVecStore

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
SIG = EmbeddingSignature(source="t", model="m", dimensions=32)


def _cone(count: int, seed: int) -> np.ndarray:
    """Unit rows crowded in a cone around one direction, as a real embedding model's are."""
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((count, 32)).astype(np.float32) * 0.4 + np.float32(1.0)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _items(rows: np.ndarray, key: str = "k") -> list[VectorItem]:
    return [VectorItem(memory_id=str(uuid.uuid4()), api_key_id=key, session_id=None, created_at=NOW,
                       expires_at=None, vector=v) for v in rows]


def _store(tmp_path: Path, **options) -> SqliteVecStore:
    options.setdefault("hub_penalty", 0.0)  # centring alone here; the hub penalty has test_hub_penalty
    store = SqliteVecStore(SqliteVecSettings(**options), ComponentContext(instance_name="v", data_dir=tmp_path))
    store.bind(SIG)
    return store


@pytest.mark.parametrize("promote_at", [8, 512], ids=["large tier", "small tier"])
def test_centred_ranking_equals_brute_force_and_keeps_the_plain_cosine(tmp_path: Path, promote_at: int) -> None:
    rows = _cone(300, seed=1)
    items = _items(rows)
    store = _store(tmp_path, promote_at=promote_at)
    store.upsert(items + _items(_cone(40, seed=2), "other"))  # another tenant's rows do not move the center
    query = SearchQuery(api_key_id="k", now=NOW)
    for probe in _cone(4, seed=3):
        scores = centered_scores(rows, probe)
        expected = [items[i].memory_id for i in np.argsort(-scores, kind="stable")[:10]]
        hits = store.query(probe, query, 10)
        assert [h.memory_id for h in hits] == expected
        by_id = {it.memory_id: i for i, it in enumerate(items)}
        for hit in hits:
            assert hit.score == pytest.approx(float(scores[by_id[hit.memory_id]]), abs=1e-4)
            assert hit.cosine == pytest.approx(float(rows[by_id[hit.memory_id]] @ probe), abs=1e-4)
    store.close()


def test_centring_changes_the_ranking_only_where_the_cone_misleads(tmp_path: Path) -> None:
    rows = _cone(200, seed=4)
    plain, centred = _store(tmp_path / "a", center=False), _store(tmp_path / "b")
    for store in (plain, centred):
        store.upsert(_items(rows))
    probe = _cone(1, seed=5)[0]
    plain_hits = plain.query(probe, SearchQuery(api_key_id="k", now=NOW), 10)
    assert all(h.cosine is None or h.cosine == h.score for h in plain_hits)
    assert [h.score for h in plain_hits] == pytest.approx(sorted((rows @ probe).tolist(), reverse=True)[:10],
                                                          abs=1e-5)
    # Only the query is centred: the score is the memory's cosine with unit(query - center).
    middle = center_of(rows)
    shifted = (rows[7] - middle) / np.linalg.norm(rows[7] - middle)
    best = centred.query(rows[7], SearchQuery(api_key_id="k", now=NOW), 1)[0]
    top = int(np.argmax(rows @ shifted))
    assert best.score == pytest.approx(float(rows[top] @ shifted), abs=1e-4)
    assert best.cosine == pytest.approx(float(rows[top] @ rows[7]), abs=1e-4)
    plain.close()
    centred.close()


def test_the_center_follows_writes_and_removals(tmp_path: Path) -> None:
    store = _store(tmp_path, promote_at=8)
    rows = _cone(400, seed=6)
    items = _items(rows)
    store.upsert(items[:200])
    query = SearchQuery(api_key_id="k", now=NOW)
    store.query(rows[0], query, 5)  # computes the center for 200 rows
    store.upsert(items[200:])        # twice the rows: the center is recomputed
    store.delete([items[0].memory_id])
    live = rows[1:]
    probe = _cone(1, seed=7)[0]
    expected = [items[1 + i].memory_id for i in np.argsort(-centered_scores(live, probe), kind="stable")[:10]]
    assert [h.memory_id for h in store.query(probe, query, 10)] == expected
    store.close()


def test_a_tiny_tenant_is_barely_centred() -> None:
    rows = _cone(3, seed=8)
    assert np.linalg.norm(center_of(rows)) < 0.25 * np.linalg.norm(rows.mean(axis=0)) + 1e-6
    assert center_of(np.zeros((0, 4), dtype=np.float32)).shape == (4,)


def test_batch_vector_checks_name_the_first_bad_item_like_the_single_check() -> None:
    good = _cone(3, seed=9)
    assert np.allclose(check_vectors(list(good * 3.0), 32), good, atol=1e-6)
    assert check_vectors([], 32).shape == (0, 32)
    for bad, error in (([*good[:2], np.full(32, np.nan, dtype=np.float32)], ValidationError),
                       ([good[0], np.zeros(32, dtype=np.float32)], ValidationError),
                       ([good[0], good[1][:16]], VectorStoreError),
                       ([good[0], good[1][None, :]], ValidationError),
                       ([good[0], "nope"], ValidationError)):
        with pytest.raises(error) as raised:
            check_vectors(bad, 32)
        with pytest.raises(error) as single:
            check_vector(bad[-1], 32, f"items[{len(bad) - 1}].vector")
        assert str(raised.value) == str(single.value)
    items = _items(good)
    checked = check_items([*items, items[0]], 32)  # a repeated id: the last one wins, once
    assert [c[1] for c in checked] == [items[1].memory_id, items[2].memory_id, items[0].memory_id]


def test_indexing_does_not_fill_the_query_cache(tmp_path: Path) -> None:
    with memroute.open({}, data_dir=str(tmp_path), embedding={"source": "static"},
                       vectors={"store": "sqlite-vec"}) as mem:
        for i in range(20):
            mem.add(content=f"note number {i} about the build pipeline", api_key_id="t", key=f"note:{i}")
        assert mem.flush(timeout=60)
        cache = mem.status().embedding.get("cache_stats") or {}
        assert cache.get("size", 0) <= 1, cache  # at most the signature probe, not the 20 memories
        hits = mem.search("build pipeline", api_key_id="t", strategy="semantic", limit=3).hits
        assert len(hits) == 3


def test_qdrant_ranks_by_the_same_centred_query_and_refreshes_its_center(tmp_path: Path) -> None:
    from memroute_builtins.vectors.qdrant import QdrantSettings, QdrantStore

    store = QdrantStore(QdrantSettings(location=":memory:"), ComponentContext(instance_name="v", data_dir=tmp_path))
    store.bind(SIG)
    rows = _cone(120, seed=10)
    items = _items(rows)
    store.upsert(items + _items(_cone(30, seed=11), "other"))
    query = SearchQuery(api_key_id="k", now=NOW)
    by_id = {it.memory_id: i for i, it in enumerate(items)}
    for probe in _cone(3, seed=12):
        scores = centered_scores(rows, probe)
        hits = store.query(probe, query, 10)
        assert [h.memory_id for h in hits] == [items[i].memory_id for i in np.argsort(-scores, kind="stable")[:10]]
        for hit in hits:
            assert hit.score == pytest.approx(float(scores[by_id[hit.memory_id]]), abs=1e-4)
            assert hit.cosine == pytest.approx(float(rows[by_id[hit.memory_id]] @ probe), abs=1e-4)
    assert store.centers.computed == 1  # cached between queries
    more = _cone(60, seed=13) * np.float32(-1.0)  # a different direction: the mean moves
    store.upsert(_items(more))
    probe = _cone(1, seed=14)[0]
    expected = centered_scores(np.concatenate([rows, more]), probe)
    top = store.query(probe, query, 1)[0]
    assert store.centers.computed == 2
    assert top.score == pytest.approx(float(expected.max()), abs=1e-4)
    plain = QdrantStore(QdrantSettings(location=":memory:", center=False),
                        ComponentContext(instance_name="p", data_dir=tmp_path))
    plain.bind(SIG)
    plain.upsert(items)
    assert [h.score for h in plain.query(probe, query, 5)] == pytest.approx(
        sorted((rows @ probe).tolist(), reverse=True)[:5], abs=1e-5)
    store.close()
    plain.close()


def test_tenant_centers_recompute_after_own_writes_or_a_changed_count() -> None:
    from memroute_builtins.vectors.common import TenantCenters

    counts = {"k": 100}
    calls = []
    clock = [0.0]

    def compute(api_key_id: str):
        calls.append(api_key_id)
        return np.ones(4, dtype=np.float32) * 0.5, counts[api_key_id]

    centers = TenantCenters(compute, lambda key: counts[key], check_seconds=30, clock=lambda: clock[0])
    first = centers.get("k")
    assert first is not None and first == pytest.approx(0.5 * 100 / 110)
    centers.wrote(["k"] * 10)  # 10 % of 100: still fresh
    centers.get("k")
    assert len(calls) == 1
    centers.wrote(["k"])  # past 10 %
    centers.get("k")
    assert len(calls) == 2
    clock[0] = 31.0  # time to check the count: unchanged, so the center stays
    centers.get("k")
    assert len(calls) == 2
    counts["k"] = 150  # another process wrote
    clock[0] = 62.0
    centers.get("k")
    assert len(calls) == 3
    centers.wrote([None] * 20)  # deletes by id count against every tenant
    centers.get("k")
    assert len(calls) == 4
