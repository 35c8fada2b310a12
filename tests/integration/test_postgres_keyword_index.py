"""Keyword search under row-level security uses its GIN index once ``ts_match_vq`` is leakproof, on a real
PostgreSQL: asserted on the plan (``EXPLAIN`` of the very statement the backend runs), never on a timing.

PostgreSQL evaluates a query's conditions after the policy unless their functions are leakproof, and only
leakproof conditions may become index conditions; ``tsvector @@ tsquery`` (``ts_match_vq``) is not leakproof
out of the box, and only a superuser can mark it. The tests' main database has that one-time step applied (as
docs/backends/postgres.md asks of a deployment, with ``CREATE EXTENSION vector``); a second database made from
``template1`` has not, and shows the fallback: the same results, from a scan of the tenant's rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from memroute.models import Memory, SearchQuery, new_memory_id, utcnow
from memroute_builtins.backends.postgres.backend import PostgresBackend, PostgresSettings
from tests.servers.postgres import PostgresServer, fresh_schema

RARE = "zanzibar"
WORDS = ["billing", "service", "marathon", "plan", "dashboard", "react", "lisbon", "trip", "garden", "menu"]


@pytest.fixture(scope="module")
def strict_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    name = "memroute_strict"
    postgres_server.admin(f'DROP DATABASE IF EXISTS "{name}"')
    dsn = postgres_server.create_database(name, superuser_setup=False)
    yield dsn
    postgres_server.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _memories(tenant: str, count: int = 500) -> list[Memory]:
    now = utcnow()
    out = []
    for i in range(count):
        words = " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(4))
        rare = f" {RARE} note" if i % 125 == 0 else ""
        out.append(Memory(id=new_memory_id(), api_key_id=tenant, key=f"k{i}", content=f"{words}{rare} {i}",
                          created_at=now, updated_at=now))
    return out


def _loaded(dsn: str) -> PostgresBackend:
    backend = PostgresBackend("pg", PostgresSettings(dsn=dsn, schema=fresh_schema(None)))  # type: ignore[arg-type]
    backend.initialize()
    backend.put_many(_memories("alice") + _memories("bob"))
    with psycopg.connect(dsn, autocommit=True) as raw:
        # What autovacuum does in a deployment: statistics, and the GIN index's pending list merged (the
        # planner prices a GIN scan by its pending pages too).
        raw.execute(f"VACUUM ANALYZE {backend.sql.table}")
    return backend


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _plan(backend: PostgresBackend, query: SearchQuery) -> list[dict[str, Any]]:
    statement = backend.keyword_statement(query)
    assert statement is not None
    sql, params = statement
    with backend.db.transaction("explain", tenant=query.api_key_id) as conn:
        # Sequential scans off: the small test table must not let a full scan hide which index is usable.
        conn.execute("SET LOCAL enable_seqscan = off")
        document = conn.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchone()[0]
    document = json.loads(document) if isinstance(document, str) else document
    return list(_nodes(document[0]["Plan"]))


def _uses_gin_for_match(nodes: list[dict[str, Any]]) -> bool:
    return any(n.get("Index Name") == "memories_search" and "@@" in n.get("Index Cond", "") for n in nodes)


def _drop(backend: PostgresBackend) -> None:
    schema = backend.schema
    dsn = backend.settings.dsn
    backend.close()
    with psycopg.connect(dsn, autocommit=True) as raw:
        raw.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_keyword_search_uses_the_gin_index_under_row_level_security(postgres_server: PostgresServer,
                                                                     strict_dsn: str) -> None:
    leakproof, strict = _loaded(postgres_server.dsn()), _loaded(strict_dsn)
    try:
        query = SearchQuery(api_key_id="alice", text=f"{RARE}?", limit=10)
        assert leakproof.health().details["row_level_security"] == "enforced"
        assert leakproof.health().details["keyword_index"] == "gin"
        nodes = _plan(leakproof, query)
        assert _uses_gin_for_match(nodes), f"expected the GIN index to serve @@: {json.dumps(nodes)[:2000]}"

        # Without the superuser step: the policy runs first and @@ is a filter over the tenant's rows.
        assert strict.health().details["row_level_security"] == "enforced"
        assert strict.health().details["keyword_index"].startswith("tenant scan")
        strict_nodes = _plan(strict, query)
        assert not _uses_gin_for_match(strict_nodes)
        assert any("@@" in n.get("Filter", "") for n in strict_nodes)

        # Same semantics either way: alice's four rare memories, never bob's.
        for backend in (leakproof, strict):
            hits = backend.search(query)
            assert len(hits) == 4 and {h.memory.api_key_id for h in hits} == {"alice"}
    finally:
        _drop(leakproof)
        _drop(strict)


def test_the_index_path_still_answers_only_the_transactions_tenant(postgres_server: PostgresServer) -> None:
    """The policy still holds on the index path: alice's transaction asking for bob's rows gets none."""
    backend = _loaded(postgres_server.dsn())
    try:
        statement = backend.keyword_statement(SearchQuery(api_key_id="bob", text=RARE, limit=10))
        assert statement is not None
        sql, params = statement
        with backend.db.transaction("probe", tenant="alice") as conn:
            conn.execute("SET LOCAL enable_seqscan = off")
            assert conn.execute(sql, params).fetchall() == []
        assert len(backend.search(SearchQuery(api_key_id="bob", text=RARE, limit=10))) == 4
    finally:
        _drop(backend)
