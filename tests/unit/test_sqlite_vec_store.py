"""sqlite-vec store specifics the contract does not cover: schema, meta table, int8 calibration, loading."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from pathlib import Path

import apsw
import attrs
import numpy as np
import pytest

from memroute.components import build_component, make_context
from memroute.deployment.db import open_connection
from memroute.errors import ConfigError, VectorStoreError
from memroute.interfaces import ComponentContext, EmbeddingSignature, VectorItem
from memroute.models import SearchQuery
from memroute_builtins.vectors.sqlite_vec.store import SqliteVecSettings, SqliteVecStore

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
SIG = EmbeddingSignature(source="t", model="m", dimensions=64)


def _rows(count: int, dim: int = 64, seed: int = 0) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((count, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _items(rows: np.ndarray, key: str = "k") -> list[VectorItem]:
    return [VectorItem(memory_id=str(uuid.uuid4()), api_key_id=key, session_id=None, created_at=NOW,
                       expires_at=None, vector=v) for v in rows]


def _store(tmp_path: Path, **options) -> SqliteVecStore:
    # These tests check the tiers against plain-cosine brute force; centring and the hub penalty have their own
    # (test_vector_centering, test_hub_penalty).
    options.setdefault("center", False)
    options.setdefault("hub_penalty", 0.0)
    return SqliteVecStore(SqliteVecSettings(**options), ComponentContext(instance_name="v", data_dir=tmp_path))


def _meta(tmp_path: Path) -> dict[str, str]:
    conn = apsw.Connection(str(tmp_path / "vectors.db"))
    try:
        return dict(conn.execute("SELECT key, value FROM memroute_vec_meta").fetchall())
    finally:
        conn.close()


def test_registered_and_built_from_options(plugin_manager, tmp_path: Path) -> None:
    assert "sqlite-vec" in plugin_manager.vector_stores()
    store = build_component(plugin_manager, "vector-store", "sqlite-vec", {"path": str(tmp_path / "v.db"),
                                                                           "chunk_size": 32},
                            context=make_context(plugin_manager, "sqlite-vec", tmp_path), path="vectors")
    try:
        assert isinstance(store, SqliteVecStore) and store.path == tmp_path / "v.db"
        assert store.bind(SIG) is True
    finally:
        store.close()


@pytest.mark.parametrize("options", [{"chunk_size": 12}, {"chunk_size": 0}, {"quantization": "int4"},
                                     {"int8_calibration": "max"}, {"path": ":memory:"}, {"bogus": 1},
                                     {"cache_max_mb": -1}, {"large_chunk_size": 256}])
def test_bad_options_are_config_errors(plugin_manager, tmp_path: Path, options) -> None:
    with pytest.raises(ConfigError):
        build_component(plugin_manager, "vector-store", "sqlite-vec", options,
                        context=make_context(plugin_manager, "sqlite-vec", tmp_path), path="vectors")


def test_prepare_connection_hook_loads_sqlite_vec(plugin_manager, tmp_path: Path) -> None:
    conn = open_connection(tmp_path / "any.db", prepare=plugin_manager.prepare_connection)
    try:
        assert conn.execute("SELECT vec_version()").fetchone()[0].startswith("v")
        with pytest.raises(apsw.Error):  # loading stays disabled after the hook
            conn.execute("SELECT load_extension('/nonexistent')").fetchall()
    finally:
        conn.close()


def test_schema_is_partitioned_with_a_small_chunk_and_meta_recorded(tmp_path: Path) -> None:
    store = _store(tmp_path, chunk_size=8)
    store.bind(SIG)
    store.upsert(_items(_rows(20)))
    conn = store._pool.get()
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'memroute_vec'").fetchone()[0]
    assert "api_key_id TEXT PARTITION KEY" in sql and "chunk_size=8" in sql and "distance_metric=cosine" in sql
    # 20 vectors in 8-slot chunks: 3 chunks, not one 1,024-slot chunk.
    assert conn.execute("SELECT count(*), sum(size) FROM memroute_vec_chunks").fetchone() == (3, 24)
    store.close()
    meta = _meta(tmp_path)
    assert meta["signature"] == str(SIG) and meta["dimensions"] == "64" and meta["chunk_size"] == "8"
    assert meta["quantization"] == "float32" and meta["int8_scale"] == ""


def test_a_growing_tenant_moves_to_the_large_tier(tmp_path: Path) -> None:
    store = _store(tmp_path, chunk_size=8, promote_at=10)
    store.bind(SIG)
    big, small = _items(_rows(8), "big"), _items(_rows(3, seed=1), "small")
    store.upsert(big + small)
    conn = store._pool.get()
    assert conn.execute("SELECT count(*) FROM memroute_vec_large").fetchone()[0] == 0
    more = _items(_rows(5, seed=2), "big")
    store.upsert(more)  # 13 > 10: "big" moves, "small" stays
    tiers = dict(conn.execute("SELECT api_key_id, max(tier) FROM memroute_vec_ids GROUP BY 1").fetchall())
    assert tiers == {"big": 1, "small": 0}
    assert conn.execute("SELECT api_key_id FROM memroute_vec_tenants").fetchall() == [("big",)]
    assert conn.execute("SELECT count(*) FROM memroute_vec_large WHERE api_key_id = 'big'").fetchone()[0] == 13
    assert conn.execute("SELECT count(*) FROM memroute_vec_rowids").fetchone()[0] == 3
    # The moved blobs are the vectors' raw float32 bytes.
    blob = conn.execute("SELECT vector FROM memroute_vec_large l JOIN memroute_vec_ids i ON i.rowid = l.rowid"
                        " WHERE i.memory_id = ?", (uuid.UUID(big[3].memory_id).bytes,)).fetchone()[0]
    assert np.frombuffer(blob, dtype=np.float32) == pytest.approx(_rows(8)[3], abs=1e-6)
    rows = _rows(8)
    assert store.query(rows[3], SearchQuery(api_key_id="big", now=NOW), 1)[0].memory_id == big[3].memory_id
    assert len(store.query(rows[3], SearchQuery(api_key_id="big", now=NOW), 50)) == 13
    assert len(store.query(rows[3], SearchQuery(api_key_id="small", now=NOW), 50)) == 3
    store.delete([big[0].memory_id])
    store.upsert([attrs.evolve(big[1], api_key_id="small")])  # moves to a small-tier tenant
    assert store.count("big") == 11 and store.count("small") == 4
    assert {h.memory_id for h in store.query(rows[1], SearchQuery(api_key_id="small", now=NOW), 50)} == {
        big[1].memory_id, *(i.memory_id for i in small)}
    assert {h.memory_id for h in store.query(rows[1], SearchQuery(api_key_id="big", now=NOW), 50)} == {
        i.memory_id for i in big[2:] + more}
    store.close()


def test_each_tenant_gets_its_own_chunks(tmp_path: Path) -> None:
    store = _store(tmp_path, chunk_size=8)
    store.bind(SIG)
    store.upsert(_items(_rows(3), "a") + _items(_rows(3, seed=1), "b"))
    owners = store._pool.get().execute("SELECT partition00 FROM memroute_vec_chunks ORDER BY 1").fetchall()
    assert owners == [("a",), ("b",)]
    store.close()


def test_quantization_follows_the_signature_unless_set(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert store.bind(SIG.with_quantization("int8")) is True
    store.upsert(_items(_rows(40)))
    store.close()
    assert _meta(tmp_path)["quantization"] == "int8"
    store = _store(tmp_path, quantization="float32")
    assert store.bind(SIG.with_quantization("int8")) is False, "a store option change rebuilds the index"
    assert store.count() == 0
    store.close()


def test_binary_is_refused_with_a_pointer_to_qdrant(tmp_path: Path) -> None:
    store = _store(tmp_path)
    with pytest.raises(VectorStoreError, match="qdrant"):
        store.bind(SIG.with_quantization("binary"))
    store.close()


def test_int8_scale_is_calibrated_once_and_stored(tmp_path: Path) -> None:
    store = _store(tmp_path, quantization="int8")
    store.bind(SIG)
    rows = _rows(100)
    store.upsert(_items(rows))
    scale = float(_meta(tmp_path)["int8_scale"])
    assert 127 / np.abs(rows).max() <= scale <= 127 / np.quantile(np.abs(rows), 0.99)
    store.upsert(_items(_rows(100, seed=3)))
    assert float(_meta(tmp_path)["int8_scale"]) == scale, "the scale never changes under stored vectors"
    store.close()
    store = _store(tmp_path, quantization="int8")
    assert store.bind(SIG) is True and store.describe()["int8_scale"] == scale
    store.close()


def test_unit_calibration_is_available_and_recorded(tmp_path: Path) -> None:
    store = _store(tmp_path, quantization="int8", int8_calibration="unit")
    store.bind(SIG)
    store.close()
    assert float(_meta(tmp_path)["int8_scale"]) == 127.0


def _recall_at_10(store: SqliteVecStore, rows: np.ndarray, items: list[VectorItem], probes: np.ndarray) -> float:
    found = 0
    for probe in probes:
        exact = {items[i].memory_id for i in np.argsort(-(rows @ probe))[:10]}
        found += len(exact & {h.memory_id for h in store.query(probe, SearchQuery(api_key_id="k", now=NOW), 10)})
    return found / (10 * len(probes))


def test_calibrated_int8_recalls_better_than_unit_scale(tmp_path: Path) -> None:
    dim = 256
    rows, probes = _rows(1000, dim, seed=5), _rows(30, dim, seed=6)
    items = _items(rows)
    recalls = {}
    for calibration in ("auto", "unit"):
        store = _store(tmp_path / calibration, quantization="int8", int8_calibration=calibration)
        store.bind(EmbeddingSignature(source="t", model="m", dimensions=dim))
        store.upsert(items)
        recalls[calibration] = _recall_at_10(store, rows, items, probes)
        store.close()
    assert recalls["auto"] >= 0.9, recalls
    assert recalls["auto"] > recalls["unit"], recalls


def test_threads_share_the_store(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    store = _store(tmp_path)
    store.bind(SIG)

    def write(seed: int) -> None:
        store.upsert(_items(_rows(25, seed=seed), f"tenant-{seed}"))

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(write, range(8)))
    assert store.count() == 200 and all(store.count(f"tenant-{s}") == 25 for s in range(8))
    store.close()


def test_int8_scale_set_by_another_connection_is_picked_up(tmp_path: Path) -> None:
    reader, writer = _store(tmp_path, quantization="int8"), _store(tmp_path, quantization="int8")
    reader.bind(SIG)
    writer.bind(SIG)
    rows = _rows(40)
    items = _items(rows)
    writer.upsert(items)
    assert reader.query(rows[0], SearchQuery(api_key_id="k", now=NOW), 1)[0].memory_id == items[0].memory_id
    more = _items(_rows(3, seed=9))
    reader.upsert(more)  # must quantise with the writer's scale, not calibrate a second one
    assert reader.describe()["int8_scale"] == writer.describe()["int8_scale"]
    reader.close()
    writer.close()


# --- the large tier: numpy matrices over a BLOB table --------------------------------------------------

def _exact(rows: np.ndarray, items: list[VectorItem], probe: np.ndarray, query: SearchQuery, k: int):
    """Brute force over the admitted items: the reference the large tier must equal."""
    admitted = [i for i, it in enumerate(items) if it.api_key_id == query.api_key_id and (
        it.expires_at is None or it.expires_at > query.now) and (
        query.session_id is None or it.session_id == query.session_id) and (
        query.created_after is None or it.created_at >= query.created_after)]
    scores = rows[admitted] @ probe
    order = np.argsort(-scores, kind="stable")[:k]
    return [items[admitted[i]].memory_id for i in order], [float(scores[i]) for i in order]


def _varied_items(rows: np.ndarray, key: str = "k") -> list[VectorItem]:
    """Items with sessions, expiries and creation times spread around NOW."""
    from datetime import timedelta

    out = []
    for i, vector in enumerate(rows):
        out.append(VectorItem(memory_id=str(uuid.uuid4()), api_key_id=key,
                              session_id=None if i % 3 == 0 else f"s{i % 3}",
                              created_at=NOW - timedelta(days=i % 40),
                              expires_at=None if i % 4 else NOW + timedelta(hours=(i % 7) - 3), vector=vector))
    return out


@pytest.mark.parametrize("filters", [{}, {"session_id": "s1"}, {"session_id": "nope"}, {"retention_days": 10},
                                     {"session_id": "s2", "retention_days": 20}])
def test_large_tier_equals_brute_force_with_filters(tmp_path: Path, filters) -> None:
    rows = _rows(600, seed=11)
    items = _varied_items(rows) + _items(_rows(50, seed=12), "other")
    store = _store(tmp_path, promote_at=8)
    store.bind(SIG)
    store.upsert(items)
    assert store._tier_of(store._pool.get(), "k") == 1
    query = SearchQuery(api_key_id="k", now=NOW, **filters)
    for probe in _rows(5, seed=13):
        for k in (1, 10, 400):
            hits = store.query(probe, query, k)
            ids, scores = _exact(rows, items[:600], probe, query, k)
            assert [h.memory_id for h in hits] == ids
            assert [h.score for h in hits] == pytest.approx(scores, abs=1e-5)
    store.close()


def test_large_tier_matrix_follows_own_writes_without_reloading(tmp_path: Path) -> None:
    store = _store(tmp_path, promote_at=8)
    store.bind(SIG)
    rows = _rows(100, seed=1)
    items = _items(rows)
    store.upsert(items[:50])
    q = SearchQuery(api_key_id="k", now=NOW)
    store.query(rows[0], q, 5)
    loads = store._cache.loads
    store.upsert(items[50:])                      # appends (grows past the loaded capacity)
    store.delete([items[0].memory_id, items[77].memory_id])  # swap-removes
    fresh = _rows(1, seed=99)[0]
    moved = attrs.evolve(items[5], vector=fresh)          # re-upsert: replace in place
    store.upsert([moved, attrs.evolve(items[6], api_key_id="elsewhere")])
    keep = [i for i in range(100) if i not in (0, 6, 77)]
    live = [items[i] for i in keep]
    vectors = np.stack([fresh if i == 5 else rows[i] for i in keep])
    for probe in (rows[0], rows[77], fresh, rows[5], rows[6]):
        ids, scores = _exact(vectors, live, probe, q, 20)
        hits = store.query(probe, q, 20)
        assert [h.memory_id for h in hits] == ids and [h.score for h in hits] == pytest.approx(scores, abs=1e-5)
    assert store._cache.loads == loads, "own writes are replayed on the matrix, not reloaded"
    assert store.count("k") == 97 and store.query(rows[6], SearchQuery(api_key_id="elsewhere", now=NOW), 1)
    store.close()


def test_another_writer_on_the_same_file_invalidates_the_matrix(tmp_path: Path) -> None:
    a, b = _store(tmp_path, promote_at=8), _store(tmp_path, promote_at=8)
    a.bind(SIG)
    b.bind(SIG)
    rows = _rows(60, seed=2)
    items = _items(rows)
    a.upsert(items[:30])
    q = SearchQuery(api_key_id="k", now=NOW)
    assert a.query(rows[0], q, 1)[0].memory_id == items[0].memory_id   # a's matrix is loaded
    b.upsert(items[30:40])                                              # another "process" writes
    b.delete([items[0].memory_id])
    assert a.query(rows[35], q, 1)[0].memory_id == items[35].memory_id
    assert items[0].memory_id not in {h.memory_id for h in a.query(rows[0], q, 50)}
    # b writes, then a writes: a's matrix must not replay its delta on top of a stale matrix.
    b.upsert(items[40:50])
    a.upsert(items[50:])
    ids = {h.memory_id for h in a.query(rows[0], q, 100)}
    assert ids == {it.memory_id for it in items[1:]}
    assert {h.memory_id for h in b.query(rows[0], q, 100)} == ids
    a.close()
    b.close()


def test_another_process_writing_is_seen(tmp_path: Path) -> None:
    import subprocess
    import sys

    store = _store(tmp_path, promote_at=8)
    store.bind(SIG)
    rows = _rows(30, seed=3)
    items = _items(rows)
    store.upsert(items[:20])
    q = SearchQuery(api_key_id="k", now=NOW)
    assert len(store.query(rows[0], q, 100)) == 20
    script = f"""
import uuid
from datetime import datetime, timezone
from pathlib import Path
import numpy as np
from memroute.interfaces import ComponentContext, EmbeddingSignature, VectorItem
from memroute_builtins.vectors.sqlite_vec.store import SqliteVecSettings, SqliteVecStore
context = ComponentContext(instance_name="v", data_dir=Path({str(tmp_path)!r}))
store = SqliteVecStore(SqliteVecSettings(promote_at=8), context)
assert store.bind(EmbeddingSignature(source="t", model="m", dimensions=64))
rows = np.random.default_rng(3).standard_normal((30, 64)).astype(np.float32)
now = datetime.now(timezone.utc)
store.upsert([VectorItem(memory_id=str(uuid.uuid4()), api_key_id="k", session_id=None, created_at=now,
                         expires_at=None, vector=rows[i]) for i in range(20, 30)])
store.delete({[it.memory_id for it in items[:5]]!r})
store.close()
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    hits = store.query(rows[25], q, 100)
    assert len(hits) == 25 and hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert not {it.memory_id for it in items[:5]} & {h.memory_id for h in hits}
    store.close()


def test_cache_is_bounded_lru_and_evicted_tenants_reload(tmp_path: Path) -> None:
    # One 64-d tenant of 400 rows holds 159 KB (397 B a row, 93 of them the id text): a 0.35 MB budget keeps
    # two of three.
    store = _store(tmp_path, promote_at=8, cache_max_mb=0.35)
    store.bind(SIG)
    data = {key: (_rows(400, seed=s), None) for s, key in enumerate(("a", "b", "c"))}
    data = {key: (rows, _items(rows, key)) for key, (rows, _) in data.items()}
    for _, items in data.values():
        store.upsert(items)
    for key in ("a", "b", "c", "a"):
        rows, items = data[key]
        assert store.query(rows[7], SearchQuery(api_key_id=key, now=NOW), 1)[0].memory_id == items[7].memory_id
    stats = store._cache.stats()
    assert stats["tenants"] == 2 and stats["bytes"] <= stats["max_bytes"] and stats["loads"] == 4
    assert store._cache.peek("b") is None, "b was least recently used"
    store.close()


def test_the_caches_running_total_follows_growth_eviction_and_discard(tmp_path: Path) -> None:
    store = _store(tmp_path, promote_at=8, cache_max_mb=0.3)
    store.bind(SIG)
    data = {}
    for s, key in enumerate(("a", "b", "c", "d")):
        rows = _rows(100 + 50 * s, seed=s)
        data[key] = (rows, _items(rows, key))
        store.upsert(data[key][1])
        store.query(rows[0], SearchQuery(api_key_id=key, now=NOW), 1)  # load: accounted
    more = _rows(120, seed=9)
    store.upsert(_items(more, "d"))  # write-through growth of a cached tenant: accounted again
    cache = store._cache
    assert cache._total == sum(m.nbytes for m in cache._entries.values()) <= cache.max_bytes
    assert set(cache._accounted) == set(cache._entries)
    cache.discard(next(iter(cache._entries)))
    assert cache._total == sum(m.nbytes for m in cache._entries.values())
    store.close()


def test_a_tenant_larger_than_the_cache_is_searched_without_being_kept(tmp_path: Path) -> None:
    store = _store(tmp_path, promote_at=8, cache_max_mb=0.01)
    store.bind(SIG)
    rows = _rows(300)
    items = _items(rows)
    store.upsert(items)
    for i in (3, 200):
        assert store.query(rows[i], SearchQuery(api_key_id="k", now=NOW), 1)[0].memory_id == items[i].memory_id
    assert store._cache.stats()["tenants"] == 0 and store._cache.loads == 2
    store.close()


def test_int8_large_tier_recalls_at_least_as_well_as_vec0(tmp_path: Path) -> None:
    dim = 256
    rows, probes = _rows(1000, dim, seed=5), _rows(30, dim, seed=6)
    items = _items(rows)
    recalls = {}
    for tier, promote_at in (("vec0", 10**6), ("matrix", 8)):
        store = _store(tmp_path / tier, quantization="int8", promote_at=promote_at)
        store.bind(EmbeddingSignature(source="t", model="m", dimensions=dim))
        store.upsert(items)
        assert store._tier_of(store._pool.get(), "k") == (1 if tier == "matrix" else 0)
        recalls[tier] = _recall_at_10(store, rows, items, probes)
        hit = store.query(rows[0], SearchQuery(api_key_id="k", now=NOW), 1)[0]
        assert hit.memory_id == items[0].memory_id and hit.score == pytest.approx(1.0, abs=0.01)
        store.close()
    assert recalls["matrix"] >= recalls["vec0"] - 0.01 and recalls["matrix"] >= 0.9, recalls


def test_concurrent_queries_and_writes_on_a_large_tenant(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    store = _store(tmp_path, promote_at=8)
    store.bind(SIG)
    rows = _rows(400, seed=8)
    items = _items(rows)
    store.upsert(items[:200])
    q = SearchQuery(api_key_id="k", now=NOW)

    def write(i: int) -> None:
        store.upsert(items[200 + 10 * i:210 + 10 * i])
        store.delete([items[i].memory_id])

    def read(i: int) -> None:
        hits = store.query(rows[100 + i], q, 10)
        assert hits[0].memory_id == items[100 + i].memory_id
        assert len({h.memory_id for h in hits}) == len(hits) == 10

    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(write, i) for i in range(20)] + [pool.submit(read, i) for i in range(60)]
        for future in futures:
            future.result()
    expected = {it.memory_id for it in items[20:]}
    assert {h.memory_id for h in store.query(rows[0], q, 1000)} == expected and store.count("k") == 380
    store.close()


def test_an_index_of_the_older_schema_is_rebuilt(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.bind(SIG)
    store.upsert(_items(_rows(5)))
    store._pool.get().execute("UPDATE memroute_vec_meta SET value = '2' WHERE key = 'schema_version'")
    store.close()
    store = _store(tmp_path)
    assert store.signature() is None
    assert store.bind(SIG) is False, "an index of schema 2 (vec0 large tier) is rebuilt, so reindex runs"
    assert store.count() == 0
    store.close()


def test_a_write_loads_the_large_tenant_so_its_first_search_does_not(tmp_path: Path) -> None:
    """A bulk import (several indexer batches) or a write after a restart loads the tenant's matrix in the writer:
    the first search finds it ready (no load) and exact over every row, old and new."""
    store = _store(tmp_path, promote_at=8)
    store.bind(SIG)
    rows = _rows(90, seed=3)
    items = _items(rows)
    q = SearchQuery(api_key_id="k", now=NOW)
    store.upsert(items[:30])  # promoted to the large tier inside this write
    store.upsert(items[30:60])  # the first write to a large tenant not cached: loads it, then keeps it current
    assert store._cache.peek("k") is not None and store._cache.loads == 1
    ids, scores = _exact(rows[:60], items[:60], rows[44], q, 10)
    hits = store.query(rows[44], q, 10)
    assert [h.memory_id for h in hits] == ids and [h.score for h in hits] == pytest.approx(scores, abs=1e-5)
    assert store._cache.loads == 1, "the search found the matrix the write loaded"
    store.close()
    # A new process (nothing cached): its first write loads the whole tenant, not only the rows it wrote.
    again = _store(tmp_path, promote_at=8)
    again.bind(SIG)
    again.upsert(items[60:])
    ids, scores = _exact(rows, items, rows[3], q, 10)
    hits = again.query(rows[3], q, 10)
    assert [h.memory_id for h in hits] == ids and [h.score for h in hits] == pytest.approx(scores, abs=1e-5)
    assert again._cache.loads == 1
    # Another tenant's search never sees these rows.
    assert again.query(rows[3], SearchQuery(api_key_id="other", now=NOW), 10) == []
    again.close()


def test_a_write_loads_a_tenant_only_into_free_room(tmp_path: Path) -> None:
    """Loading on write never evicts: a tenant that searches keep warm stays, a tenant that is only written to
    is loaded by its first search instead."""
    store = _store(tmp_path, promote_at=8, cache_max_mb=0.2)  # room for one 400-row tenant (159 KB), not two
    store.bind(SIG)
    searched, written = _rows(400, seed=4), _rows(400, seed=5)
    store.upsert(_items(searched, "a"))
    store.query(searched[0], SearchQuery(api_key_id="a", now=NOW), 1)
    cached = store._cache.peek("a")
    written_items = _items(written, "b")
    store.upsert(written_items[:200])
    store.upsert(written_items[200:])
    assert store._cache.peek("a") is cached and store._cache.peek("b") is None
    assert store._cache.evictions == 0
    hit = store.query(written[9], SearchQuery(api_key_id="b", now=NOW), 1)[0]
    assert hit.memory_id == written_items[9].memory_id
    store.close()
