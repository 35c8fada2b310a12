"""Values that used to make the server answer 500 (issue 29, "Medium 3"), against the real server over a socket:
each is now a 4xx with a field-level message, and nothing is written.

- ``expiresAt: 9999-12-31T23:59:59-14:00`` is past ``datetime.max`` in UTC (``OverflowError``) on create, update
  and the storage protocol's create, patch and access;
- ``now=0001-01-02T00:00:00Z`` with ``retention_days=30`` underflowed the retention window on the storage search;
- a 30-digit ``access_count`` on a storage PUT overflowed SQLite's integer (503, where it must be 422);
- a lone surrogate (``"\\udfff"``, valid JSON but no UTF-8) in a proxy body could not be encoded once memories
  were injected.
"""

from __future__ import annotations

import pytest

from tests.integration.test_proxy import remember
from tests.servers.proxy_stack import proxy_stack

FAR = "9999-12-31T23:59:59-14:00"
ID = "11111111-1111-4111-8111-111111111111"


def _storage_memory(**changes):
    return {"id": ID, "api_key_id": "tenant-a", "type": "factual", "key": "s1", "content": "I like tea",
            "metadata": {}, **changes}


def _assert_field_error(response, field):
    assert response.status_code == 422, response.text
    assert field in {detail["field"] for detail in response.json()["error"]["details"]}, response.text


def test_an_expiry_past_the_calendar_is_a_422_everywhere(memroute_server):
    with memroute_server.client(memroute_server.tenant_a) as a:
        _assert_field_error(a.post("/api/memory", json={"content": "I like tea", "expiresAt": FAR}), "expires_at")
        memory_id = a.post("/api/memory", json={"content": "I like coffee", "key": "k"}).json()["id"]
        _assert_field_error(a.put(f"/api/memory/{memory_id}", json={"expiresAt": FAR}), "expires_at")
        _assert_field_error(a.post("/api/storage/memories", json=_storage_memory(expires_at=FAR)), "expires_at")
        assert a.post("/api/storage/memories", json=_storage_memory()).status_code == 200
        _assert_field_error(a.patch(f"/api/storage/memories/{ID}", json={"expires_at": FAR}), "expires_at")
        _assert_field_error(a.post("/api/storage/memories/access", json={
            "api_key_id": "tenant-a", "accesses": [{"id": ID, "count": 1, "at": FAR}]}), "at")
        assert a.get(f"/api/memory/{memory_id}").json()["memory"]["expiresAt"] is None  # nothing was written
        assert a.get(f"/api/storage/memories/{ID}").json()["expiresAt"] is None


def test_a_retention_window_before_the_calendar_is_a_422(memroute_server):
    with memroute_server.client(memroute_server.tenant_a) as a:
        r = a.get("/api/storage/memories/search", params={"api_key_id": "tenant-a", "query": "tea",
                                                           "now": "0001-01-02T00:00:00Z", "retention_days": 30})
    _assert_field_error(r, "now")


def test_an_access_count_past_64_bits_is_a_422(memroute_server):
    with memroute_server.client(memroute_server.tenant_a) as a:
        body = _storage_memory(created_at="2026-01-01T00:00:00Z", updated_at="2026-01-01T00:00:00Z",
                               access_count=10**30)
        _assert_field_error(a.put(f"/api/storage/memories/{ID}", json=body), "access_count")
        assert a.get(f"/api/storage/memories/{ID}").status_code == 404


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_a_lone_surrogate_in_a_proxy_body_passes_through_with_memories_injected(tmp_path, path):
    with proxy_stack(tmp_path) as stack:
        remember(stack, "alice", "I'll use Postgres for this project.")
        text = ('{"model": "gpt-4o", "max_tokens": 5, "messages": [{"role": "user", "content": "Be terse \\udfff"}, '
                '{"role": "assistant", "content": "OK."}, '
                '{"role": "user", "content": "Which database for this project?"}]}')
        headers = {"authorization": f"Bearer {stack.keys['alice']}", "content-type": "application/json",
                   "anthropic-version": "2023-06-01"}
        import httpx

        response = httpx.post(stack.url + path, content=text, headers=headers, timeout=30)
        assert response.status_code == 200, response.text
        assert response.headers["x-memroute-memories"] == "1"
        sent = stack.upstream.last["body"]
        assert {"role": "user", "content": "Be terse \udfff"} in sent["messages"]  # the escape, kept as sent
