"""``GET /api/memory/{id}/history`` and ``POST /api/memory`` with ``consolidate``, over a real socket, with two
tenants and an admin key."""

from __future__ import annotations

import uuid


def test_history_and_consolidation_over_http(memroute_server):
    server = memroute_server
    with server.client(server.tenant_a) as a, server.client(server.tenant_b) as b, \
            server.client(server.admin) as admin:
        lisbon = a.post("/api/memory", json={"content": "Lives in Lisbon", "key": "profile:location"}).json()
        porto = b.post("/api/memory", json={"content": "Lives in Porto", "key": "profile:location"}).json()
        moved = a.post("/api/memory", json={"content": "Lives in Berlin", "key": "profile:location",
                                            "consolidate": True})
        assert moved.status_code == 201 and moved.json()["id"] == lisbon["id"]
        engineer = a.post("/api/memory", json={"content": "Works as a data engineer at Acme"}).json()
        restated = a.post("/api/memory", json={"content": "Works at Acme as a data engineer", "consolidate": True})
        assert restated.json()["id"] == engineer["id"]
        assert a.get("/api/memory").json()["total"] == 2 and b.get("/api/memory").json()["total"] == 1

        report = a.get(f"/api/memory/{lisbon['id']}/history")
        assert report.status_code == 200
        body = report.json()
        assert body["memoryId"] == lisbon["id"] and body["apiKeyId"] == "tenant-a" and body["recorded"] is True
        assert body["current"]["content"] == "Lives in Berlin"
        assert [(e["event"], e["actor"], e["oldContent"], e["newContent"]) for e in body["entries"]] == [
            ("created", "api", None, "Lives in Lisbon"), ("superseded", "api", "Lives in Lisbon", "Lives in Berlin")]

        # another tenant's id, a missing id and a malformed one: the same 404
        for client, memory_id in ((b, lisbon["id"]), (a, porto["id"]), (a, str(uuid.uuid4())), (a, "nope")):
            missing = client.get(f"/api/memory/{memory_id}/history")
            assert missing.status_code == 404 and missing.json()["error"]["message"] == "Memory not found"
        assert b.get(f"/api/memory/{lisbon['id']}/history", params={"apiKeyId": "tenant-a"}).status_code == 403

        # an admin names the tenant; a deleted memory's history stays readable
        assert a.delete(f"/api/memory/{lisbon['id']}").status_code == 200
        after = admin.get(f"/api/memory/{lisbon['id']}/history", params={"apiKeyId": "tenant-a"}).json()
        assert after["current"] is None and after["entries"][-1]["event"] == "deleted"
        assert after["entries"][-1]["oldContent"] == "Lives in Berlin"
        assert admin.get(f"/api/memory/{lisbon['id']}/history", params={"apiKeyId": "tenant-b"}).status_code == 404

        bad = a.post("/api/memory", json={"content": "x", "consolidate": "yes"})
        assert bad.status_code == 422 and "consolidate" in str(bad.json()["error"]["details"])


def test_history_is_in_the_openapi_document(memroute_server):
    with memroute_server.client() as anyone:
        paths = anyone.get("/openapi.json").json()["paths"]
    operation = paths["/api/memory/{memory_id}/history"]["get"]
    assert "404" in operation["responses"] and "200" in operation["responses"]
