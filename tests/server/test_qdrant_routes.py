"""``/api/settings/qdrant/...`` on a deployment whose vector store is Qdrant (qdrant-client local mode on disk,
real HTTP on loopback), and a typed 404 everywhere else."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from memroute.models import utcnow
from tests.servers.memroute_server import MemrouteServer
from tests.servers.qdrant_rest import QdrantRestServer

OLD_ID = "5d0c8a4e-0d7f-4e8e-8f0a-1b2c3d4e5f60"


@pytest.fixture(scope="module")
def qdrant_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("qdrant-routes")
    config = {"vectors": {"store": "qdrant", "options": {"qdrant": {"path": str(root / "qdrant")}}},
              "memory": {"delete_after_days": 30}}
    with MemrouteServer(root, config=config) as server:
        yield server


def test_the_view_names_the_collection_and_never_a_secret(qdrant_server):
    with qdrant_server.client(qdrant_server.admin) as admin, qdrant_server.client(qdrant_server.tenant_a) as a:
        view = admin.get("/api/settings/qdrant").json()
        assert view["enabled"] and view["mode"] == "local" and view["collection"] == "memroute_memories"
        assert view["available"] and "apiKey" not in view and not view["hasApiKey"] and view["apiKeyMasked"] is None
        # local mode (a folder one process locks) is the file's: a PUT cannot move it, only confirm it
        assert admin.put("/api/settings/qdrant", json={"enabled": True}).json()["mode"] == "local"
        moved = admin.put("/api/settings/qdrant", json={"collection": "elsewhere"})
        assert moved.status_code == 422 and moved.json()["error"]["details"][0]["field"] == "host"
        assert admin.put("/api/settings/qdrant", json={"enabled": None}).status_code == 200
        assert admin.get("/api/settings/qdrant/health").json()["ok"] is True
        assert a.get("/api/settings/qdrant").status_code == 403  # a tenant key does not see deployment settings


def test_health_and_engine_status_carry_a_real_probe_with_its_latency(qdrant_server):
    # The reference's shapes: qdrant/health {ok, latencyMs, error}; engine-status qdrant {enabled, healthy, ...}.
    with qdrant_server.client(qdrant_server.admin) as admin, qdrant_server.client(qdrant_server.tenant_a) as a:
        health = admin.get("/api/settings/qdrant/health").json()
        assert health["ok"] is True and health["error"] is None
        assert isinstance(health["latencyMs"], float) and health["latencyMs"] >= 0
        block = a.get("/api/memory/engine-status").json()["qdrant"]
        assert block["enabled"] and block["healthy"] and block["latencyMs"] >= 0
        assert "error" not in block  # a probe's error can name the Qdrant server's address: operators only
        assert admin.get("/api/memory/engine-status").json()["qdrant"]["error"] is None
        embedding = a.get("/api/memory/engine-status").json()["embedding"]
        models = a.get("/api/settings/qdrant/embedding-models").json()["models"]
        assert models == [{"id": f"{embedding['source']}/{embedding['model']}", "name": embedding["model"],
                           "dimensions": embedding["dimensions"]}]


def test_a_qdrant_server_that_stops_answering_is_reported_unhealthy(tmp_path):
    qdrant = QdrantRestServer().start()
    config = {"vectors": {"store": "qdrant", "options": {"qdrant": {"url": qdrant.url, "timeout": 2}}}}
    try:
        with MemrouteServer(tmp_path, config=config) as server, server.client(server.admin) as admin:
            assert admin.get("/api/settings/qdrant/health").json()["ok"] is True
            qdrant.stop()
            down = admin.get("/api/settings/qdrant/health").json()
            assert down["ok"] is False and down["error"] and down["latencyMs"] is not None
            block = admin.get("/api/memory/engine-status").json()["qdrant"]
            assert block["enabled"] and not block["healthy"] and block["error"]
    finally:
        qdrant.stop()


def test_search_runs_on_qdrant_for_the_callers_tenant_only(qdrant_server):
    with qdrant_server.client(qdrant_server.tenant_a) as a, qdrant_server.client(qdrant_server.tenant_b) as b:
        assert a.post("/api/memory", json={"content": "I prefer green tea", "key": "pref:tea"}).status_code == 201
        assert b.post("/api/memory", json={"content": "I prefer black tea", "key": "pref:tea"}).status_code == 201
        qdrant_server.mem.flush(timeout=30)
        found = a.post("/api/settings/qdrant/search", json={"query": "which tea do I drink", "topK": 50}).json()
        assert found["ok"] and found["provenance"]["vectorStore"] == "qdrant" and found["error"] is None
        assert [h["memory"]["content"] for h in found["results"]] == ["I prefer green tea"]
        assert found["results"][0]["ranks"] == {"vector": 1}
        other = b.post("/api/settings/qdrant/search", json={"query": "which tea do I drink"}).json()
        assert [h["memory"]["apiKeyId"] for h in other["results"]] == ["tenant-b"]
        assert a.post("/api/settings/qdrant/search", json={"query": "tea", "apiKeyId": "tenant-b"}).status_code == 403
        for bad in ({"query": ""}, {"query": "tea", "topK": 0}, {"query": "tea", "topK": 51},
                    {"query": "tea", "topK": "5"}, {"query": "tea", "tenant": "x"}):
            answer = a.post("/api/settings/qdrant/search", json=bad)
            assert answer.status_code == 422 and answer.json()["error"]["details"], (bad, answer.text)


def test_cleanup_deletes_memories_with_their_points_and_counts_for_real(qdrant_server):
    created = (utcnow() - timedelta(days=100)).isoformat()
    line = json.dumps({"id": OLD_ID, "api_key_id": "tenant-a", "type": "factual", "key": "pref:old",
                       "content": "I used to drink oolong", "metadata": {}, "created_at": created,
                       "updated_at": created})
    with qdrant_server.client(qdrant_server.tenant_a) as a, qdrant_server.client(qdrant_server.tenant_b) as b:
        assert a.post("/api/memory/import", content=line,
                      headers={"content-type": "application/x-ndjson"}).status_code == 200
        b.post("/api/memory", json={"content": "I like rooibos", "key": "pref:rooibos"})
        qdrant_server.mem.flush(timeout=30)
        assert OLD_ID in qdrant_server.mem._retrieval.vector_store.ids("tenant-a")
        b_points = len(qdrant_server.mem._retrieval.vector_store.ids("tenant-b"))

        dry = a.post("/api/settings/qdrant/cleanup", json={"dryRun": True}).json()
        assert dry["candidates"] == [OLD_ID] and dry["deletedCount"] == 0 and dry["retentionDays"] == 0
        done = a.post("/api/settings/qdrant/cleanup", json={}).json()
        assert done["deletedCount"] == 1 and done["reasons"]["retention"] == 1
        qdrant_server.mem.flush(timeout=30)
        assert a.get(f"/api/memory/{OLD_ID}").status_code == 404
        assert OLD_ID not in qdrant_server.mem._retrieval.vector_store.ids("tenant-a")  # no orphaned point
        assert len(qdrant_server.mem._retrieval.vector_store.ids("tenant-b")) == b_points  # tenant b untouched
        assert a.post("/api/settings/qdrant/cleanup", json={}).json()["deletedCount"] == 0
        assert a.post("/api/settings/qdrant/cleanup", json={"apiKeyId": "tenant-b"}).status_code == 403
        assert a.post("/api/settings/qdrant/cleanup", json={"dryRun": "yes"}).status_code == 422


def test_every_qdrant_route_is_a_typed_404_without_a_qdrant_store(memroute_server):
    with memroute_server.client(memroute_server.admin) as admin:
        view = admin.get("/api/settings/qdrant").json()  # the settings view answers: Qdrant is off
        assert view["enabled"] is False and view["active"] is False and view["hasApiKey"] is False
        for method, path, body in (("GET", "/api/settings/qdrant/health", None),
                                   ("POST", "/api/settings/qdrant/search", {"query": "tea"}),
                                   ("POST", "/api/settings/qdrant/cleanup", {})):
            answer = admin.request(method, path, json=body)
            assert answer.status_code == 404, (path, answer.text)
            assert "qdrant" in answer.json()["error"]["message"]
