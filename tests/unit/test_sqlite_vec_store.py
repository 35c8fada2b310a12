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
from memroute.db import open_connection
from memroute.errors import ConfigError, VectorStoreError
from memroute.interfaces import ComponentContext, EmbeddingSignature, VectorItem
from memroute.models import SearchQuery
from memroute_builtins.sqlite_vec_store import SqliteVecSettings, SqliteVecStore

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
SIG = EmbeddingSignature(source="t", model="m", dimensions=64)


def _rows(count: int, dim: int = 64, seed: int = 0) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((count, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _items(rows: np.ndarray, key: str = "k") -> list[VectorItem]:
    return [VectorItem(memory_id=str(uuid.uuid4()), api_key_id=key, session_id=None, created_at=NOW,
                       expires_at=None, vector=v) for v in rows]


def _store(tmp_path: Path, **options) -> SqliteVecStore:
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
                                     {"int8_calibration": "max"}, {"path": ":memory:"}, {"bogus": 1}])
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


def test_a_growing_tenant_moves_to_the_large_chunk_table(tmp_path: Path) -> None:
    store = _store(tmp_path, chunk_size=8, large_chunk_size=64, promote_at=10)
    store.bind(SIG)
    big, small = _items(_rows(8), "big"), _items(_rows(3, seed=1), "small")
    store.upsert(big + small)
    conn = store._pool.get()
    assert conn.execute("SELECT count(*) FROM memroute_vec_large_rowids").fetchone()[0] == 0
    more = _items(_rows(5, seed=2), "big")
    store.upsert(more)  # 13 > 10: "big" moves, "small" stays
    tiers = dict(conn.execute("SELECT api_key_id, max(tier) FROM memroute_vec_ids GROUP BY 1").fetchall())
    assert tiers == {"big": 1, "small": 0}
    assert conn.execute("SELECT count(*) FROM memroute_vec_large_rowids").fetchone()[0] == 13
    assert conn.execute("SELECT count(*) FROM memroute_vec_rowids").fetchone()[0] == 3
    rows = _rows(8)
    assert store.query(rows[3], SearchQuery(api_key_id="big", now=NOW), 1)[0].memory_id == big[3].memory_id
    assert len(store.query(rows[3], SearchQuery(api_key_id="big", now=NOW), 50)) == 13
    assert len(store.query(rows[3], SearchQuery(api_key_id="small", now=NOW), 50)) == 3
    store.delete([big[0].memory_id])
    store.upsert([attrs.evolve(big[1], api_key_id="small")])  # moves back to a small-table tenant
    assert store.count("big") == 11 and store.count("small") == 4
    assert {h.memory_id for h in store.query(rows[1], SearchQuery(api_key_id="small", now=NOW), 50)} == {
        big[1].memory_id, *(i.memory_id for i in small)}
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
