"""Schema version 3 (keys led by ``api_key_id``, for Citus) applied to a database memroute left at version 2, with
data in it: nothing is lost or re-embedded, and every path still works.

The version-2 database is made the way memroute made it: the current code writes memories and vectors, then the
two primary keys are put back to their version-2 form (``memories (id)``, ``memory_vectors (memory_id)`` plus the
owner index) and the version-3 row is removed. The test first checks that the result has exactly the version-2
catalog facts the previous layout test pinned.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

import memroute
from memroute.models import Memory, SearchQuery
from memroute_builtins.backends.postgres.backend import PostgresBackend
from tests.servers.postgres import PostgresServer

_DOWNGRADE = """
    ALTER TABLE {s}.memories DROP CONSTRAINT memories_pkey;
    ALTER TABLE {s}.memories ADD CONSTRAINT memories_pkey PRIMARY KEY (id);
    DROP INDEX {s}.memories_id;
    DELETE FROM {s}.schema_migrations WHERE version = 3;
    DROP TABLE {s}.memory_history;
    DELETE FROM {s}.schema_migrations WHERE version = 4;
    ALTER TABLE {s}.memory_vectors DROP CONSTRAINT memory_vectors_pkey;
    ALTER TABLE {s}.memory_vectors ADD CONSTRAINT memory_vectors_pkey PRIMARY KEY (memory_id);
    DROP INDEX {s}.memory_vectors_memory_id;
    CREATE INDEX ON {s}.memory_vectors (api_key_id);
"""
"""What version 2 had instead: the keys on the id alone, and (vectors) an index on the owner."""


def _config(server: PostgresServer, schema: str) -> dict[str, Any]:
    return {"embedding": {"source": "static"}, "vectors": {"store": "pgvector"},
            "backends": {"primary": "main", "main": {"type": "postgres", "dsn": server.dsn(), "schema": schema}}}


def _keys(conn: psycopg.Connection, schema: str) -> dict[str, list[str]]:
    rows = conn.execute(
        "SELECT c.relname, array_agg(a.attname::text ORDER BY k.ord) FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
        "WHERE n.nspname = %s AND c.relname IN ('memories', 'memory_vectors') AND i.indisprimary "
        "GROUP BY c.relname", (schema,)).fetchall()
    return {str(name): list(columns) for name, columns in rows}


def _snapshot(conn: psycopg.Connection, schema: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    conn.execute("SELECT set_config('memroute.all_tenants', 'on', false)")  # the policy admits every tenant
    memories = conn.execute(
        f'SELECT id, api_key_id, key, content, metadata, created_at, updated_at, access_count, needs_reindex, seq '
        f'FROM "{schema}".memories ORDER BY id').fetchall()
    vectors = conn.execute(
        f'SELECT memory_id, api_key_id, embedding::text FROM "{schema}".memory_vectors ORDER BY memory_id').fetchall()
    return memories, vectors


def test_a_version_2_database_migrates_keeping_every_memory_and_vector(
        postgres_server: PostgresServer, schema: str, tmp_path: Path) -> None:
    config = _config(postgres_server, schema)
    with memroute.open(config, data_dir=str(tmp_path / "old")) as mem:
        lisbon = mem.add(api_key_id="a", content="The trams in Lisbon are yellow", metadata={"city": "Lisbon"})
        porto = mem.add(api_key_id="a", content="Porto has a blue tiled railway station")
        theirs = mem.add(api_key_id="b", content="Tenant b keeps its own Lisbon notes")
        many = [mem.add(api_key_id="b", content=f"filler memory number {i} about gardening") for i in range(20)]
        mem.flush()
        mem.record_access([lisbon.id], api_key_id="a")
        mem.flush()
    postgres_server.admin(_DOWNGRADE.format(s=f'"{schema}"'), "memroute")
    with psycopg.connect(postgres_server.dsn()) as conn:
        assert _keys(conn, schema) == {"memories": ["id"], "memory_vectors": ["memory_id"]}, "not version 2"
        assert conn.execute(f'SELECT max(version) FROM "{schema}".schema_migrations').fetchone() == (2,)
        before = _snapshot(conn, schema)
    assert len(before[0]) == 23 and len(before[1]) == 23, "every memory had its vector before the upgrade"
    assert [r[7] for r in before[0] if r[0] == lisbon.id] == [1], "the recorded access is part of what is kept"

    with memroute.open(config, data_dir=str(tmp_path / "old")) as mem:  # the same deployment, upgraded
        with psycopg.connect(postgres_server.dsn()) as conn:
            assert _keys(conn, schema) == {"memories": ["api_key_id", "id"],
                                           "memory_vectors": ["api_key_id", "memory_id"]}
            versions = conn.execute(f'SELECT version FROM "{schema}".schema_migrations ORDER BY version').fetchall()
            assert versions == [(1,), (2,), (3,), (4,)]  # 4: the memory history table
            assert _snapshot(conn, schema) == before, "the upgrade changed a row (or a vector)"
        primary = next(b for b in mem._manager.backends if isinstance(b, PostgresBackend))
        assert primary.count_pending_reindex() == 0, "the upgrade must not queue memories for re-embedding"

        # ids, content and metadata as they were, through the service, for their own tenant only
        got = mem.get(lisbon.id, api_key_id="a")
        assert isinstance(got, Memory) and got.content == lisbon.content and got.metadata == {"city": "Lisbon"}
        assert got.created_at == lisbon.created_at
        assert mem.get(lisbon.id, api_key_id="b") is None, "another tenant's id is no such id"
        assert mem.get(theirs.id, api_key_id="b") is not None
        # the keyword leg (the tsvector and its GIN index, rebuilt by nothing) and the vectors kept by the upgrade
        keyword = primary.search(SearchQuery(api_key_id="a", text="Lisbon trams"))
        assert [h.memory.id for h in keyword] == [lisbon.id]
        assert [h.memory.id for h in primary.search(SearchQuery(api_key_id="b", text="Lisbon"))] == [theirs.id]
        hits = _ids(mem.search("yellow trams in Lisbon", api_key_id="a", strategy="semantic"))
        assert lisbon.id in hits and theirs.id not in hits
        assert _ids(mem.search("gardening", api_key_id="b", strategy="hybrid", limit=30)) >= {m.id for m in many[:5]}
        # writes after the upgrade: upsert by key keeps the id, update, delete, a new vector
        again = mem.add(api_key_id="a", content="Porto's station is São Bento", key=porto.key)
        assert again.id == porto.id and again.created_at == porto.created_at
        assert mem.update(lisbon.id, api_key_id="a", content="Lisbon trams are yellow and steep") is not None
        assert mem.update(lisbon.id, api_key_id="b", content="hijack") is None
        assert mem.delete(theirs.id, api_key_id="a") is False and mem.get(theirs.id, api_key_id="b") is not None
        assert mem.delete(theirs.id, api_key_id="b") is True
        mem.flush()
        assert porto.id in _ids(mem.search("São Bento station", api_key_id="a", strategy="semantic"))
        assert primary.count_pending_reindex() == 0
        with psycopg.connect(postgres_server.dsn()) as conn:
            conn.execute("SELECT set_config('memroute.all_tenants', 'on', false)")
            counts = conn.execute(
                f'SELECT (SELECT count(*) FROM "{schema}".memories), (SELECT count(*) FROM "{schema}".memory_vectors)'
            ).fetchone()
        assert counts == (22, 22)


def _ids(found: Any) -> set[str]:
    return {hit.memory.id for hit in found}
