"""What centred-query ranking costs in the stores that rank on a server (``pytest -m bench
tests/bench/test_centring_cost_bench.py -s``): pgvector (the tests' embedded PostgreSQL) and Qdrant (local
mode), each with ``center = true`` and ``center = false`` over the same vectors, queries interleaved. Prints
the first query of the tenant (which computes its mean) and the p50 after it; the figures on the project's
machine are in docs/performance.md. Nothing is asserted about speed; the centred and plain rankings are
checked to be different orderings of the same tenant's vectors."""

from __future__ import annotations

import os
import statistics
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from memroute.interfaces import ComponentContext, EmbeddingSignature, VectorItem, VectorStore
from memroute.models import SearchQuery
from memroute_builtins.vectors.pgvector.store import PgvectorSettings, PgvectorStore
from memroute_builtins.vectors.qdrant import QdrantSettings, QdrantStore
from tests.servers.postgres import PostgresServer, fresh_schema

pytestmark = pytest.mark.bench

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
COUNT = int(os.environ.get("MEMROUTE_BENCH_CENTRING_N", "5000"))


def test_centring_cost_in_pgvector_and_qdrant(postgres_server: PostgresServer, tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    rows = rng.standard_normal((COUNT, 256)).astype(np.float32) * 0.4 + 1.0  # a cone, as embeddings are
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    items = [VectorItem(memory_id=str(uuid.uuid4()), api_key_id="k", session_id=None, created_at=NOW,
                        expires_at=None, vector=v) for v in rows]
    probes = rows[rng.choice(COUNT, 60)] + 0.1 * rng.standard_normal((60, 256)).astype(np.float32)
    signature = EmbeddingSignature(source="bench", model="cone", dimensions=256)
    context = ComponentContext(instance_name="v", data_dir=tmp_path)
    schema = fresh_schema(postgres_server)
    stores: dict[str, VectorStore] = {}
    for center in (True, False):
        stores[f"pgvector center={center}"] = PgvectorStore(
            PgvectorSettings(dsn=postgres_server.dsn(), schema=schema, pool_max_size=2, center=center), context)
        stores[f"qdrant center={center}"] = QdrantStore(QdrantSettings(location=":memory:", center=center), context)
    try:
        for name, store in stores.items():
            store.bind(signature)
            if name.startswith("qdrant") or name.endswith("True"):  # the two pgvector stores share one table
                store.upsert(items)
        query = SearchQuery(api_key_id="k", now=NOW)
        first, times, orders = {}, {name: [] for name in stores}, {}
        for name, store in stores.items():
            started = time.perf_counter()
            orders[name] = [hit.memory_id for hit in store.query(probes[0], query, 50)]
            first[name] = (time.perf_counter() - started) * 1000
        for probe in probes:
            for name, store in stores.items():
                started = time.perf_counter()
                store.query(probe, query, 50)
                times[name].append((time.perf_counter() - started) * 1000)
        for name in stores:
            print(f"{name}: first query {first[name]:.1f} ms, p50 {statistics.median(times[name]):.2f} ms")
        for engine in ("pgvector", "qdrant"):
            centred, plain = orders[f"{engine} center=True"], orders[f"{engine} center=False"]
            assert len(centred) == len(plain) == 50 and centred != plain
    finally:
        for store in stores.values():
            store.close()
        postgres_server.admin(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE', "memroute")
