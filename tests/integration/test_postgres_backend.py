"""The PostgreSQL backend beyond the conformance suite, on a real server: row-level security as a second wall,
versioned migrations under concurrency, clear errors for bad configuration, surviving a server restart, and
the backend selected by ``type = "postgres"`` through ``memroute.open``."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

import memroute
from memroute.errors import BackendUnavailableError, ConfigError
from memroute.models import ListFilter, NewMemory, SearchQuery
from memroute_builtins.backends.postgres.backend import PostgresBackend, PostgresSettings
from memroute_builtins.backends.postgres.database import ALL_TENANTS, redact_dsn
from memroute_builtins.backends.postgres.schema import SCHEMA_VERSION
from tests.servers.postgres import PostgresServer, wait_until_ready


def _backend(server: PostgresServer, schema: str, **options: object) -> PostgresBackend:
    backend = PostgresBackend("pg", PostgresSettings(dsn=server.dsn(), schema=schema, **options))  # type: ignore[arg-type]
    backend.initialize()
    return backend


def test_row_level_security_admits_only_the_transactions_tenant(postgres_server: PostgresServer, schema: str) -> None:
    backend = _backend(postgres_server, schema)
    try:
        backend.create(NewMemory(api_key_id="alice", key="a", content="alice's secret"))
        backend.create(NewMemory(api_key_id="bob", key="b", content="bob's notes"))
        table = f'"{schema}".memories'
        # A query that forgets its owner filter still sees only the tenant the transaction was opened for.
        with backend.db.transaction("probe", tenant="bob") as conn:
            assert [r[0] for r in conn.execute(f"SELECT api_key_id FROM {table}")] == ["bob"]
            with pytest.raises(psycopg.errors.InsufficientPrivilege):  # nor can it write another tenant's row
                conn.execute(f"UPDATE {table} SET api_key_id = 'alice'")
        with backend.db.transaction("probe", tenant=ALL_TENANTS) as conn:
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 2
        # A connection that set no tenant at all (any other client of the role) sees nothing: default deny.
        with psycopg.connect(postgres_server.dsn()) as raw:
            assert raw.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0
        assert backend.health().details["row_level_security"] == "enforced"
    finally:
        backend.close()


def test_row_level_security_can_be_turned_off(postgres_server: PostgresServer, schema: str) -> None:
    _backend(postgres_server, schema).close()
    backend = _backend(postgres_server, schema, row_level_security=False)
    try:
        backend.create(NewMemory(api_key_id="alice", key="a", content="visible to the owner role"))
        with psycopg.connect(postgres_server.dsn()) as raw:
            assert raw.execute(f'SELECT count(*) FROM "{schema}".memories').fetchone()[0] == 1
        assert backend.health().details["row_level_security"].startswith("off")
        hits = backend.search(SearchQuery(api_key_id="bob", text="visible owner role"))
        assert hits == [], "the owner filter in every query still holds without the policy"
    finally:
        backend.close()


def test_processes_starting_together_migrate_once(postgres_server: PostgresServer, schema: str) -> None:
    backends = [PostgresBackend(f"pg{i}", PostgresSettings(dsn=postgres_server.dsn(), schema=schema))
                for i in range(4)]
    errors: list[BaseException] = []

    def start(backend: PostgresBackend) -> None:
        try:
            backend.initialize()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(b,)) for b in backends]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert not errors, errors
        with psycopg.connect(postgres_server.dsn()) as raw:
            versions = raw.execute(f'SELECT version FROM "{schema}".schema_migrations').fetchall()
        assert versions == [(v,) for v in range(1, SCHEMA_VERSION + 1)]
        assert backends[0].health().details["schema_version"] == SCHEMA_VERSION
    finally:
        for backend in backends:
            backend.close()


def test_a_newer_schema_is_refused_with_advice(postgres_server: PostgresServer, schema: str) -> None:
    _backend(postgres_server, schema).close()
    postgres_server.admin(f'INSERT INTO "{schema}".schema_migrations (version) VALUES (99)', "memroute")
    with pytest.raises(BackendUnavailableError, match=r"newer than this memroute supports.*Upgrade memroute"):
        _backend(postgres_server, schema)


def test_unreachable_server_is_a_clear_error_without_the_password(postgres_server: PostgresServer) -> None:
    dsn = f"postgresql://memroute:hunter2@127.0.0.1:{postgres_server.port + 1}/memroute"
    backend = PostgresBackend("pg", PostgresSettings(dsn=dsn, connect_timeout_s=1))
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError) as caught:
        backend.initialize()
    assert time.monotonic() - started < 10
    message = str(caught.value)
    assert "cannot connect to PostgreSQL" in message and "hunter2" not in message and "***" in message
    assert redact_dsn("host=x password='a b' user=y") == "host=x password=*** user=y"
    assert redact_dsn("postgresql://u@h/db?password=s3cret") == "postgresql://u@h/db?password=***"


@pytest.mark.parametrize("options,field", [
    ({}, "dsn"),
    ({"dsn": "  "}, "dsn"),
    ({"dsn": "postgresql://x/y", "schema": "Bad-Name"}, "schema"),
    ({"dsn": "postgresql://x/y", "pool_max_size": 0}, "pool_max_size"),
    ({"dsn": "postgresql://x/y", "bogus": 1}, "bogus"),
])
def test_bad_options_are_config_errors_naming_the_field(options: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        memroute.open({"backends": {"primary": "main", "main": {"type": "postgres", **options}},
                       "embedding": {"source": "none"}})


def test_a_server_restart_costs_no_call_an_error_once_it_is_back(postgres_server: PostgresServer,
                                                                 schema: str) -> None:
    backend = _backend(postgres_server, schema, pool_min_size=2, pool_timeout_s=1.0)
    try:
        kept = backend.create(NewMemory(api_key_id="alice", key="before", content="written before the restart"))
        postgres_server.stop("fast")
        try:
            with pytest.raises(BackendUnavailableError, match="PostgreSQL"):
                backend.get(kept.id)
            assert not backend.health().ok
        finally:
            postgres_server.start()
            wait_until_ready(postgres_server)
        # Every pooled connection died with the server: the backend replaces them by itself.
        assert backend.get(kept.id) == kept
        backend.create(NewMemory(api_key_id="alice", key="after", content="written after the restart"))
        assert backend.list(ListFilter(api_key_id="alice")).total == 2
        assert backend.health().ok
    finally:
        backend.close()


def test_selected_by_type_postgres_through_memroute_open(postgres_server: PostgresServer, schema: str) -> None:
    config = {"backends": {"primary": "main", "main": {"type": "postgres", "dsn": postgres_server.dsn(),
                                                       "schema": schema}},
              "embedding": {"source": "none"}}
    with memroute.open(config) as mem:
        mine = mem.add(api_key_id="alice", content="I prefer PostgreSQL for shared deployments", key="db")
        mem.add(api_key_id="bob", content="Bob prefers SQLite", key="db")
        again = mem.add(api_key_id="alice", content="I prefer PostgreSQL with pgvector", key="db",
                        metadata={"source": "upsert"})
        assert again.id == mine.id and again.created_at == mine.created_at
        result = mem.search("which database do I prefer", api_key_id="alice")
        assert [h.memory.id for h in result.hits] == [mine.id]
        assert result.provenance.backend == "main"
        status = mem.status() if hasattr(mem, "status") else None
        del status
    with memroute.open(config) as mem:  # persisted
        assert mem.get(mine.id, api_key_id="alice") is not None
        assert mem.get(mine.id, api_key_id="bob") is None  # another tenant's id is a missing one


def test_a_missing_driver_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "psycopg_pool", None)  # as if not installed
    with pytest.raises(BackendUnavailableError, match=r"pip install 'memroute\[postgres\]'"):
        memroute.open({"backends": {"primary": "main", "main": {"type": "postgres", "dsn": "postgresql://x/y"}},
                       "embedding": {"source": "none"}})


def test_create_many_fails_an_item_alone_and_the_database_whole(postgres_server: PostgresServer, schema: str) -> None:
    """The group commit's batch insert: each item's upsert runs in a savepoint of the batch's one transaction,
    so an item's own error (its id held by another memory of the tenant) comes back in its place and the rest
    commit, tenants mixed (row-level security set per item); a failure of the database (here a statement
    timeout behind a row another transaction holds) rolls the whole batch back and raises."""
    from memroute.errors import ConflictError

    backend = _backend(postgres_server, schema, statement_timeout_ms=500)
    try:
        taken = backend.create(NewMemory(api_key_id="alice", key="taken", content="already here"))
        outcomes = backend.create_many([
            NewMemory(api_key_id="alice", key="first", content="stored"),
            NewMemory(api_key_id="alice", key="clash", content="reuses an id", id=taken.id),
            NewMemory(api_key_id="bob", key="first", content="bob's, in the same batch"),
            NewMemory(api_key_id="alice", key="first", content="stored, then updated by the same batch"),
        ])
        assert isinstance(outcomes[1], ConflictError)
        alice_first, bob_first, again = outcomes[0], outcomes[2], outcomes[3]
        assert again.id == alice_first.id and again.content.startswith("stored, then")  # type: ignore[union-attr]
        assert bob_first.api_key_id == "bob" and bob_first.id != alice_first.id  # type: ignore[union-attr]
        assert backend.get_by_key("alice", "clash") is None
        assert backend.get_by_key("alice", "taken").content == "already here"  # type: ignore[union-attr]
        assert backend.get_by_key("bob", "first").content == "bob's, in the same batch"  # type: ignore[union-attr]

        held = backend.create(NewMemory(api_key_id="alice", key="held", content="v1"))
        with backend.db.transaction("hold a row", tenant="alice") as conn:
            conn.execute(f'SELECT 1 FROM "{schema}".memories WHERE api_key_id = %s AND id = %s FOR UPDATE',
                         ("alice", held.id))
            with pytest.raises(BackendUnavailableError, match="statement_timeout"):
                backend.create_many([NewMemory(api_key_id="alice", key="before", content="rolled back"),
                                     NewMemory(api_key_id="alice", key="held", content="v2"),
                                     NewMemory(api_key_id="bob", key="after", content="never written")])
        assert backend.get_by_key("alice", "before") is None and backend.get_by_key("bob", "after") is None
        assert backend.get_by_key("alice", "held").content == "v1"  # type: ignore[union-attr]
    finally:
        backend.close()


def test_concurrent_adds_on_postgres_are_group_committed(postgres_server: PostgresServer, schema: str) -> None:
    """Through ``memroute.open``: adds from eight threads are written in batches by the group commit
    (``batch_create``), each caller gets its own memory in its own tenant, and ``status()`` counts the batches."""
    config = {"backends": {"primary": "main", "main": {"type": "postgres", "dsn": postgres_server.dsn(),
                                                       "schema": schema}},
              "embedding": {"source": "none"}}
    with memroute.open(config) as mem:
        results: dict[tuple[int, int], object] = {}

        def write(worker: int) -> None:
            for i in range(6):
                tenant = "alice" if worker % 2 else "bob"
                results[(worker, i)] = mem.add(api_key_id=tenant, content=f"note {worker}/{i}", key=f"n:{worker}:{i}")

        threads = [threading.Thread(target=write, args=(worker,)) for worker in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(results) == 48
        for (worker, i), memory in results.items():
            assert memory.api_key_id == ("alice" if worker % 2 else "bob")  # type: ignore[attr-defined]
            assert memory.content == f"note {worker}/{i}"  # type: ignore[attr-defined]
        assert mem.list(api_key_id="alice", limit=100).total == 24 == mem.list(api_key_id="bob", limit=100).total
        batching = mem.status().group_commit
        assert batching["items"] == 48 and 1 <= batching["batches"] <= 48
