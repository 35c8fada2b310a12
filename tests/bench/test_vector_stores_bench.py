"""Vector store benchmarks (``pytest -m bench tests/bench/test_vector_stores_bench.py -s``).

Per-key query latency of the small tier (vec0) and the large tier (numpy matrix over a BLOB table) against
a numpy brute-force KNN over the same matrix in the same run, the large tier's load time and memory, bytes
on disk per memory with many small tenants, and int8 recall@10 for the two scale choices. Numbers are printed; the
results on the project's machine are in docs/vectors.md.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import apsw
import numpy as np
import pytest

from memroute.interfaces import ComponentContext, EmbeddingSignature, VectorItem
from memroute.models import SearchQuery
from memroute_builtins.vectors.sqlite_vec.store import SqliteVecSettings, SqliteVecStore

pytestmark = pytest.mark.bench

DIM = 256
NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
SIG = EmbeddingSignature(source="bench", model="random", dimensions=DIM)


def _unit(rows: np.ndarray) -> np.ndarray:
    rows = rows.astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _gaussian(count: int, seed: int) -> np.ndarray:
    return _unit(np.random.default_rng(seed).standard_normal((count, DIM)))


def _embedding_like(count: int, seed: int) -> np.ndarray:
    """Anisotropic, clustered rows: a few heavy dimensions and topic clusters, as real embeddings have."""
    rng = np.random.default_rng(seed)
    spread = rng.lognormal(0.0, 0.6, DIM)
    centres = rng.standard_normal((64, DIM)) * spread
    rows = centres[rng.integers(0, 64, count)] + 0.8 * rng.standard_normal((count, DIM)) * spread
    return _unit(rows)


def _items(rows: np.ndarray, key: str) -> list[VectorItem]:
    return [VectorItem(memory_id=str(uuid.uuid4()), api_key_id=key, session_id=None, created_at=NOW,
                       expires_at=None, vector=v) for v in rows]


def _store(path: Path, **options) -> SqliteVecStore:
    store = SqliteVecStore(SqliteVecSettings(**options), ComponentContext(instance_name="bench", data_dir=path))
    store.bind(SIG)
    return store


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[int(0.95 * (len(ordered) - 1))] * 1000


def _numpy_knn(matrix: np.ndarray, probe: np.ndarray, k: int) -> np.ndarray:
    scores = matrix @ probe
    top = np.argpartition(-scores, k)[:k]
    return top[np.argsort(-scores[top])]


@pytest.mark.parametrize("quantization", ["float32", "int8"])
@pytest.mark.parametrize("per_key", [10_000, 100_000])
def test_per_key_query_latency_small_large_numpy(tmp_path: Path, per_key: int, quantization: str) -> None:
    """p50/p95 of one tenant's k=20 query on the vec0 small tier, the numpy large tier and a bare numpy
    brute force over the same matrix, interleaved per probe so machine load hits all three alike."""
    rows = _gaussian(per_key, seed=1)
    items = _items(rows, "big-tenant")
    neighbour = _items(_gaussian(2000, seed=2), "neighbour")  # another tenant in the same tables
    stores = {}
    for tier, promote_at in (("small", 10**9), ("large", 512)):
        # Plain cosine, the ranking the bare numpy brute force computes (the store's default centres the query).
        store = _store(tmp_path / tier, quantization=quantization, promote_at=promote_at, center=False)
        started = time.perf_counter()
        for start in range(0, per_key, 5000):
            store.upsert(items[start:start + 5000])
        store.upsert(neighbour)
        rate = per_key / (time.perf_counter() - started)
        print(f"\n{tier} tier: {per_key} upserts in batches of 5,000: {rate:.0f}/s", end="")
        stores[tier] = store
    query = SearchQuery(api_key_id="big-tenant", now=NOW)
    probes = _gaussian(40 if per_key > 10_000 else 100, seed=3)
    large = stores["large"]
    loads = []
    for _ in range(3):  # loading the tenant's matrix from the BLOB table: cold after clear(), three times
        large._cache.clear()
        started = time.perf_counter()
        large.query(probes[0], query, 20)
        loads.append(time.perf_counter() - started)
    cache = large._cache.stats()
    stores["small"].query(probes[0], query, 20)  # warm the page cache
    samples: dict[str, list[float]] = {"small": [], "large": [], "numpy": []}
    for probe in probes:
        for name in samples:
            started = time.perf_counter()
            if name == "numpy":
                _numpy_knn(rows, probe, 20)
            else:
                stores[name].query(probe, query, 20)
            samples[name].append(time.perf_counter() - started)
    exact = [items[i].memory_id for i in _numpy_knn(rows, probes[1], 20)]
    found = [h.memory_id for h in large.query(probes[1], query, 20)]
    if quantization == "float32":
        assert found == exact, "the large tier is exact"
    n50, _ = _percentiles(samples["numpy"])
    print(f"\n{quantization} {per_key:>7} vectors/key, k=20, {len(probes)} probes; large-tier load "
          f"{' / '.join(f'{t * 1000:.0f}' for t in loads)} ms,"
          f" matrix {cache['bytes'] / 2**20:.1f} MB ({cache['bytes'] / per_key:.0f} B/vector)")
    for name in ("small", "large", "numpy"):
        p50, p95 = _percentiles(samples[name])
        print(f"  {name:>5}: p50 {p50:8.2f} ms  p95 {p95:8.2f} ms  ratio p50 vs numpy {p50 / n50:5.2f}x")
    for store in stores.values():
        store.close()


def _file_bytes(path: Path) -> int:
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("VACUUM")
    conn.close()
    return os.path.getsize(path)


@pytest.mark.parametrize("chunk_size", [8, 16, 64])
@pytest.mark.parametrize("quantization", ["float32", "int8"])
def test_bytes_per_memory_with_many_small_tenants(tmp_path: Path, quantization: str, chunk_size: int) -> None:
    tenants, per_tenant = 1000, 20
    store = _store(tmp_path, quantization=quantization, chunk_size=chunk_size)
    rows = _gaussian(tenants * per_tenant, seed=4)
    started = time.perf_counter()
    for tenant in range(tenants):
        key = f"key-{uuid.uuid4()}"  # realistic key length (40 characters)
        store.upsert(_items(rows[tenant * per_tenant:(tenant + 1) * per_tenant], key))
    elapsed = time.perf_counter() - started
    store.close()
    size = _file_bytes(tmp_path / "vectors.db")
    print(f"\n{quantization} chunk_size={chunk_size}: {size / 1e6:.1f} MB for {tenants} x {per_tenant} -> "
          f"{size / (tenants * per_tenant):.0f} bytes/memory; upserts {tenants * per_tenant / elapsed:.0f}/s")


def _recall(store: SqliteVecStore, rows: np.ndarray, items: list[VectorItem], probes: np.ndarray) -> float:
    query = SearchQuery(api_key_id="k", now=NOW)
    found = 0
    for probe in probes:
        exact = {items[i].memory_id for i in _numpy_knn(rows, probe, 10)}
        found += len(exact & {h.memory_id for h in store.query(probe, query, 10)})
    return found / (10 * len(probes))


@pytest.mark.parametrize("data", ["gaussian", "embedding-like"])
def test_int8_recall_by_scale(tmp_path: Path, data: str) -> None:
    make = _gaussian if data == "gaussian" else _embedding_like
    rows, probes = make(10_000, seed=5), make(200, seed=6)
    items = _items(rows, "k")
    results = {}
    for calibration in ("auto", "unit"):
        store = _store(tmp_path / calibration, quantization="int8", int8_calibration=calibration)
        store.upsert(items)
        results[calibration] = (_recall(store, rows, items, probes), store.describe()["int8_scale"])
        store.close()
    print(f"\nint8 recall@10 on {data} data: " + ", ".join(
        f"{name} (scale {scale:.0f}) {recall:.3f}" for name, (recall, scale) in results.items()))
