"""``POST /api/memory/import/omniroute`` over real HTTP: only an admin key imports (the rows belong to many
tenants), bad bodies are 4xx with the field named, and afterwards each tenant's key finds its own memories and
never the other's."""

from __future__ import annotations

import pytest

from tests.servers.omniroute_db import build_reference_db, needle

SQLITE = {"content-type": "application/vnd.sqlite3"}


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    reference = build_reference_db(tmp_path_factory.mktemp("omniroute") / "storage.sqlite", per_tenant=300)
    return reference, reference.path.read_bytes()


def _error(response, status):
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["message"]
    return body["error"]


def test_an_admin_imports_and_each_tenant_finds_only_its_own(memroute_server, database):
    _, raw = database
    admin = memroute_server.client(memroute_server.admin)
    a = memroute_server.client(memroute_server.tenant_a)
    b = memroute_server.client(memroute_server.tenant_b)
    url = "/api/memory/import/omniroute"

    _error(a.post(url, content=raw, headers=SQLITE), 403)  # a tenant key may not write other tenants' rows
    dry = admin.post(url, content=raw, headers=SQLITE, params={"dryRun": "true"})
    assert dry.status_code == 200, dry.text
    body = dry.json()
    assert body["dryRun"] is True and body["imported"] == 0 and body["source"] == "upload"
    assert body["skippedByReason"]["no owner"] == 5 and body["skippedRows"][0]["apiKeyId"] is not None
    assert a.get("/api/memory").json()["total"] == 0

    refused = _error(admin.post(url, content=raw, headers=SQLITE), 422)
    assert "no owner: 5" in refused["message"] and refused["details"]
    assert a.get("/api/memory").json()["total"] == 0

    done = admin.post(url, content=raw, headers=SQLITE, params={"skipUncarried": "true"}).json()
    assert done["imported"] == done["carried"] == body["carried"]
    assert a.get("/api/memory").json()["total"] == done["tenants"]["tenant-a"]
    assert b.get("/api/memory").json()["total"] == done["tenants"]["tenant-b"]

    hits = a.post("/api/memory/search", json={"query": "cat Miso keyboard"}).json()["hits"]
    assert hits and hits[0]["memory"]["content"] == needle("tenant-a")
    assert all(h["memory"]["apiKeyId"] == "tenant-a" for h in hits)
    foreign = b.post("/api/memory/search", json={"query": "cat Miso keyboard"}).json()["hits"]
    assert needle("tenant-a") not in [h["memory"]["content"] for h in foreign]
    own = b.post("/api/memory/search", json={"query": "sourdough starter Clint"}).json()["hits"]
    assert own and own[0]["memory"]["content"] == needle("tenant-b")
    for client in (admin, a, b):
        client.close()


def test_bad_uploads_and_options_are_4xx_and_write_nothing(memroute_server, database):
    _, raw = database
    admin = memroute_server.client(memroute_server.admin)
    url = "/api/memory/import/omniroute"
    assert "not an SQLite database" in _error(admin.post(url, content=b'{"id": 1}\n', headers=SQLITE), 422)["message"]
    _error(admin.post(url, content=b"", headers=SQLITE), 422)
    damaged = raw[:4096]  # the header page only: SQLite cannot read the table
    assert _error(admin.post(url, content=damaged, headers=SQLITE, params={"dryRun": "true"}), 422)
    detail = _error(admin.post(url, content=raw, headers=SQLITE, params={"duplicates": "oldest"}), 422)
    assert "duplicates" in str(detail)
    _error(admin.post(url, content=raw, headers=SQLITE, params={"unownedTenant": ""}), 422)
    assert memroute_server.mem.tenants() == []
    admin.close()


def test_a_database_larger_than_max_import_bytes_is_413(tmp_path, database):
    from tests.servers.memroute_server import MemrouteServer

    _, raw = database
    with MemrouteServer(tmp_path, config={"server": {"max_import_bytes": 65536}}) as server, \
            server.client(server.admin) as admin:
        assert len(raw) > 65536
        _error(admin.post("/api/memory/import/omniroute", content=raw, headers=SQLITE), 413)
        assert server.mem.tenants() == []
        small = admin.post("/api/memory/import/omniroute", content=b"x" * 2000, headers=SQLITE)
        assert small.status_code == 422  # within the limit: read, and refused for what it is


def test_the_import_limit_not_the_body_limit_applies(tmp_path, database):
    from tests.servers.memroute_server import MemrouteServer

    _, raw = database
    config = {"server": {"max_body_bytes": 1024, "max_import_bytes": 16 * 1024 * 1024}}
    with MemrouteServer(tmp_path, config=config) as server, server.client(server.admin) as admin:
        answer = admin.post("/api/memory/import/omniroute", content=raw, headers=SQLITE, params={"dryRun": "true"})
        assert answer.status_code == 200 and answer.json()["carried"] > 0
        _error(admin.post("/api/memory", json={"content": "x" * 2000}), 413)  # other routes keep theirs
