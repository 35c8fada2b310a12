"""The HTTP backend against the storage backend conformance suite, over a real loopback server.

Two servers: one keeps memories in the test server's own dict store, the other fronts the real SQLite
backend (the "fleet shares one memroute server" set-up: an HTTP backend in front of a server-side backend).
The HTTP backend declares every capability, so the whole contract runs. ``reopen`` closes the client and
opens a new one against the same server: the data lives on the server, so it must still be there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memroute.config.serialization import structure_config
from memroute.interfaces import MemoryBackend
from memroute.testing import BackendContract
from memroute_builtins.backends.http import HttpBackend, HttpBackendSettings
from memroute_builtins.backends.sqlite.backend import SqliteBackend
from tests.servers.memory_http_server import MemoryHttpServer


def _client(server: MemoryHttpServer) -> HttpBackend:
    settings = structure_config({"base_url": server.url, "allow_private": True, "timeout": 10},
                                HttpBackendSettings)
    backend = HttpBackend("conformance", settings)
    backend.initialize()
    return backend


class _HttpContract(BackendContract):
    __test__ = False

    @pytest.fixture
    def server(self, tmp_path: Path) -> Iterator[MemoryHttpServer]:
        raise NotImplementedError

    @pytest.fixture
    def backend(self, server: MemoryHttpServer) -> Iterator[MemoryBackend]:
        yield _client(server)

    @pytest.fixture
    def reopen(self, server: MemoryHttpServer) -> Callable[[MemoryBackend], MemoryBackend]:
        def reopen(old: MemoryBackend) -> MemoryBackend:
            old.close()
            return _client(server)

        return reopen


class TestHttpBackendOverDictStore(_HttpContract):
    __test__ = True

    @pytest.fixture
    def server(self, tmp_path: Path) -> Iterator[MemoryHttpServer]:
        server = MemoryHttpServer(prefix="/v1").start()
        yield server
        server.stop()


class TestHttpBackendOverSqlite(_HttpContract):
    __test__ = True

    @pytest.fixture
    def server(self, tmp_path: Path) -> Iterator[MemoryHttpServer]:
        store = SqliteBackend("server-side", tmp_path / "server.db")
        store.initialize()
        server = MemoryHttpServer(prefix="/api/memory", store=store).start()
        yield server
        server.stop()
        store.close()
