"""Every REST route over real HTTP with two tenants: reads, writes, by-id, bulk, export / import, preview."""

from __future__ import annotations

import json
import time

import pytest

TEA = {"content": "I prefer green tea over coffee", "key": "preference:tea"}


def _error(response, status):
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "details"}
    return body["error"]


@pytest.fixture
def clients(memroute_server):
    a = memroute_server.client(memroute_server.tenant_a)
    b = memroute_server.client(memroute_server.tenant_b)
    admin = memroute_server.client(memroute_server.admin)
    yield a, b, admin
    for client in (a, b, admin):
        client.close()


def test_create_get_update_delete_stay_inside_the_tenant(clients):
    a, b, _ = clients
    created = a.post("/api/memory", json=TEA)
    assert created.status_code == 201
    body = created.json()
    assert body["success"] is True and body["id"] == body["memory"]["id"]  # the reference put the memory in `id`
    memory_id = body["id"]
    assert body["memory"]["apiKeyId"] == "tenant-a" and body["memory"]["key"] == "preference:tea"
    assert a.get(f"/api/memory/{memory_id}").json()["memory"]["content"] == TEA["content"]
    # tenant B sees a foreign id exactly as a missing one
    missing = "00000000-0000-4000-8000-000000000000"
    assert _error(b.get(f"/api/memory/{memory_id}"), 404) == _error(b.get(f"/api/memory/{missing}"), 404)
    _error(b.put(f"/api/memory/{memory_id}", json={"content": "hijacked"}), 404)
    _error(b.delete(f"/api/memory/{memory_id}"), 404)
    assert a.get(f"/api/memory/{memory_id}").json()["memory"]["content"] == TEA["content"]
    updated = a.put(f"/api/memory/{memory_id}", json={"content": "I prefer oolong", "metadata": {"src": "test"}})
    assert updated.json()["memory"]["content"] == "I prefer oolong"
    assert updated.json()["memory"]["metadata"] == {"src": "test"}
    assert a.delete(f"/api/memory/{memory_id}").json() == {"success": True}
    _error(a.get(f"/api/memory/{memory_id}"), 404)


def test_naming_another_tenant_is_403_unless_admin(clients):
    a, b, admin = clients
    _error(a.post("/api/memory", json={**TEA, "apiKeyId": "tenant-b"}), 403)
    _error(a.get("/api/memory", params={"apiKeyId": "tenant-b"}), 403)
    _error(a.post("/api/memory/search", json={"query": "tea", "apiKeyId": "tenant-b"}), 403)
    _error(a.post("/api/memory/retrieve-preview", json={"query": "tea", "apiKeyId": "tenant-b"}), 403)
    _error(a.get("/api/memory/export", params={"apiKeyId": "tenant-b"}), 403)
    _error(a.post("/api/memory/clear", json={"apiKeyId": "tenant-b"}), 403)
    _error(a.post("/api/memory/summarize", json={"apiKeyId": "tenant-b"}), 403)
    assert a.post("/api/memory", json={**TEA, "apiKeyId": "tenant-a"}).status_code == 201  # its own is fine
    made = admin.post("/api/memory", json={**TEA, "apiKeyId": "tenant-b"})
    assert made.status_code == 201 and made.json()["memory"]["apiKeyId"] == "tenant-b"
    memory_id = made.json()["id"]
    assert b.get(f"/api/memory/{memory_id}").status_code == 200
    assert admin.get(f"/api/memory/{memory_id}", params={"apiKeyId": "tenant-b"}).status_code == 200
    assert admin.get("/api/memory", params={"apiKeyId": "tenant-b"}).json()["total"] == 1


def test_list_filters_paging_and_stats(clients):
    a, b, _ = clients
    for i in range(5):
        a.post("/api/memory", json={"content": f"fact number {i} about tea", "key": f"k{i}",
                                    "type": "episodic" if i % 2 else "factual", "sessionId": "s1" if i < 2 else ""})
    b.post("/api/memory", json={"content": "tenant b's secret about tea", "key": "secret"})
    first = a.get("/api/memory", params={"limit": 2}).json()
    assert (first["total"], first["page"], first["limit"], first["totalPages"]) == (5, 1, 2, 3)
    second = a.get("/api/memory", params={"limit": 2, "page": 2}).json()
    assert second["page"] == 2 and {m["id"] for m in second["data"]}.isdisjoint(m["id"] for m in first["data"])
    assert a.get("/api/memory", params={"limit": 2, "offset": 4}).json()["page"] == 3
    assert first["stats"]["total"] == 5 and first["stats"]["byType"] == {"factual": 3, "episodic": 2,
                                                                          "procedural": 0, "semantic": 0}
    assert a.get("/api/memory", params={"type": "episodic"}).json()["total"] == 2
    assert a.get("/api/memory", params={"sessionId": "s1"}).json()["total"] == 2
    assert a.get("/api/memory", params={"q": "NUMBER 3"}).json()["total"] == 1
    assert "secret" not in json.dumps(a.get("/api/memory", params={"limit": 200}).json())


def test_search_counts_accesses_and_list_orders_by_them(clients, memroute_server):
    a, b, admin = clients
    ids = [a.post("/api/memory", json={"content": f"fact {i} about tea", "key": f"k{i}"}).json()["id"]
           for i in range(3)]
    theirs = b.post("/api/memory", json={"content": "tenant b's tea", "key": "k0"}).json()["id"]
    fresh = a.get(f"/api/memory/{ids[1]}").json()["memory"]
    assert (fresh["accessCount"], fresh["lastAccessedAt"]) == (0, None)
    found = a.post("/api/memory/search", json={"query": "fact 1 about tea", "strategy": "exact", "limit": 1}).json()
    assert [h["memory"]["id"] for h in found["hits"]] == [ids[2]]  # exact: the newest
    preview = admin.post("/api/memory/injection-preview", json={"query": "tea", "apiKeyId": "tenant-a"})
    assert preview.status_code == 200 and preview.json()["injected"] is False  # memory is off here
    a.post("/api/memory/retrieve-preview", json={"query": "tea"})
    memroute_server.mem.flush()
    listed = a.get("/api/memory", params={"orderBy": "lastAccessedAt"}).json()["data"]
    assert listed[0]["id"] == ids[2] and listed[0]["accessCount"] == 1
    assert listed[0]["lastAccessedAt"].endswith("Z")
    assert [m["accessCount"] for m in listed[1:]] == [0, 0], "previews must not count as accesses"
    snake = a.get("/api/memory", params={"orderBy": "last_accessed_at", "orderDir": "asc"}).json()["data"]
    assert snake[-1]["id"] == ids[2]
    assert b.get(f"/api/memory/{theirs}").json()["memory"]["accessCount"] == 0


@pytest.mark.parametrize("params, field", [({"limit": 0}, "limit"), ({"limit": 201}, "limit"),
                                           ({"limit": "x"}, "limit"), ({"page": 0}, "page"),
                                           ({"offset": -1}, "offset"), ({"type": "gossip"}, "type"),
                                           ({"orderBy": "content"}, "orderBy")])
def test_bad_list_queries_are_422_never_500(clients, params, field):
    a, _, _ = clients
    assert field in [d["field"] for d in _error(a.get("/api/memory", params=params), 422)["details"]]


@pytest.mark.parametrize("body, field", [({}, "content"), ({"content": ""}, "content"),
                                         ({"content": "x", "type": "gossip"}, "type"),
                                         ({"content": "x", "metadata": []}, "metadata"),
                                         ({"content": "x", "expiresAt": "tomorrow"}, "expiresAt"),
                                         ({"content": "x", "surprise": True}, "surprise"),
                                         ({"content": 5}, "content")])
def test_bad_creates_are_422_and_write_nothing(clients, body, field):
    a, _, _ = clients
    assert field in [d["field"] for d in _error(a.post("/api/memory", json=body), 422)["details"]]
    assert a.get("/api/memory").json()["total"] == 0


def test_bad_updates(clients):
    a, _, _ = clients
    memory_id = a.post("/api/memory", json=TEA).json()["id"]
    _error(a.put(f"/api/memory/{memory_id}", json={}), 422)
    _error(a.put(f"/api/memory/{memory_id}", json={"apiKeyId": "tenant-b"}), 422)  # an owner cannot change
    _error(a.put(f"/api/memory/{memory_id}", json={"type": "gossip"}), 422)
    other = a.post("/api/memory", json={"content": "coffee is fine", "key": "preference:coffee"}).json()["id"]
    _error(a.put(f"/api/memory/{other}", json={"key": "preference:tea"}), 409)
    _error(a.get("/api/memory/" + "x" * 300), 404)


def test_search_and_preview_are_tenant_scoped(clients):
    a, b, _ = clients
    a.post("/api/memory", json=TEA)
    b.post("/api/memory", json={"content": "I prefer black tea with milk", "key": "preference:tea"})
    hits = a.post("/api/memory/search", json={"query": "tea"}).json()["hits"]
    assert [h["memory"]["apiKeyId"] for h in hits] == ["tenant-a"]
    preview = a.post("/api/memory/retrieve-preview", json={"query": "tea", "maxTokens": 100}).json()
    assert [item["content"] for item in preview["memories"]] == [TEA["content"]]
    assert preview["budgetMaxTokens"] == 100 and preview["resolution"]["strategyUsed"]
    _error(a.post("/api/memory/retrieve-preview", json={"query": ""}), 422)
    _error(a.post("/api/memory/search", json={"query": "tea", "strategy": "psychic"}), 422)
    _error(a.post("/api/memory/search", json={"query": "tea", "maxTokens": 99999}), 422)


def test_clear_export_import_round_trip_per_tenant(clients):
    a, b, _ = clients
    for i in range(3):
        a.post("/api/memory", json={"content": f"tenant a fact {i}", "key": f"a{i}"})
    b.post("/api/memory", json={"content": "tenant b fact", "key": "b0"})
    exported = a.get("/api/memory/export")
    assert exported.headers["content-type"].startswith("application/x-ndjson")
    lines = exported.text.splitlines()
    assert len(lines) == 3 and all(json.loads(line)["api_key_id"] == "tenant-a" for line in lines)
    dry = a.post("/api/memory/clear", json={"dryRun": True}).json()
    assert (dry["matched"], dry["deleted"]) == (3, 0)
    assert a.post("/api/memory/clear", json={}).json()["deleted"] == 3
    assert b.get("/api/memory").json()["total"] == 1  # tenant B untouched
    assert a.post("/api/memory/import", content=exported.content).json() == {"imported": 3, "apiKeyId": "tenant-a"}
    assert a.get("/api/memory").json()["total"] == 3
    # B cannot import A's lines, and a bad line anywhere writes nothing
    error = _error(b.post("/api/memory/import", content=exported.content), 422)
    assert error["details"][0]["field"] == "line 1"
    bad = lines[0] + "\n" + "{not json}\n"
    _error(b.post("/api/memory/import", content=bad.encode()), 422)
    assert b.get("/api/memory").json()["total"] == 1


def test_import_fills_in_a_hand_written_lines_id_and_times_for_the_callers_tenant(clients):
    a, b, _ = clients
    lines = [json.dumps({"key": "preference:tea", "content": "Drinks green tea"}),
             json.dumps({"key": "fact:city", "content": "Lives in Lisbon", "created_at": "2025-06-01T09:30:00Z"})]
    answer = a.post("/api/memory/import", content="\n".join(lines).encode())
    assert answer.json() == {"imported": 2, "apiKeyId": "tenant-a"}
    data = {m["key"]: m for m in a.get("/api/memory").json()["data"]}
    assert len({m["id"] for m in data.values()}) == 2
    assert data["fact:city"]["createdAt"].startswith("2025-06-01T09:30:00")
    assert data["fact:city"]["updatedAt"] == data["fact:city"]["createdAt"]
    assert b.get("/api/memory").json()["total"] == 0  # the lines went to the caller's tenant only
    # a line missing what cannot be filled in is named, and nothing of the body is written
    error = _error(b.post("/api/memory/import", content=(lines[0] + "\n" + json.dumps({"key": "k"})).encode()), 422)
    assert error["details"][0]["field"] == "line 2" and "content" in error["message"]
    assert b.get("/api/memory").json()["total"] == 0


def test_summarize_is_a_dry_run_by_default_and_tenant_scoped(clients):
    a, _, _ = clients
    a.post("/api/memory", json=TEA)
    report = a.post("/api/memory/summarize", json={}).json()
    assert report["dryRun"] is True and report["deletedCount"] == 0
    _error(a.post("/api/memory/summarize", json={"olderThanDays": 0}), 422)


def test_operations_routes(clients):
    a, _, _ = clients
    a.post("/api/memory", json=TEA)
    health = a.get("/api/memory/health").json()
    assert health["working"] is True and a.get("/api/memory").json()["total"] == 1  # the probe wrote nothing
    status = a.get("/api/memory/engine-status").json()
    assert {"keyword", "embedding", "vector_store"} <= set(status) and "data_dir" not in status
    assert "maintenance" not in status  # deployment-wide: an admin key sees it (tests/server/test_tenant_leaks.py)
    # OmniRoute's qdrant block, off where the vector store is not Qdrant (its error, an address, is admin-only)
    assert status["qdrant"] == {"enabled": False, "healthy": False, "latencyMs": None}
    providers = a.get("/api/memory/embedding-providers").json()["providers"]
    assert any(p["active"] for p in providers)
    started = a.post("/api/memory/reindex", json={"force": True})
    assert started.status_code in (202, 409)
    deadline = time.monotonic() + 30
    while a.get("/api/memory/reindex").json()["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert a.get("/api/memory/reindex").json()["state"] == "done"
    _error(a.post("/api/memory/reindex", json={"force": "yes please"}), 422)


def test_settings_routes(clients):
    a, _, admin = clients
    assert a.get("/api/settings/memory").json()["maxTokens"] == 2000
    _error(a.put("/api/settings/memory", json={"maxTokens": 10}), 403)  # settings need admin
    changed = admin.put("/api/settings/memory", json={"maxTokens": 10, "strategy": "semantic"}).json()
    assert changed["maxTokens"] == 10 and set(changed["overrides"]) == {"maxTokens", "strategy"}
    assert a.get("/api/settings/memory").json()["strategy"] == "semantic"
    for bad in ({"maxTokens": 16001}, {"retentionDays": -1}, {"strategy": "psychic"}, {"primaryBackend": "x"},
                {"enabled": "yes"}):
        _error(admin.put("/api/settings/memory", json=bad), 422)
    assert admin.get("/api/settings/qdrant").json()["enabled"] is False  # no qdrant store configured
    _error(admin.get("/api/settings/qdrant/health"), 404)


def test_write_scope_is_needed_for_changes(memroute_server):
    _, reader_secret = memroute_server.create_key("reader", scopes="read", tenant="tenant-a")
    with memroute_server.client(reader_secret) as reader:
        assert reader.get("/api/memory").status_code == 200
        for response in (reader.post("/api/memory", json=TEA), reader.post("/api/memory/clear", json={}),
                         reader.post("/api/memory/import", content=b""), reader.post("/api/memory/reindex", json={}),
                         reader.put("/api/memory/x", json={"content": "y"}), reader.delete("/api/memory/x")):
            _error(response, 403)
