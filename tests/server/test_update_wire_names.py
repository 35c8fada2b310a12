"""PUT /api/memory/{id} takes the camelCase wire names (sessionId, expiresAt) like every other body: the
handler once passed them to the service as-is and answered 400 'unknown field sessionId'."""

from __future__ import annotations

from typing import Any


def test_put_accepts_camel_case_session_and_expiry(memroute_server: Any) -> None:
    with memroute_server.client(memroute_server.tenant_a) as client:
        created = client.post("/api/memory", json={"content": "Uses Neovim", "key": "pref:editor"}).json()
        r = client.put(f"/api/memory/{created['id']}",
                       json={"sessionId": "s-9", "expiresAt": "2999-01-01T00:00:00Z", "content": "Uses Helix"})
        assert r.status_code == 200, r.text
        memory = r.json()["memory"]
        assert memory["sessionId"] == "s-9" and memory["content"] == "Uses Helix"
        assert memory["expiresAt"].startswith("2999-01-01")
        cleared = client.put(f"/api/memory/{created['id']}", json={"sessionId": None})
        assert cleared.status_code == 200 and cleared.json()["memory"]["sessionId"] is None
