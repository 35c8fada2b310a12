"""The smaller findings of issue 29 ("Low 10"), against the real server over a socket: ``/docs`` and ``/redoc``
load only pinned, hash-checked scripts under a content security policy; the deployment's databases are created
readable by their owner only; a 405 lists every method the path serves; and ``/openapi.json`` agrees with what
the server accepts (bounds, integers written as 289.0) and documents the statuses every route can answer."""

from __future__ import annotations

import base64
import hashlib
import re
import stat

import httpx
import pytest


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_docs_pages_load_pinned_hash_checked_scripts_under_a_policy(memroute_server, path):
    page = httpx.get(memroute_server.base_url + path)
    assert page.status_code == 200
    policy = page.headers["content-security-policy"]
    assert policy.startswith("default-src 'none'") and "frame-ancestors 'none'" in policy
    external = re.findall(r'(?:src|href)="(https://[^"]+)"([^>]*)>', page.text)
    assert external, "the page loads no asset?"
    for url, attributes in external:
        assert re.search(r"@\d+\.\d+\.\d+/", url), f"{url} is not pinned to one version"
        assert re.search(r'integrity="sha384-[A-Za-z0-9+/=]{64}"', attributes), f"{url} has no SRI hash"
        assert 'crossorigin="anonymous"' in attributes
        assert url.rsplit("/", 1)[0] in policy
    for script in re.findall(r"<script>(.*?)</script>", page.text, re.DOTALL):
        digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in policy
    assert "fonts.googleapis" not in page.text and "fastapi.tiangolo.com" not in page.text


def test_the_deployments_databases_are_private_to_their_owner(memroute_server):
    databases = list(memroute_server.tmp_path.rglob("*.db"))
    assert {p.name for p in databases} >= {"state.db", "vectors.db"} and len(databases) >= 3
    for database in databases + list(memroute_server.tmp_path.rglob("*.db-wal")):
        assert stat.S_IMODE(database.stat().st_mode) == 0o600, database


def test_a_405_lists_every_method_of_the_path(memroute_server):
    with memroute_server.client(memroute_server.tenant_a) as a:
        listing = a.options("/api/memory")
        by_id = a.request("PATCH", "/api/memory/00000000-0000-4000-8000-000000000000")
    assert listing.status_code == 405 and listing.headers["allow"] == "GET, POST"
    assert by_id.status_code == 405 and by_id.headers["allow"] == "GET, PUT, DELETE"


def test_the_schema_agrees_with_the_validation(memroute_server):
    schema = httpx.get(memroute_server.base_url + "/openapi.json").json()
    search = schema["paths"]["/api/storage/memories/search"]["get"]
    retention = next(p for p in search["parameters"] if p["name"] == "retention_days")
    bound = next(s for s in retention["schema"]["anyOf"] if s.get("type") == "integer")
    with memroute_server.client(memroute_server.tenant_a) as a:
        query = {"api_key_id": "tenant-a", "query": "tea"}
        assert a.get("/api/storage/memories/search", params={**query, "retention_days": bound["maximum"]}).is_success
        assert a.get("/api/storage/memories/search",
                     params={**query, "retention_days": bound["maximum"] + 1}).status_code == 422
        assert a.post("/api/memory/clear", json={"olderThanDays": 289.0, "dryRun": True}).status_code == 200
        assert a.post("/api/memory/clear", json={"olderThanDays": 289.5, "dryRun": True}).status_code == 422
        assert a.post("/api/memory/clear", json={"olderThanDays": "289", "dryRun": True}).status_code == 422
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if "security" in operation:
                assert {"400", "408", "413", "422", "429", "503"} <= set(operation["responses"]), (method, path)


def test_a_storage_patch_takes_null_where_the_schema_allows_it(memroute_server):
    memory = {"id": "22222222-2222-4222-8222-222222222222", "api_key_id": "tenant-a", "type": "factual",
              "key": "k", "content": "I like tea", "metadata": {}, "session_id": "s1"}
    with memroute_server.client(memroute_server.tenant_a) as a:
        assert a.post("/api/storage/memories", json=memory).status_code == 200
        patched = a.patch(f"/api/storage/memories/{memory['id']}",
                          json={"content": None, "key": None, "type": None, "session_id": None})
    assert patched.status_code == 200, patched.text
    body = patched.json()
    assert (body["content"], body["key"], body["type"], body["sessionId"]) == ("I like tea", "k", "factual", None)
