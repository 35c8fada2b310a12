"""How many thread hops a REST request costs (counted, not timed: a unit-level check over the real in-thread
server). FastAPI runs every sync dependency, a sync route and a sync route's response validation each in its
thread pool; under load every hop is also a wait for the GIL. The hot routes are coroutines: search awaits the
async API (one hop into its pool), add queues for the service's group commit (no hop of its own), and the key
check reads a SQLite key store on the loop (a key store that waits on a server is asked from a thread)."""

from __future__ import annotations

import threading

import anyio.to_thread
import pytest


@pytest.fixture
def hops(monkeypatch):
    counted: list[str] = []
    real = anyio.to_thread.run_sync

    async def counting(func, *args, **kwargs):
        target = getattr(func, "func", func)  # starlette hands over functools.partial objects
        counted.append(getattr(target, "__name__", repr(target)))
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counting)  # instrumentation only: the real call runs
    return counted


def _pool_calls(monkeypatch):
    """(service method, thread) of every call the async API runs in its pool."""
    from memroute.aio import AsyncMemroute

    seen: list[tuple[str, str]] = []
    real = AsyncMemroute._run

    async def recording(self, fn, *args, **kwargs):
        def run(*a, **k):
            seen.append((fn.__name__, threading.current_thread().name))
            return fn(*a, **k)

        return await real(self, run, *args, **kwargs)

    monkeypatch.setattr(AsyncMemroute, "_run", recording)  # instrumentation only: the real call runs
    return seen


def test_search_makes_one_pool_hop_and_the_key_check_none(memroute_server, hops, monkeypatch):
    ran_in = _pool_calls(monkeypatch)
    with memroute_server.client(memroute_server.tenant_a) as client:
        client.post("/api/memory/search", json={"query": "warm up"})  # connections and models, not counted
        hops.clear()
        ran_in.clear()
        response = client.post("/api/memory/search", json={"query": "tea"})
    assert response.status_code == 200, response.text
    # require(scope) reads the SQLite key store on the loop (in_process); the route awaits the async API once
    assert hops == []
    assert len(ran_in) == 1 and ran_in[0][0] == "search" and ran_in[0][1].startswith("memroute-aio")


def test_add_makes_no_thread_hop_of_its_own(memroute_server, hops, monkeypatch):
    ran_in = _pool_calls(monkeypatch)
    commit = memroute_server.mem._adds
    with memroute_server.client(memroute_server.tenant_a) as client:
        client.post("/api/memory", json={"content": "warm up"})
        hops.clear()
        ran_in.clear()
        before = commit.items
        response = client.post("/api/memory", json={"content": "I prefer green tea", "key": "tea"})
    assert response.status_code == 201, response.text
    # validated on the loop, queued for the group commit's writer thread (memroute.group_commit): no pool hop
    assert hops == [] and ran_in == []
    assert commit.items == before + 1


def test_a_key_store_that_waits_elsewhere_is_asked_from_a_thread(memroute_server, hops, monkeypatch):
    keys = memroute_server.mem.keys
    monkeypatch.setattr(keys, "in_process", False, raising=False)  # as a PostgreSQL key store declares
    with memroute_server.client(memroute_server.tenant_a) as client:
        hops.clear()
        assert client.post("/api/memory/search", json={"query": "tea"}).status_code == 200
    assert hops == ["principal_for_request"]


def test_the_other_memory_routes_await_the_async_api_too(memroute_server, hops, monkeypatch):
    """GET one / list, PUT and DELETE: each service call is one hop into the async API's pool (a sync route
    cost the key check, the route and its response validation: three hops into FastAPI's pool); the key check
    itself makes none."""
    ran_in = _pool_calls(monkeypatch)
    with memroute_server.client(memroute_server.tenant_a) as client:
        memory_id = client.post("/api/memory", json={"content": "hops", "key": "hops"}).json()["id"]
        for method, path, body, calls in [
            ("GET", f"/api/memory/{memory_id}", None, ["get"]),
            ("GET", "/api/memory", None, ["list", "stats"]),
            ("PUT", f"/api/memory/{memory_id}", {"content": "hops, changed"}, ["get", "update"]),
            ("DELETE", f"/api/memory/{memory_id}", None, ["get", "delete"]),
            ("GET", f"/api/memory/{memory_id}", None, ["get"]),  # gone now: a 404
        ]:
            hops.clear()
            ran_in.clear()
            response = client.request(method, path, json=body)
            assert response.status_code in (200, 404), response.text
            assert hops == [], (method, path, hops)  # the key check reads the SQLite key store on the loop
            assert sorted(name for name, _ in ran_in) == sorted(calls), (method, path, ran_in)
            assert all(thread.startswith("memroute-aio") for _, thread in ran_in)
        assert response.status_code == 404
