"""The catalog and statement facts docs/deployment.md ("Sharding by api_key_id with Citus") relies on, checked on
plain PostgreSQL (Citus itself cannot be installed here, and nothing claims it was run).

- Catalog: the tenant tables (memories, memory_vectors, memory_history) carry ``api_key_id NOT NULL``; every
  primary key and unique constraint includes it (what ``create_distributed_table(table, 'api_key_id')``
  requires); there is no foreign key (one would have to include it too); every other index leads with it or is
  on the short documented list; the tables that would be reference tables have no tenant column.
- Statements: every statement the service's tenant calls send to a tenant table names the tenant as a bound
  ``api_key_id = %s`` (or inserts it), which is what lets Citus route it to one shard; the plans of the by-id
  and upsert statements use the ``(api_key_id, …)`` keys.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest

import memroute
from memroute.models import Memory, NewMemory, new_memory_id, utcnow
from memroute_builtins.backends.postgres.backend import PostgresBackend, PostgresSettings
from memroute_builtins.backends.postgres.database import ALL_TENANTS, Database
from memroute_builtins.backends.postgres.schema import Sql, put_columns
from tests.servers.postgres import PostgresServer

TENANT_TABLES = ("memories", "memory_vectors", "memory_history")
REFERENCE_TABLES = ("vector_index", "api_keys", "state_values", "leases")
NOT_LED_BY_THE_TENANT = {"memories_expires", "memories_needs_reindex", "memories_id", "memory_vectors_memory_id",
                         "memory_vectors_hnsw", "memory_history_at"}
"""Indexes that do not lead with ``api_key_id``, each on purpose: the expiry sweep, the reindex queue and the
history's time index (an operator's purge over every tenant) span tenants, the two id indexes serve the by-id
operations that name no tenant (replication, import's foreign-id check, the vector store's delete), and HNSW
indexes one column. On Citus each is built per shard."""
PRIMARY_KEYS = {"memories": ["api_key_id", "id"], "memory_vectors": ["api_key_id", "memory_id"],
                "memory_history": ["api_key_id", "id"]}


def _config(server: PostgresServer, schema: str) -> dict[str, Any]:
    return {"embedding": {"source": "static"}, "vectors": {"store": "pgvector"},
            "backends": {"primary": "main", "main": {"type": "postgres", "dsn": server.dsn(), "schema": schema}}}


@pytest.fixture
def laid_out(postgres_server: PostgresServer, schema: str, tmp_path: Path) -> str:
    with memroute.open(_config(postgres_server, schema), data_dir=str(tmp_path)) as mem:  # every table, bound
        mem.add(api_key_id="a", content="one memory")
        mem.flush()
    return schema


def _indexes(conn: psycopg.Connection, schema: str, table: str) -> list[tuple[str, bool, list[str], str]]:
    rows = conn.execute(
        "SELECT c.relname, i.indisunique, a.amname, "
        "ARRAY(SELECT pg_get_indexdef(i.indexrelid, k, true) FROM generate_series(1, i.indnkeyatts) AS k) "
        "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam "
        "WHERE i.indrelid = %s::regclass", (f'"{schema}".{table}',)).fetchall()
    return [(name, unique, list(columns), method) for name, unique, method, columns in rows]


def test_every_key_of_a_tenant_table_includes_api_key_id(postgres_server: PostgresServer, laid_out: str) -> None:
    schema = laid_out
    with psycopg.connect(postgres_server.dsn()) as conn:
        for table in TENANT_TABLES:
            nullable = conn.execute(
                "SELECT is_nullable FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
                "AND column_name = 'api_key_id'", (schema, table)).fetchone()
            assert nullable == ("NO",), f"{table}.api_key_id must exist and be NOT NULL"
            primary = conn.execute(
                "SELECT array_agg(a.attname::text ORDER BY k.ord) FROM pg_index i "
                "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) "
                "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
                "WHERE i.indrelid = %s::regclass AND i.indisprimary", (f'"{schema}".{table}',)).fetchone()[0]
            assert primary == PRIMARY_KEYS[table], f"{table}: primary key {primary}"
            for name, unique, columns, method in _indexes(conn, schema, table):
                if unique:
                    assert "api_key_id" in columns, f"Citus refuses the unique index {name} {columns}"
                elif name not in NOT_LED_BY_THE_TENANT:
                    assert columns[0] == "api_key_id", f"{table}.{name} {columns} ({method}) must lead with it"
            constraints = conn.execute(
                "SELECT conname, contype, pg_get_constraintdef(oid) FROM pg_constraint "
                "WHERE conrelid = %s::regclass AND contype IN ('p', 'u', 'f', 'x')", (f'"{schema}".{table}',)
            ).fetchall()
            for name, kind, definition in constraints:
                assert "api_key_id" in definition, f"{table}: constraint {name} ({kind}) {definition}"
            assert not [c for c in constraints if c[1] == "f"], "a foreign key would need the docs' colocation step"
        for table in REFERENCE_TABLES:
            column = conn.execute(
                "SELECT 1 FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
                "AND column_name = 'api_key_id'", (schema, table)).fetchone()
            assert column is None, f"{table} would be a reference table: it holds no tenant's rows"


# --- statements --------------------------------------------------------------------------------------------

class _Recorder:
    """Wraps the connections one :class:`Database` hands out and keeps every statement sent through them."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, tuple[Any, ...] | list[Any] | None]] = []

    def wrap(self, db: Database) -> None:
        real = db.transaction
        recorder = self

        @contextmanager
        def transaction(action: str, *, tenant: Any) -> Iterator[Any]:
            with real(action, tenant=tenant) as conn:
                yield _RecordingConnection(conn, recorder)

        db.transaction = transaction  # type: ignore[method-assign]

    def touching(self, schema: str) -> list[tuple[str, Any]]:
        tables = tuple(f'"{schema}".{t}' for t in TENANT_TABLES)
        return [(sql, params) for sql, params in self.statements if any(t + " " in sql or t + "\n" in sql
                                                                        or sql.endswith(t) for t in tables)]


class _RecordingConnection:
    def __init__(self, conn: Any, recorder: _Recorder) -> None:
        self._conn, self._recorder = conn, recorder

    def execute(self, sql: Any, params: Any = None, **kwargs: Any) -> Any:
        self._recorder.statements.append((str(sql), params))
        return self._conn.execute(sql, params, **kwargs)

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        return _RecordingCursor(self._conn.cursor(*args, **kwargs), self._recorder)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _RecordingCursor:
    def __init__(self, cursor: Any, recorder: _Recorder) -> None:
        self._cursor, self._recorder = cursor, recorder

    def execute(self, sql: Any, params: Any = None, **kwargs: Any) -> Any:
        self._recorder.statements.append((str(sql), params))
        self._cursor.execute(sql, params, **kwargs)
        return self

    def executemany(self, sql: Any, rows: Any, **kwargs: Any) -> Any:
        rows = list(rows)
        self._recorder.statements.extend((str(sql), row) for row in rows)
        return self._cursor.executemany(sql, rows, **kwargs)

    def __enter__(self) -> _RecordingCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cursor.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


_BOUND_TENANT = re.compile(r"\bapi_key_id = %s")
_INSERTED_TENANT = re.compile(r"^INSERT INTO \S+ \((?:id|memory_id), api_key_id,")
"""An insert whose second value is the owner (VALUES rows, or the one bound ``%s::text`` of the set-based put)."""
FAN_OUT = ("DELETE FROM {schema}.memory_vectors WHERE memory_id = ANY(%s::uuid[]) AND api_key_id <> %s",)
"""The statements of tenant calls that name no single owner to route by, each documented in docs/deployment.md:
the vector upsert's re-owning step (a memory id has one vector; it carries the owner, as ``<>``)."""


def _routes_by_tenant(sql: str, params: Any, tenant: str) -> bool:
    if _INSERTED_TENANT.match(sql):
        if "unnest" in sql:
            return bool(params) and params[0] == tenant and "SELECT id, %s::text," in sql
        return bool(params) and params[1] == tenant
    if not _BOUND_TENANT.search(sql):
        return False
    return tenant in (params or ())


def test_tenant_calls_send_only_statements_that_name_the_tenant(postgres_server: PostgresServer, schema: str,
                                                                 tmp_path: Path) -> None:
    """Through the public service, every call of one tenant: each statement on a tenant table names it."""
    recorder = _Recorder()
    with memroute.open(_config(postgres_server, schema), data_dir=str(tmp_path)) as mem:
        mem.add(api_key_id="b", content="the other tenant's note about Lisbon")
        mem.flush()  # its indexing is done before the recording starts
        primary = _primary(mem)
        recorder.wrap(primary.db)
        tenant = "a"
        made = mem.add(api_key_id=tenant, content="Lisbon trams are yellow", metadata={"n": 1})
        mem.add(api_key_id=tenant, content="Lisbon trams are yellow and old", key=made.key)  # the upsert
        mem.flush()  # the indexer: vector upserts for the tenant, marks
        assert mem.get(made.id, api_key_id=tenant) is not None
        assert mem.update(made.id, api_key_id=tenant, content="Porto trams are blue") is not None
        mem.flush()
        assert mem.search("Porto trams", api_key_id=tenant)
        assert mem.search("Porto trams", api_key_id=tenant, strategy="exact")
        mem.import_jsonl([json.dumps(_exported(tenant))], api_key_id=tenant)
        assert mem.delete(made.id, api_key_id=tenant) is True
        assert mem.get(made.id, api_key_id=tenant) is None
        assert [e.event.value for e in mem.history(made.id, api_key_id=tenant).entries] == [
            "created", "updated", "updated", "deleted"]
        mem.flush()
    statements = recorder.touching(schema)
    assert len(statements) >= 15, statements
    fan_out = {s.format(schema=f'"{schema}"') for s in FAN_OUT}
    unrouted = [(sql, params) for sql, params in statements
                if sql not in fan_out and not _routes_by_tenant(sql, params, tenant)
                and not _operator_statement(sql)]
    assert not unrouted, "statements of tenant calls that Citus could not route to the tenant's shard:\n" + \
        "\n".join(f"{sql} {params!r}"[:300] for sql, params in unrouted)


def _operator_statement(sql: str) -> bool:
    """Statements the background indexer and the import send on every tenant's behalf: the reindex queue
    (``needs_reindex``, read across tenants by design) and the import's check that an id is not another
    tenant's (which must look at every tenant)."""
    reads_the_queue = sql.startswith("SELECT") and "WHERE needs_reindex" in sql
    return reads_the_queue or sql == Sql(_schema_of(sql)).get_many_any_tenant


def _schema_of(sql: str) -> str:
    found = re.search(r'"([a-z_0-9]+)"\.memories', sql)
    return found.group(1) if found else ""


def _exported(tenant: str) -> dict[str, Any]:
    now = utcnow().isoformat()
    return {"id": new_memory_id(), "api_key_id": tenant, "key": "imported", "content": "an imported memory",
            "type": "factual", "created_at": now, "updated_at": now, "metadata": {}}


def _primary(mem: Any) -> PostgresBackend:
    found = [b for b in mem._manager.backends if isinstance(b, PostgresBackend)]
    assert found, "the postgres primary"
    return found[0]


def _plan(conn: psycopg.Connection, sql: str, params: Any) -> str:
    return "\n".join(str(row[0]) for row in conn.execute("EXPLAIN " + sql, params).fetchall())


def test_by_id_and_upsert_plans_use_the_tenant_keys(postgres_server: PostgresServer, laid_out: str) -> None:
    """The planner's view of the routed statements: the owner is one of their conditions, and the upserts
    conflict on keys that include it (on Citus the same ``api_key_id = $1`` condition is what routes them)."""
    sql = Sql(laid_out)
    memory = Memory.trusted(id=new_memory_id(), api_key_id="a", session_id=None, type="factual", key="k",
                            content="c", metadata={}, created_at=utcnow(), updated_at=utcnow(), expires_at=None,
                            access_count=0, last_accessed_at=None)
    with psycopg.connect(postgres_server.dsn()) as conn:
        conn.execute("SET enable_seqscan = off")  # a tiny table: ask which index the statement can use
        for name, statement, params in (
                ("get", sql.get, ("a", memory.id)),
                ("get_many", sql.get_many, ("a", [memory.id])),
                ("delete", sql.delete, ("a", memory.id)),
                ("get_by_key_for_update", sql.get_by_key_for_update, ("a", "k")),
                ("update", sql.update, (None, "factual", "k", "c", "{}", utcnow(), None, "c", "k", None, None,
                                        "a", memory.id)),
                ("record_access", sql.record_access, ([memory.id], [1], [utcnow()], "a")),
        ):
            plan = _plan(conn, statement, params)
            # The owner is a condition of the statement (an index condition or a filter next to the id's:
            # on a tiny table the planner may take either index), so Citus can route it.
            assert "api_key_id = 'a'::text" in plan and "Index" in plan, f"{name}:\n{plan}"
        plan = _plan(conn, sql.put, ["a", *put_columns([memory])])
        assert "Conflict Arbiter Indexes: memories_pkey" in plan, plan
        plan = _plan(conn, sql.put_evict, (["k"], [memory.id], "a"))
        assert "api_key_id = 'a'::text" in plan, plan
        plan = _plan(conn, sql.upsert, (memory.id, "a", None, "factual", "k", "c", "{}", utcnow(), utcnow(), None,
                                        0, None))
        assert "Conflict Arbiter Indexes: memories_owner_key" in plan, plan


def test_the_tenant_scope_is_a_transaction_local_set_statement(postgres_server: PostgresServer,
                                                                laid_out: str) -> None:
    """Citus passes ``SET LOCAL`` on to the workers that run a routed query (``citus.propagate_set_commands =
    'local'``), never a ``set_config()`` call's effect: the policy on each shard must see the tenant. The tenant
    is a quoted literal there, so any text round-trips and none is read as SQL."""
    backend = PostgresBackend("pg", PostgresSettings(dsn=postgres_server.dsn(), schema=laid_out, pool_max_size=1))
    backend.initialize()
    try:
        with psycopg.connect(postgres_server.dsn()) as raw:
            assert backend.db.tenant_statement("o'b").as_string(raw) == "SET LOCAL memroute.api_key_id = 'o''b'"
        tricky = "o'brien \\ \"x\" ü'; RESET ALL; --"
        with backend.db.transaction("read the scope", tenant=tricky) as conn:
            assert conn.execute("SELECT current_setting('memroute.api_key_id')").fetchone() == (tricky,)
        with backend.db.transaction("read the scope", tenant=ALL_TENANTS) as conn:  # the same pooled connection
            left = conn.execute("SELECT current_setting('memroute.api_key_id', true)").fetchone()[0]
            assert left in (None, ""), f"the tenant outlived its transaction: {left!r}"
        created = backend.create(NewMemory(api_key_id=tricky, key="k", content="under the policy"))
        assert backend.get_owned(tricky, created.id) is not None and backend.get_owned("a", created.id) is None
        mixed = [attrs.evolve(created, id=new_memory_id(), api_key_id=t, key="m") for t in ("a", tricky)]
        assert backend.put_many(mixed) == 2, "put_many switches the scope between tenants in one transaction"
        assert {m.api_key_id for m in backend.get_many([m.id for m in mixed]).values()} == {"a", tricky}
    finally:
        backend.close()
