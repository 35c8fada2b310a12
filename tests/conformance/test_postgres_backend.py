"""The PostgreSQL backend against the storage backend conformance suite, on a real PostgreSQL server.

Each test gets its own schema in the session's server (``tests/servers/postgres.py``), as a non-superuser role,
so row-level security is in force.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from memroute.interfaces import MemoryBackend
from memroute.testing import BackendContract
from memroute_builtins.backends.postgres.backend import PostgresBackend, PostgresSettings
from tests.servers.postgres import PostgresServer, fresh_schema


def _open(server: PostgresServer, schema: str) -> PostgresBackend:
    backend = PostgresBackend("conformance", PostgresSettings(dsn=server.dsn(), schema=schema, pool_max_size=4))
    backend.initialize()
    return backend


class TestPostgresBackend(BackendContract):
    @pytest.fixture
    def schema(self, postgres_server: PostgresServer) -> Iterator[str]:
        name = fresh_schema(postgres_server)
        yield name
        postgres_server.admin(f'DROP SCHEMA IF EXISTS "{name}" CASCADE', "memroute")

    @pytest.fixture
    def backend(self, postgres_server: PostgresServer, schema: str) -> Iterator[MemoryBackend]:
        yield _open(postgres_server, schema)

    @pytest.fixture
    def reopen(self, postgres_server: PostgresServer, schema: str) -> Callable[[MemoryBackend], MemoryBackend]:
        def reopen(old: MemoryBackend) -> MemoryBackend:
            old.close()
            return _open(postgres_server, schema)

        return reopen
