"""The pgvector store beyond the contract, on a real PostgreSQL: k results for a small tenant even when the HNSW
scan gives up among another tenant's neighbours, the signature rule across processes, configuration errors,
and the whole service on postgres + pgvector."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

import memroute
from memroute.errors import ConfigError, VectorStoreError
from memroute.interfaces import ComponentContext, EmbeddingSignature, VectorItem
from memroute.models import SearchQuery
from memroute_builtins.vectors.pgvector.store import PgvectorSettings, PgvectorStore
from tests.servers.postgres import PostgresServer

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
SIGNATURE = EmbeddingSignature(source="test", model="random", dimensions=48)


def _store(server: PostgresServer, schema: str, tmp_path: Path, **options: object) -> PgvectorStore:
    settings = PgvectorSettings(dsn=server.dsn(), schema=schema, pool_max_size=2, **options)  # type: ignore[arg-type]
    return PgvectorStore(settings, ComponentContext(instance_name="pgvector", data_dir=tmp_path))


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def _items(vectors: np.ndarray, tenant: str) -> list[VectorItem]:
    return [VectorItem(memory_id=str(uuid.uuid4()), api_key_id=tenant, session_id=None, created_at=NOW,
                       expires_at=None, vector=v) for v in vectors]


def test_a_small_tenant_gets_k_results_when_the_index_scan_gives_up(postgres_server: PostgresServer, schema: str,
                                                                     tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    probe = _unit(rng.standard_normal((1, 48)))[0]
    # 2,000 of the crowd's vectors sit right around the probe; the small tenant's 40 are anywhere. An HNSW scan
    # allowed to visit only 100 tuples meets nothing but the crowd. The planner would pick the owner index for
    # so few rows by itself; a role that may not sort makes it take HNSW (what it does for larger tenants), so
    # the exact per-tenant query has to make up the difference.
    postgres_server.admin("DO $$ BEGIN CREATE ROLE memroute_hnsw LOGIN; EXCEPTION WHEN duplicate_object THEN "
                          "NULL; END $$")
    postgres_server.admin("ALTER ROLE memroute_hnsw SET enable_sort = off")
    postgres_server.admin("GRANT CREATE ON DATABASE memroute TO memroute_hnsw")
    crowd = _unit(probe + 0.02 * rng.standard_normal((2000, 48)))
    small = _unit(rng.standard_normal((40, 48)))
    # Plain cosine, to compare with brute force (centred ranking has its own test below).
    settings = PgvectorSettings(dsn=postgres_server.dsn("memroute_hnsw"), schema=schema, max_scan_tuples=100,
                                ef_search=10, center=False)
    store = PgvectorStore(settings, ComponentContext(instance_name="pgvector", data_dir=tmp_path))
    try:
        store.bind(SIGNATURE)
        mine = _items(small, "small")
        store.upsert(_items(crowd, "crowd") + mine)
        postgres_server.admin(f'ANALYZE "{schema}".memory_vectors', "memroute")
        hits = store.query(probe, SearchQuery(api_key_id="small", now=NOW), 10)
        assert len(hits) == 10, "the small tenant must get k results however crowded the index is"
        expected = sorted(((float(np.dot(probe, v)), i.memory_id) for i, v in zip(mine, small, strict=True)),
                          reverse=True)[:10]
        assert [h.memory_id for h in hits] == [m for _s, m in expected], "exactly the tenant's 10 nearest"
        assert len(store.query(probe, SearchQuery(api_key_id="crowd", now=NOW), 10)) == 10
    finally:
        store.close()


def test_an_index_rebound_by_another_process_is_never_queried(postgres_server: PostgresServer, schema: str,
                                                              tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    first = _store(postgres_server, schema, tmp_path)
    second = _store(postgres_server, schema, tmp_path)  # another memroute process on the same database
    try:
        first.bind(SIGNATURE)
        vectors = _unit(rng.standard_normal((5, 48)))
        first.upsert(_items(vectors, "a"))
        assert len(first.query(vectors[0], SearchQuery(api_key_id="a", now=NOW), 3)) == 3
        other_model = EmbeddingSignature(source="test", model="another", dimensions=48)
        assert second.bind(other_model) is False  # reset: the other process now owns the index
        second.upsert(_items(vectors, "a"))
        with pytest.raises(VectorStoreError, match="re-bound"):
            first.query(vectors[0], SearchQuery(api_key_id="a", now=NOW), 3)
        with pytest.raises(VectorStoreError, match="re-bound"):
            first.upsert(_items(vectors[:1], "a"))
        assert not first.health().ok and second.health().ok
        wider = EmbeddingSignature(source="test", model="wide", dimensions=96)
        second.bind(wider)
        with pytest.raises(VectorStoreError):
            first.query(vectors[0], SearchQuery(api_key_id="a", now=NOW), 3)
    finally:
        first.close()
        second.close()


def test_pgvector_needs_a_dsn_unless_the_primary_is_postgres(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="dsn"):
        memroute.open({"embedding": {"source": "static"}, "vectors": {"store": "pgvector"}})
    with pytest.raises(ConfigError, match="quantization"):
        memroute.open({"embedding": {"source": "static"},
                       "vectors": {"store": "pgvector", "quantization": "binary"}})


def test_too_many_dimensions_for_hnsw_is_a_clear_error(postgres_server: PostgresServer, schema: str,
                                                       tmp_path: Path) -> None:
    store = _store(postgres_server, schema, tmp_path)
    try:
        with pytest.raises(VectorStoreError, match="1 to 2000 dimensions"):
            store.bind(EmbeddingSignature(source="test", model="huge", dimensions=3072))
    finally:
        store.close()


def test_the_service_on_postgres_and_pgvector(postgres_server: PostgresServer, schema: str) -> None:
    config = {"backends": {"primary": "main", "main": {"type": "postgres", "dsn": postgres_server.dsn(),
                                                       "schema": schema}},
              "embedding": {"source": "static"}, "vectors": {"store": "pgvector"}}
    with memroute.open(config) as mem:
        cat = mem.add(api_key_id="alice", content="My cat is called Miso and sleeps all day", key="pet")
        mem.add(api_key_id="alice", content="I prefer TypeScript for frontend work", key="lang")
        mem.add(api_key_id="bob", content="Bob's kitten is named Pixel", key="pet")
        assert mem.flush(timeout=30)
        result = mem.search("what is the name of my kitten", api_key_id="alice")
        assert result.hits and result.hits[0].memory.id == cat.id
        assert "vector" in result.provenance.legs and result.provenance.vector_store == "pgvector"
        assert all(h.memory.api_key_id == "alice" for h in result.hits)
        bob = mem.search("what is the name of my kitten", api_key_id="bob")
        assert {h.memory.api_key_id for h in bob.hits} == {"bob"}
    with memroute.open(config) as mem:  # the index (in PostgreSQL) is kept across a restart
        again = mem.search("sleepy cat", api_key_id="alice")
        assert "vector" in again.provenance.legs and again.hits[0].memory.id == cat.id


def _hnsw(server: PostgresServer, schema: str) -> list[str]:
    import psycopg

    with psycopg.connect(server.dsn()) as raw:
        return [r[0] for r in raw.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = 'memory_vectors' "
            "AND indexdef LIKE '%%USING hnsw%%'", (schema,))]


def test_a_bulk_load_builds_the_hnsw_index_once_and_answers_exactly_meanwhile(
        postgres_server: PostgresServer, schema: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    store = _store(postgres_server, schema, tmp_path)
    try:
        store.bind(SIGNATURE)
        assert _hnsw(postgres_server, schema) == ["memory_vectors_hnsw"]
        with store.bulk_load(10):  # a small backlog: the index grows vector by vector as usual
            assert _hnsw(postgres_server, schema) == ["memory_vectors_hnsw"]
        items = _items(_unit(rng.standard_normal((1200, 48))), "alice")
        with store.bulk_load(len(items)):
            assert _hnsw(postgres_server, schema) == [], "suspended for the backlog"
            for start in range(0, len(items), 300):
                store.upsert(items[start:start + 300])
            query = SearchQuery(api_key_id="alice", text="", now=NOW)
            hits = store.query(items[5].vector, query, 3)
            assert hits[0].memory_id == items[5].memory_id  # exact scan meanwhile
        assert _hnsw(postgres_server, schema) == ["memory_vectors_hnsw"], "built once on exit"
        import psycopg

        # Analysed, so the planner knows the tenant's size (pg_stats hides row-secured tables from their owner).
        with psycopg.connect(postgres_server.dsn("postgres", "memroute")) as raw:
            assert raw.execute("SELECT count(*) FROM pg_stats WHERE schemaname = %s AND tablename = "
                               "'memory_vectors' AND attname = 'api_key_id'", (schema,)).fetchone()[0] == 1
        assert store.count("alice") == 1200
        assert store.query(items[7].vector, query, 1)[0].memory_id == items[7].memory_id
    finally:
        store.close()


def test_an_interrupted_bulk_load_gets_its_index_back_on_the_next_start(
        postgres_server: PostgresServer, schema: str, tmp_path: Path) -> None:
    store = _store(postgres_server, schema, tmp_path)
    store.bind(SIGNATURE)
    store.upsert(_items(_unit(np.random.default_rng(4).standard_normal((5, 48))), "alice"))
    assert store._suspend_hnsw()  # what a bulk load does first; the process then "dies" before rebuilding
    store.close()
    assert _hnsw(postgres_server, schema) == []
    again = _store(postgres_server, schema, tmp_path)
    try:
        assert again.bind(SIGNATURE) is True  # same signature: the vectors are kept
        assert _hnsw(postgres_server, schema) == ["memory_vectors_hnsw"]
        assert again.count() == 5
    finally:
        again.close()


def test_centred_query_ranking_matches_the_other_stores(postgres_server: PostgresServer, schema: str,
                                                        tmp_path: Path) -> None:
    from memroute_builtins.vectors.sqlite_vec.matrix_cache import centered_scores

    rng = np.random.default_rng(11)
    rows = _unit(rng.standard_normal((150, 48)) * 0.4 + 1.0)  # crowded in a cone, as real embeddings are
    items = _items(rows, "k")
    store = _store(postgres_server, schema, tmp_path)
    plain = _store(postgres_server, schema, tmp_path, center=False)
    try:
        store.bind(SIGNATURE)
        plain.bind(SIGNATURE)
        store.upsert(items + _items(_unit(rng.standard_normal((30, 48))), "other"))
        query = SearchQuery(api_key_id="k", now=NOW)
        by_id = {item.memory_id: i for i, item in enumerate(items)}
        for probe in _unit(rng.standard_normal((3, 48)) * 0.4 + 1.0):
            scores = centered_scores(rows, probe)
            hits = store.query(probe, query, 10)
            assert [h.memory_id for h in hits] == [items[i].memory_id for i in np.argsort(-scores)[:10]]
            for hit in hits:
                assert hit.score == pytest.approx(float(scores[by_id[hit.memory_id]]), abs=1e-4)
                assert hit.cosine == pytest.approx(float(rows[by_id[hit.memory_id]] @ probe), abs=1e-4)
            assert [h.score for h in plain.query(probe, query, 5)] == pytest.approx(
                sorted((rows @ probe).tolist(), reverse=True)[:5], abs=1e-4)
        assert store.centers.computed == 1  # one average per tenant, cached
    finally:
        store.close()
        plain.close()
