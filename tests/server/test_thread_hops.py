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


def test_a_sync_route_still_answers_through_the_threadpool(memroute_server, hops):
    with memroute_server.client(memroute_server.tenant_a) as client:
        assert client.get("/api/memory").status_code == 200
    print("thread hops of GET /api/memory:", hops)
    assert "require_read" in hops and len(hops) >= 2  # the key check, the route (and its response validation)
