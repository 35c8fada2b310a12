"""How many thread hops a REST request costs (counted, not timed: a unit-level check over the real in-thread
server). FastAPI runs every sync dependency, a sync route and a sync route's response validation each in its
thread pool; under load every hop is also a wait for the GIL. The hot routes are coroutines that await the
async API (one hop into its pool); the only sync dependency left is the key check (it reads the key store)."""

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


@pytest.mark.parametrize(("method", "path", "body", "service_method"), [
    ("POST", "/api/memory/search", {"query": "tea"}, "search"),
    ("POST", "/api/memory", {"content": "I prefer green tea", "key": "tea"}, "add"),
])
def test_hot_routes_make_one_pool_hop_besides_the_key_check(memroute_server, hops, monkeypatch, method, path, body,
                                                             service_method):
    ran_in = _pool_calls(monkeypatch)
    with memroute_server.client(memroute_server.tenant_a) as client:
        client.post("/api/memory/search", json={"query": "warm up"})  # connections and models, not counted
        hops.clear()
        ran_in.clear()
        response = client.request(method, path, json=body)
    assert response.status_code in (200, 201), response.text
    # require(scope), the key lookup, is the one hop into FastAPI's pool; the route itself awaits the async API
    assert hops == ["require_read" if service_method == "search" else "require_write"]
    assert len(ran_in) == 1 and ran_in[0][0] == service_method and ran_in[0][1].startswith("memroute-aio")


def test_the_other_memory_routes_await_the_async_api_too(memroute_server, hops, monkeypatch):
    """GET one / list, PUT and DELETE: each service call is one hop into the async API's pool (a sync route
    cost the key check, the route and its response validation: three hops into FastAPI's pool)."""
    ran_in = _pool_calls(monkeypatch)
    with memroute_server.client(memroute_server.tenant_a) as client:
        memory_id = client.post("/api/memory", json={"content": "hops", "key": "hops"}).json()["id"]
        for method, path, body, scope, calls in [
            ("GET", f"/api/memory/{memory_id}", None, "require_read", ["get"]),
            ("GET", "/api/memory", None, "require_read", ["list", "stats"]),
            ("PUT", f"/api/memory/{memory_id}", {"content": "hops, changed"}, "require_write", ["get", "update"]),
            ("DELETE", f"/api/memory/{memory_id}", None, "require_write", ["get", "delete"]),
            ("GET", f"/api/memory/{memory_id}", None, "require_read", ["get"]),  # gone now: a 404
        ]:
            hops.clear()
            ran_in.clear()
            response = client.request(method, path, json=body)
            assert response.status_code in (200, 404), response.text
            assert hops == [scope], (method, path, hops)
            assert sorted(name for name, _ in ran_in) == sorted(calls), (method, path, ran_in)
            assert all(thread.startswith("memroute-aio") for _, thread in ran_in)
        assert response.status_code == 404
