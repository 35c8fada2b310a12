"""End users under one app key over REST (issue 30): two app keys with two end users each, on a real server
with a SQLite primary, a SQLite fallback and a sqlite-vec index. Each end user sees only its own memories; an
app key cannot reach another app's end users, nor act without naming one; a plain key cannot name one; erasing
one end user removes its memories from the primary, the fallback and the vector index, and nothing else."""

from __future__ import annotations

import httpx
import pytest

from memroute.models import ListFilter
from tests.servers.memroute_server import MemrouteServer

APPS = {"shop": ("u1", "u2"), "cafe": ("u1", "u2")}  # the same end user ids in both apps: still four tenants


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("end-users")
    config = {
        "backends": {"primary": "main", "fallbacks": ["copy"],
                     "main": {"type": "sqlite", "path": str(tmp / "main.db")},
                     "copy": {"type": "sqlite", "path": str(tmp / "copy.db")}},
        "embedding": {"source": "static"}, "vectors": {"store": "sqlite-vec"},
    }
    with MemrouteServer(tmp, config=config) as running:
        for app in APPS:
            key, secret = running.create_key(app, tenant=app, end_users=True)
            running.keys[app], running.secrets[app] = key, secret
        yield running


def _as(server: MemrouteServer, app: str, end_user: str | None = None) -> httpx.Client:
    client = server.client(server.secrets[app])
    if end_user is not None:
        client.headers["x-memroute-user"] = end_user
    return client


def _contents(client: httpx.Client, **params: str) -> set[str]:
    response = client.get("/api/memory", params={"limit": 200, **params})
    assert response.status_code == 200, response.text
    return {m["content"] for m in response.json()["data"]}


def _error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    return str(response.json()["error"]["message"])


def _seed(server: MemrouteServer) -> dict[tuple[str, str], set[str]]:
    seeded: dict[tuple[str, str], set[str]] = {}
    for app, users in APPS.items():
        for user in users:
            contents = {f"{app} {user} likes green tea", f"{app} {user} lives in Lisbon"}
            with _as(server, app, user) as client:
                first, second = sorted(contents)
                assert client.post("/api/memory", json={"content": first}).status_code == 201
            with _as(server, app) as client:  # the body's endUser names the end user too
                created = client.post("/api/memory", json={"content": second, "endUser": user})
                assert created.status_code == 201, created.text
                assert created.json()["memory"]["apiKeyId"] == f"{app}/{user}"
            seeded[(app, user)] = contents
    with server.client(server.tenant_a) as plain:
        assert plain.post("/api/memory", json={"content": "tenant-a likes green tea"}).status_code == 201
    assert server.mem.flush(timeout=60)
    return seeded


def test_each_end_user_sees_only_its_own_memories(server):
    seeded = _seed(server)
    for (app, user), contents in seeded.items():
        with _as(server, app, user) as client:
            assert _contents(client) == contents
            found = client.post("/api/memory/search", json={"query": "green tea", "limit": 50})
            assert found.status_code == 200, found.text
            assert {h["memory"]["content"] for h in found.json()["hits"]} <= contents
            assert found.json()["hits"], "the end user's own memory is found"
        with _as(server, app) as client:
            found = client.post("/api/memory/search", json={"query": "Lisbon", "endUser": user})
            assert {h["memory"]["content"] for h in found.json()["hits"]} <= contents
            # an app key may also name its end user as the composite tenant
            assert _contents(client, apiKeyId=f"{app}/{user}") == contents
    with server.client(server.tenant_a) as plain:
        assert _contents(plain) == {"tenant-a likes green tea"}


def test_an_app_key_cannot_reach_another_end_user_or_app(server):
    with _as(server, "shop", "u1") as client:
        other = server.mem.list(api_key_id="shop/u2").data[0]
        assert client.get(f"/api/memory/{other.id}").status_code == 404  # as a missing id
        assert client.delete(f"/api/memory/{other.id}").status_code == 404
        _error(client.get("/api/memory", params={"apiKeyId": "shop/u2"}), 403)
        _error(client.get("/api/memory", params={"apiKeyId": "cafe/u1"}), 403)
        _error(client.get("/api/memory", params={"apiKeyId": "shop"}), 403)
        _error(client.post("/api/memory/search", json={"query": "tea", "endUser": "u2"}), 422)  # header says u1
    with _as(server, "shop") as client:
        _error(client.get("/api/memory", params={"apiKeyId": "cafe/u1"}), 403)
        assert "app key" in _error(client.get("/api/memory"), 422)  # no end user named
        assert "app key" in _error(client.post("/api/memory", json={"content": "x"}), 422)
    assert server.mem.get(other.id, api_key_id="shop/u2") is not None


@pytest.mark.parametrize("end_user", ["a/b", "-lead", "x" * 129, "ü", "a b"])
def test_a_bad_end_user_id_is_422(server, end_user):
    with _as(server, "shop") as client:
        response = client.post("/api/memory", json={"content": "x", "endUser": end_user})
        assert response.status_code == 422, response.text
        response = client.get("/api/memory", headers={"x-memroute-user": end_user.encode("utf-8")})
        assert response.status_code == 422, response.text


def test_a_plain_key_cannot_name_an_end_user(server):
    with server.client(server.tenant_a) as plain:
        assert "not an app key" in _error(plain.get("/api/memory", headers={"x-memroute-user": "u1"}), 403)
        _error(plain.post("/api/memory", json={"content": "x", "endUser": "u1"}), 403)
        _error(plain.get("/api/users"), 403)
        _error(plain.delete("/api/users/u1"), 403)


def test_keys_for_end_users_are_checked(server):
    with server.client(server.admin) as admin:
        created = admin.post("/api/keys", json={"name": "app", "tenant": "bakery", "endUsers": True})
        assert created.status_code == 201 and created.json()["key"]["endUsers"] is True
        assert created.json()["key"]["tenant"] == "bakery"
        _error(admin.post("/api/keys", json={"name": "x", "tenant": "bakery", "endUsers": True,
                                             "scopes": ["admin"]}), 422)
        _error(admin.post("/api/keys", json={"name": "x", "tenant": "shop/u1"}), 422)  # would be an end user
        assert any(k["endUsers"] for k in admin.get("/api/keys").json()["data"])


def test_erasing_one_end_user_removes_everything_of_it_and_nothing_else(server):
    _seed(server)  # on its own: under xdist this test may run first on its worker
    main, copy = server.mem._manager.backends  # internals: inspect every place memories live
    vectors = server.mem._retrieval.vector_store
    victim = "shop/u1"
    before = {owner: main.list(ListFilter(api_key_id=owner, limit=1)).total
              for owner in ("shop/u2", "cafe/u1", "cafe/u2", "tenant-a")}
    ids = {m.id for m in server.mem.list(api_key_id=victim).data}
    assert ids and vectors.count(victim) == len(ids) and copy.list(ListFilter(api_key_id=victim)).total == len(ids)
    with _as(server, "shop") as client:
        assert client.get("/api/users").json() == {"tenant": "shop", "data": ["u1", "u2"]}
        dry = client.delete("/api/users/u1", params={"dryRun": "true"}).json()
        assert dry["matched"] == len(ids) and dry["deleted"] == 0 and server.mem.list(api_key_id=victim).total
        _error(client.delete("/api/users/u2", headers={"x-memroute-user": "u1"}), 403)
        report = client.delete("/api/users/u1")
    assert report.status_code == 200, report.text
    body = report.json()
    assert body["apiKeyId"] == victim and body["deleted"] == len(ids) and set(body["ids"]) == ids
    assert body["remaining"] == {"main": 0, "copy": 0} and body["vectorsRemaining"] == 0 and body["complete"]
    for backend in (main, copy):
        assert backend.list(ListFilter(api_key_id=victim)).total == 0
        assert not any(backend.get(memory_id) for memory_id in ids)
    assert vectors.count(victim) == 0 and not (vectors.ids() & ids)
    after = {owner: main.list(ListFilter(api_key_id=owner, limit=1)).total for owner in before}
    assert after == before and all(count > 0 for count in after.values())
    assert server.mem.end_users("shop") == ["u2"]
    with server.client(server.admin) as admin:  # an admin names the app tenant
        assert admin.get("/api/users", params={"tenant": "cafe"}).json()["data"] == ["u1", "u2"]
    with _as(server, "cafe") as client:
        _error(client.delete("/api/users/u1", params={"tenant": "shop"}), 403)
        _error(client.delete("/api/users/a%2Fb"), 404)  # a slash never reaches the route as an id
        _error(client.delete("/api/users/-x"), 422)


def test_agent_scope_over_rest(server):
    with _as(server, "cafe", "u2") as client:
        for agent, content in (("planner", "Reserve a table for Friday"), ("critic", "The Friday table was noisy")):
            created = client.post("/api/memory", json={"content": content, "agent": agent})
            assert created.status_code == 201 and created.json()["memory"]["metadata"]["agent"] == agent
        assert server.mem.flush(timeout=30)
        listed = client.get("/api/memory", params={"agent": "critic"}).json()
        assert [m["content"] for m in listed["data"]] == ["The Friday table was noisy"] and listed["total"] == 1
        found = client.post("/api/memory/search", json={"query": "Friday table", "agent": "planner"}).json()
        assert [h["memory"]["content"] for h in found["hits"]] == ["Reserve a table for Friday"]
        _error(client.post("/api/memory", json={"content": "x", "agent": "no/slash"}), 422)
        _error(client.get("/api/memory", params={"agent": "-bad"}), 422)
