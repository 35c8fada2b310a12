"""The pgvector store against memroute's VectorStoreContract, on a real PostgreSQL with pgvector: sharing the
postgres primary's database and pool (the default), with a dsn of its own, and as halfvec."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memroute.interfaces import ComponentContext, VectorStore
from memroute.testing import VectorStoreContract
from memroute_builtins.backends.postgres.backend import PostgresBackend, PostgresSettings
from memroute_builtins.vectors.pgvector.store import PgvectorSettings, PgvectorStore
from tests.servers.postgres import PostgresServer


class TestPgvectorSharingThePrimary(VectorStoreContract):
    @pytest.fixture
    def primary(self, postgres_server: PostgresServer, schema: str) -> Iterator[PostgresBackend]:
        backend = PostgresBackend("main", PostgresSettings(dsn=postgres_server.dsn(), schema=schema, pool_max_size=4))
        backend.initialize()
        yield backend
        backend.close()

    def _open(self, primary: PostgresBackend, tmp_path: Path) -> PgvectorStore:
        context = ComponentContext(instance_name="pgvector", data_dir=tmp_path, primary=primary)
        return PgvectorStore(PgvectorSettings(), context)

    @pytest.fixture
    def store(self, primary: PostgresBackend, tmp_path: Path) -> Iterator[VectorStore]:
        store = self._open(primary, tmp_path)
        yield store
        store.close()

    @pytest.fixture
    def reopen(self, primary: PostgresBackend, tmp_path: Path) -> Callable[[VectorStore], VectorStore]:
        def again(store: VectorStore) -> VectorStore:
            store.close()
            return self._open(primary, tmp_path)

        return again


class TestPgvectorOwnDsnHalfvec(VectorStoreContract):
    @pytest.fixture
    def store(self, postgres_server: PostgresServer, schema: str, tmp_path: Path) -> Iterator[VectorStore]:
        settings = PgvectorSettings(dsn=postgres_server.dsn(), schema=schema, quantization="float16", pool_max_size=2)
        store = PgvectorStore(settings, ComponentContext(instance_name="pgvector", data_dir=tmp_path))
        yield store
        store.close()
