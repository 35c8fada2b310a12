"""Vector store benchmarks (``pytest -m bench tests/bench/test_vector_stores_bench.py -s``).

Per-key query latency against a numpy brute-force KNN over the same matrix in the same run, bytes on disk
per memory with many small tenants, and int8 recall@10 for the two scale choices. Numbers are printed; the
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
from memroute_builtins.sqlite_vec_store import SqliteVecSettings, SqliteVecStore

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


@pytest.mark.parametrize("per_key,quantization,tier", [
    (10_000, "float32", "large"), (10_000, "int8", "large"), (10_000, "float32", "small"),
    (100_000, "float32", "large"), (100_000, "int8", "large"),
])
def test_per_key_query_latency_vs_numpy(tmp_path: Path, per_key: int, quantization: str, tier: str) -> None:
    # "small" keeps the tenant in the 8-slot-chunk table, to show what the large-chunk tier buys.
    store = _store(tmp_path, quantization=quantization, promote_at=512 if tier == "large" else 10**9)
    rows = _gaussian(per_key, seed=1)
    for start in range(0, per_key, 5000):
        store.upsert(_items(rows[start:start + 5000], "big-tenant"))
    store.upsert(_items(_gaussian(2000, seed=2), "neighbour"))  # another tenant in the same table
    probes = _gaussian(60, seed=3)
    query = SearchQuery(api_key_id="big-tenant", now=NOW)
    store.query(probes[0], query, 20)  # warm the page cache
    ours, brute = [], []
    for probe in probes:
        started = time.perf_counter()
        store.query(probe, query, 20)
        ours.append(time.perf_counter() - started)
        started = time.perf_counter()
        _numpy_knn(rows, probe, 20)
        brute.append(time.perf_counter() - started)
    p50, p95 = _percentiles(ours)
    n50, n95 = _percentiles(brute)
    print(f"\nsqlite-vec {quantization} {tier}-chunk tier {per_key:>7} vectors/key: "
          f"p50 {p50:.2f} ms p95 {p95:.2f} ms | "
          f"numpy p50 {n50:.2f} ms p95 {n95:.2f} ms | ratio p50 {p50 / n50:.1f}x")
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
