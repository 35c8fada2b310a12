"""The HTTP backend inside memroute proper (``memroute.open`` → manager → backend), against the loopback
protocol server: two memroute instances sharing one memory server (the "fleet" set-up), and the HTTP backend
as a fallback that receives the primary's writes through the outbox."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import memroute
from memroute.models import ListFilter
from tests.servers.memory_http_server import MemoryHttpServer


@pytest.fixture
def server() -> Iterator[MemoryHttpServer]:
    server = MemoryHttpServer(prefix="/api/memory", api_key="fleet-token").start()
    yield server
    server.stop()


def _http(server: MemoryHttpServer) -> dict[str, Any]:
    return {"type": "http", "base_url": server.url, "api_key": "fleet-token", "allow_private": True, "timeout": 5}


def _open(tmp_path: Path, backends: dict[str, Any]) -> memroute.service.Memroute:
    return memroute.open({
        "backends": backends,
        "embedding": {"source": "none"},
        "vectors": {"store": "none"},
        "memory": {"strategy": "hybrid"},
    }, data_dir=str(tmp_path))


def test_two_instances_share_one_memory_server(server: MemoryHttpServer, tmp_path: Path) -> None:
    with _open(tmp_path / "a", {"primary": "shared", "shared": _http(server)}) as first, \
            _open(tmp_path / "b", {"primary": "shared", "shared": _http(server)}) as second:
        stored = first.add(api_key_id="key-1", content="The deploy window is Tuesday at 14:00", key="deploy")
        first.add(api_key_id="key-2", content="Tuesday is a holiday here", key="holiday")
        got = second.get(stored.id, api_key_id="key-1")
        assert got is not None and got.same_as(stored)
        result = second.search("deploy Tuesday", api_key_id="key-1")
        assert [hit.memory.id for hit in result] == [stored.id]  # key-2's memory never shows for key-1
        assert second.get(stored.id, api_key_id="key-2") is None  # tenant-scoped over HTTP too
        assert second.update(stored.id, api_key_id="key-1", content="The deploy window moved to Wednesday")
        assert first.get(stored.id, api_key_id="key-1").content == "The deploy window moved to Wednesday"  # type: ignore[union-attr]


def test_an_http_fallback_receives_the_primarys_writes(server: MemoryHttpServer, tmp_path: Path) -> None:
    backends = {"primary": "main", "fallbacks": ["remote"], "main": {"type": "sqlite"}, "remote": _http(server)}
    with _open(tmp_path, backends) as service:
        memory = service.add(api_key_id="key-1", content="Prefers dark mode", key="pref:theme")
        assert service.flush(timeout=30)
        on_server = server.store.get(memory.id)
        assert on_server is not None and on_server.same_as(memory)
        assert service.delete(memory.id, api_key_id="key-1")
        assert service.flush(timeout=30)
        assert server.store.list(ListFilter(api_key_id="key-1")).total == 0
