"""How many thread hops a REST request costs (counted, not timed: a unit-level check over the real in-thread
server). FastAPI runs every sync dependency, a sync route and a sync route's response validation each in its
thread pool; under load every hop is also a wait for the GIL. The hot routes are coroutines: search awaits the
async API (one hop into its pool), add queues for the service's group commit (no hop of its own), and the key
check reads a SQLite key store on the loop (a key store that waits on a server is asked from a thread)."""

from __future__ import annotations

import threading

import anyio.to_thread
import pytest

import memroute.deployment.fair_use
import memroute.server.fair_use


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


def _inline_budget(server, max_ms: float, *, in_process: bool = True):
    from memroute.server.api.lean import InlineBudget

    budget = InlineBudget(max_ms, in_process=in_process)
    server.app.state.inline_search = budget  # the server's own object, replaced for the test's setting
    return budget


def test_search_makes_one_pool_hop_and_the_key_check_none(memroute_server, hops, monkeypatch):
    ran_in = _pool_calls(monkeypatch)
    _inline_budget(memroute_server, 0)  # [server] inline_search_ms = 0: every search in a worker thread
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
    # validated on the loop, queued for the group commit's writer thread (memroute.deployment.group_commit): no pool hop
    assert hops == [] and ran_in == []
    assert commit.items == before + 1


def test_short_searches_run_on_the_loop_per_tenant_and_only_in_process(memroute_server, hops, monkeypatch):
    """``inline_search_ms``: a tenant's first search goes to a thread; once its searches average at most the
    limit they run on the event loop (no hop at all); a tenant whose searches take longer, or a deployment
    that waits on a server (``in_process=False``), keeps the thread."""
    assert memroute_server.mem.runs_in_process()  # the default deployment: SQLite, sqlite-vec, a local model
    # Loaded now, as `memroute serve` does at start-up: a model loaded by the first search would be in its time
    # (over the 1 s budget on a loaded machine) and keep the tenant off the loop.
    memroute_server.mem.warm_up()
    ran_in = _pool_calls(monkeypatch)
    budget = _inline_budget(memroute_server, 1000)
    a, b = memroute_server.client(memroute_server.tenant_a), memroute_server.client(memroute_server.tenant_b)
    try:
        assert a.post("/api/memory/search", json={"query": "warm up"}).status_code == 200
        assert [name for name, _ in ran_in] == ["search"]  # never seen: a thread
        ran_in.clear()
        hops.clear()
        for query in ("tea", "coffee", "lisbon"):
            response = a.post("/api/memory/search", json={"query": query})
            assert response.status_code == 200 and response.json()["hits"] == []
        assert ran_in == [] and hops == [] and budget.inline == 3
        assert b.post("/api/memory/search", json={"query": "tea"}).status_code == 200
        assert [name for name, _ in ran_in] == ["search"]  # another tenant: its own history
        budget.max_s = 0.0  # as if tenant A's searches had grown longer than the limit
        ran_in.clear()
        assert a.post("/api/memory/search", json={"query": "tea"}).status_code == 200
        assert [name for name, _ in ran_in] == ["search"]
        waits = _inline_budget(memroute_server, 1000, in_process=False)
        ran_in.clear()
        for _ in range(3):
            assert a.post("/api/memory/search", json={"query": "tea"}).status_code == 200
        assert [name for name, _ in ran_in] == ["search"] * 3 and waits.inline == 0
    finally:
        a.close()
        b.close()


def test_the_inline_budget_averages_and_forgets_the_oldest_tenant():
    from memroute.server.api.lean import InlineBudget

    budget = InlineBudget(2.0, in_process=True, tenants=2)
    assert not budget.allows("a")
    budget.record("a", 0.010)  # 10 ms: too long
    assert not budget.allows("a")
    for _ in range(12):
        budget.record("a", 0.001)
    assert budget.allows("a")  # the average came down below 2 ms
    budget.record("b", 0.001)
    budget.record("c", 0.001)  # a third tenant: "a" (the oldest) is forgotten
    assert not budget.allows("a") and budget.allows("b") and budget.allows("c")
    assert not InlineBudget(2.0, in_process=False).allows("b")


def test_a_key_store_that_waits_elsewhere_is_asked_from_a_thread(memroute_server, hops, monkeypatch):
    keys = memroute_server.mem.keys
    monkeypatch.setattr(keys, "in_process", False, raising=False)  # as a PostgreSQL key store declares
    # What is remembered is remembered for a few seconds; a loaded machine can spend them on the first
    # search, so the test holds them for the whole test (it is about the hops, not the expiry).
    monkeypatch.setattr(memroute.deployment.fair_use, "LIMITS_TTL_S", 3600.0)
    monkeypatch.setattr(memroute.server.fair_use, "KEY_TTL_S", 3600.0)
    with memroute_server.client(memroute_server.tenant_a) as client:
        hops.clear()
        assert client.post("/api/memory/search", json={"query": "tea"}).status_code == 200
        # The fair-use gate learns which key this is (from a thread too) and its limits, then remembers them
        # for a few seconds (memroute.server.fair_use): from the next request on, only the key check hops.
        assert hops[-1] == "principal_for_request" and all(hop in ("authenticate", "admit") for hop in hops[:-1])
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
