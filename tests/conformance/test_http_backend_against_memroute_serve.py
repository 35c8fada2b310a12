"""The ``http`` backend against the real ``memroute serve``, with no endpoint mapping: ``base_url`` is the
server's ``/api/storage`` and ``api_key`` a memroute key. The whole backend conformance kit runs through it
(an admin key: the kit uses several tenants), and a tenant key is held to its tenant."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memroute.errors import BackendError, BackendUnavailableError
from memroute.interfaces import MemoryBackend
from memroute.models import ListFilter, NewMemory
from memroute.serialization import structure_config
from memroute.testing import BackendContract
from memroute_builtins.backends.http import HttpBackend, HttpBackendSettings
from tests.servers.memroute_server import MemrouteServer


def _client(server: MemrouteServer, secret: str) -> HttpBackend:
    settings = structure_config({"base_url": server.base_url + "/api/storage", "api_key": secret,
                                 "allow_private": True, "timeout": 10}, HttpBackendSettings)
    backend = HttpBackend("remote-memroute", settings)
    backend.initialize()
    return backend


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[MemrouteServer]:
    server = MemrouteServer(tmp_path_factory.mktemp("served")).start()
    yield server
    server.stop()


class TestHttpBackendAgainstMemrouteServe(BackendContract):
    @pytest.fixture
    def backend(self, served: MemrouteServer, tmp_path: Path) -> Iterator[MemoryBackend]:
        # A fresh deployment per test would restart the server; a fresh admin key and a clean store suffice.
        served.mem.storage  # noqa: B018 - the server is up
        for memory in list(served.mem.export_all()):
            served.mem.storage.delete(memory.id, None)
        client = _client(served, served.admin)
        yield client
        client.close()

    @pytest.fixture
    def reopen(self, served: MemrouteServer) -> Callable[[MemoryBackend], MemoryBackend]:
        def reopen(old: MemoryBackend) -> MemoryBackend:
            old.close()
            return _client(served, served.admin)

        return reopen


def test_a_tenant_key_is_held_to_its_tenant(served):
    client = _client(served, served.tenant_a)
    try:
        mine = client.create(NewMemory(api_key_id="tenant-a", key="k", content="mine"))
        assert client.get(mine.id).content == "mine"
        with pytest.raises(BackendError):
            client.create(NewMemory(api_key_id="tenant-b", key="k", content="not mine"))
        with pytest.raises(BackendError):
            client.list(ListFilter(api_key_id="tenant-b"))
        other = served.mem.add(api_key_id="tenant-b", content="theirs", key="theirs")
        assert client.get(other.id) is None and client.delete(other.id) is False
    finally:
        client.close()


def test_a_bad_key_is_unavailable_with_a_hint(served):
    with pytest.raises(BackendUnavailableError, match="api_key"):
        _client(served, "mr_wrong")
