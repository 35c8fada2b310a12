"""The ``http`` backend against the real ``memroute serve``, with no endpoint mapping: ``base_url`` is the
server's ``/api/storage`` and ``api_key`` a memroute key. The whole backend conformance kit runs through it
(an admin key: the kit uses several tenants), and a tenant key is held to its tenant."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from memroute.config.serialization import structure_config
from memroute.errors import BackendError, BackendUnavailableError
from memroute.interfaces import MemoryAccess, MemoryBackend
from memroute.models import ListFilter, NewMemory, utcnow
from memroute.testing import BackendContract
from memroute_builtins.backends.http import HttpBackend, HttpBackendSettings
from tests.servers.memroute_server import MemrouteServer


def _client(server: MemrouteServer, secret: str) -> HttpBackend:
    settings = structure_config({"base_url": server.base_url + "/api/storage", "api_key": secret,
                                 "allow_private": True, "timeout": 10, "access_tracking": True},
                                HttpBackendSettings)
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
        now = utcnow()
        with pytest.raises(BackendError):  # 403: a tenant key records access only for its own tenant
            client.record_access("tenant-b", {other.id: MemoryAccess(count=1, at=now)})
        # naming its own tenant, another tenant's id is skipped by the server's backend
        assert client.record_access("tenant-a", {other.id: MemoryAccess(count=1, at=now),
                                                 mine.id: MemoryAccess(count=2, at=now)}) == 1
        assert served.mem.get(other.id, api_key_id="tenant-b").access_count == 0
        assert client.get(mine.id).access_count == 2
    finally:
        client.close()


def test_bad_access_batches_are_refused_whole(served):
    client = _client(served, served.admin)
    try:
        mine = client.create(NewMemory(api_key_id="tenant-a", key="batch", content="counted"))
        stamp = "2026-01-01T00:00:00Z"
        for body in ({"api_key_id": "tenant-a", "accesses": [{"id": mine.id, "count": 0, "at": stamp}]},
                     {"api_key_id": "", "accesses": []},
                     {"api_key_id": "tenant-a", "accesses": [{"id": mine.id, "count": 1, "at": "yesterday"}]},
                     {"api_key_id": "tenant-a", "accesses": [{"id": mine.id, "count": 1}], "extra": 1}):
            response = httpx.post(served.base_url + "/api/storage/memories/access", json=body,
                                  headers={"Authorization": f"Bearer {served.admin}"})
            assert response.status_code == 422, (body, response.text)
        assert client.get(mine.id).access_count == 0
    finally:
        client.close()


def test_a_bad_key_is_unavailable_with_a_hint(served):
    with pytest.raises(BackendUnavailableError, match="api_key"):
        _client(served, "mr_wrong")
