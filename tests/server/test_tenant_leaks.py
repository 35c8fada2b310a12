"""What one tenant's key can learn about the deployment and about other tenants (issue 29, "Low 7-8"), against the
real server over a socket with two tenant keys and an admin key.

- ``GET /api/memory/engine-status`` showed any read key server file paths, deployment-wide counts and, in the
  last prune's candidates, other tenants' memory ids; now a tenant key sees only what configures its searches.
- Another tenant's memory id answered 409 (storage create), 403 (storage PUT) and 422 (import): now the 404 of a
  memory that is not there.
"""

from __future__ import annotations

import json
import uuid

import pytest


def _strings(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, str):
        yield value


@pytest.fixture
def b_memory_id(memroute_server):
    with memroute_server.client(memroute_server.tenant_b) as b:
        return b.post("/api/memory", json={"content": "Bob's secret plan", "key": "plan"}).json()["id"]


def test_engine_status_shows_a_tenant_key_nothing_of_the_deployment(memroute_server, b_memory_id):
    server = memroute_server
    server.mem.prune_all()  # the maintenance report a tenant must not see
    server.app.state.maintenance.last_runs()
    with server.client(server.tenant_a) as a, server.client(server.admin) as admin:
        tenant = a.get("/api/memory/engine-status").json()
        full = admin.get("/api/memory/engine-status").json()
    data_dir = str(server.tmp_path)
    assert any(data_dir in text for text in _strings(full))  # the admin's view has the paths ...
    assert not any(data_dir in text for text in _strings(tenant))  # ... a tenant's has none
    assert not any(b_memory_id in text for text in _strings(tenant))
    assert b_memory_id not in json.dumps(tenant)
    for deployment_wide in ("maintenance", "group_commit"):
        assert deployment_wide not in tenant
    assert "rows" not in tenant["vector_store"] and "pending_reindex" not in tenant["vector_store"]
    assert tenant["keyword"]["available"] is True and tenant["embedding"]["source"] == full["embedding"]["source"]
    assert [b["name"] for b in tenant["backends"]["instances"]] == [b["name"] for b in full["backends"]["instances"]]
    assert all(set(b) <= {"name", "type"} for b in tenant["backends"]["instances"])


def _storage_memory(memory_id):
    return {"id": memory_id, "api_key_id": "tenant-a", "type": "factual", "key": f"k-{memory_id[:8]}",
            "content": "x", "metadata": {}}


def test_another_tenants_id_is_a_404_like_a_missing_memory(memroute_server, b_memory_id):
    server = memroute_server
    missing = str(uuid.uuid4())
    with server.client(server.tenant_a) as a, server.client(server.tenant_b) as b:
        not_found = a.get(f"/api/storage/memories/{missing}")
        assert not_found.status_code == 404
        created = a.post("/api/storage/memories", json=_storage_memory(b_memory_id))
        put = a.put(f"/api/storage/memories/{b_memory_id}",
                    json={**_storage_memory(b_memory_id), "created_at": "2026-01-01T00:00:00Z",
                          "updated_at": "2026-01-01T00:00:00Z"})
        line = json.dumps({**_storage_memory(b_memory_id), "created_at": "2026-01-01T00:00:00Z",
                           "updated_at": "2026-01-01T00:00:00Z"})
        imported = a.post("/api/memory/import", content=line.encode(), headers={"content-type": "application/x-ndjson"})
        for response in (created, put):
            assert response.status_code == 404 and response.json() == not_found.json()
        assert imported.status_code == 404
        assert "another" not in imported.text and "tenant" not in imported.json()["error"]["message"]
        assert b.get(f"/api/memory/{b_memory_id}").json()["memory"]["content"] == "Bob's secret plan"  # unchanged
