"""The catalog facts docs/deployment.md ("Sharding by api_key_id with Citus") relies on, checked on plain
PostgreSQL (Citus itself cannot be installed here, and nothing claims it was run): both tenant tables carry
``api_key_id NOT NULL``; the only unique constraints without it are the two primary keys the document names;
the tables it would make reference tables have no tenant column."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import memroute
from tests.servers.postgres import PostgresServer, fresh_schema

TENANT_TABLES = ("memories", "memory_vectors")
REFERENCE_TABLES = ("vector_index", "api_keys", "state_values", "leases")
DOCUMENTED_BLOCKERS = {("memories", "memories_pkey"), ("memory_vectors", "memory_vectors_pkey")}
"""Unique indexes without ``api_key_id``: what must change before ``create_distributed_table``."""


@pytest.fixture
def schema(postgres_server: PostgresServer, tmp_path: Path) -> Iterator[str]:
    name = fresh_schema(postgres_server)
    config = {"embedding": {"source": "static"}, "vectors": {"store": "pgvector"},
              "backends": {"primary": "main", "main": {"type": "postgres", "dsn": postgres_server.dsn(),
                                                       "schema": name}}}
    with memroute.open(config, data_dir=str(tmp_path)) as mem:  # every table memroute creates, vectors bound
        mem.add(api_key_id="a", content="one memory")
        mem.flush()
    yield name
    postgres_server.admin(f'DROP SCHEMA IF EXISTS "{name}" CASCADE', "memroute")


def _indexes(conn: psycopg.Connection, schema: str, table: str) -> list[tuple[str, bool, list[str], str]]:
    rows = conn.execute(
        "SELECT c.relname, i.indisunique, a.amname, "
        "ARRAY(SELECT pg_get_indexdef(i.indexrelid, k, true) FROM generate_series(1, i.indnkeyatts) AS k) "
        "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam "
        "WHERE i.indrelid = %s::regclass", (f'"{schema}".{table}',)).fetchall()
    return [(name, unique, list(columns), method) for name, unique, method, columns in rows]


def test_the_schema_is_laid_out_for_sharding_by_api_key_id(postgres_server: PostgresServer, schema: str) -> None:
    with psycopg.connect(postgres_server.dsn()) as conn:
        for table in TENANT_TABLES:
            nullable = conn.execute(
                "SELECT is_nullable FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
                "AND column_name = 'api_key_id'", (schema, table)).fetchone()
            assert nullable == ("NO",), f"{table}.api_key_id must exist and be NOT NULL"
        blockers = set()
        for table in TENANT_TABLES:
            for name, unique, columns, method in _indexes(conn, schema, table):
                if unique and "api_key_id" not in columns:
                    blockers.add((table, name))
                elif not unique and method != "hnsw" and name != "memories_needs_reindex":
                    # Every index a tenant's query uses leads with the owner: it stays useful on a shard.
                    assert columns[0] == "api_key_id" or name == "memories_expires", (table, name, columns)
        assert blockers == DOCUMENTED_BLOCKERS, "docs/deployment.md lists the unique constraints Citus refuses"
        for table in REFERENCE_TABLES:
            column = conn.execute(
                "SELECT 1 FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
                "AND column_name = 'api_key_id'", (schema, table)).fetchone()
            assert column is None, f"{table} would be a reference table: it holds no tenant's rows"
