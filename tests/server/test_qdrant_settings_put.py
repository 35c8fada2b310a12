"""``PUT /api/settings/qdrant`` over real HTTP: the target is probed for real before anything is stored, the
change reaches every process and every new ``memroute.open``, the key is never echoed, bad input is a 422 with
the field, a tenant key is refused.

The Qdrant server is :class:`tests.servers.qdrant_rest.QdrantRestServer`: Qdrant's REST API on a loopback
socket, backed by qdrant-client's local mode (no Qdrant binary can be installed here; see its docstring).
"""

from __future__ import annotations

import time

import pytest

import memroute
from memroute.deployment.state import RUNTIME_SETTINGS_TTL_S
from tests.servers.memroute_server import MemrouteServer
from tests.servers.qdrant_rest import QdrantRestServer

QDRANT_KEY = "qdrant-secret-key-7f3a"
COLLECTION = "memroute_memories"


@pytest.fixture(scope="module")
def qdrant():
    with QdrantRestServer(api_key=QDRANT_KEY) as server:
        yield server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with MemrouteServer(tmp_path_factory.mktemp("qdrant-put")) as running:
        yield running


def _wait(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.1)


def _enable(qdrant: QdrantRestServer, **extra) -> dict:
    return {"enabled": True, "host": "127.0.0.1", "port": qdrant.port, "apiKey": QDRANT_KEY, **extra}


def test_enable_probe_store_and_switch_back(server, qdrant):
    admin, a, b = server.client(server.admin), server.client(server.tenant_a), server.client(server.tenant_b)
    before = admin.get("/api/settings/qdrant").json()
    assert before["enabled"] is False and before["active"] is False and before["hasApiKey"] is False
    assert a.post("/api/memory", json={"content": "I prefer green tea", "key": "pref:tea"}).status_code == 201
    assert b.post("/api/memory", json={"content": "I prefer black tea", "key": "pref:tea"}).status_code == 201
    server.mem.flush(timeout=30)

    answer = admin.put("/api/settings/qdrant", json=_enable(qdrant, quantization="int8"))
    assert answer.status_code == 200, answer.text
    view = answer.json()
    assert view["enabled"] and view["active"] and not view["switching"]
    assert (view["host"], view["port"], view["collection"]) == ("http://127.0.0.1", qdrant.port, COLLECTION)
    assert view["hasApiKey"] and view["apiKeyMasked"] == "***" + QDRANT_KEY[-4:]
    assert QDRANT_KEY not in answer.text and QDRANT_KEY not in admin.get("/api/settings/qdrant").text
    assert set(view["overrides"]) == {"enabled", "host", "port", "apiKey", "quantization"}
    assert view["mode"] == "server" and view["target"] == qdrant.url
    assert qdrant.quantization[COLLECTION] is not None  # int8 reached the server's create_collection

    server.mem.flush(timeout=30)  # the memories written before the switch are back-filled into Qdrant
    assert qdrant.points(COLLECTION) == 2
    found = a.post("/api/settings/qdrant/search", json={"query": "which tea do I drink"}).json()
    assert found["ok"] and [h["memory"]["content"] for h in found["results"]] == ["I prefer green tea"]
    assert a.post("/api/memory", json={"content": "I live in Lisbon", "key": "home"}).status_code == 201
    server.mem.flush(timeout=30)
    assert qdrant.points(COLLECTION) == 3  # new writes go to Qdrant

    # a new open (the per-test environment names its own data dir: name the server's) applies the settings
    with memroute.open(str(server.config_path), data_dir=str(server.mem.data_dir)) as fresh:
        assert fresh.status().vector_store["backend"] == "qdrant"

    # a target that does not work stores nothing: the key removed (the server answers 401), a closed port
    for broken in ({"apiKey": ""}, {"port": 9}, {"host": "169.254.169.254"}):
        refused = admin.put("/api/settings/qdrant", json=broken)
        assert refused.status_code == 422, (broken, refused.text)
        assert any(d["field"] == "host" for d in refused.json()["error"]["details"]), refused.text
        assert admin.get("/api/settings/qdrant").json()["hasApiKey"] is True
        assert server.mem.state.get_value("settings", "qdrant")["port"] == qdrant.port

    off = admin.put("/api/settings/qdrant", json={"enabled": False})
    assert off.status_code == 200 and off.json()["enabled"] is False and off.json()["active"] is False
    server.mem.flush(timeout=30)
    hit = a.post("/api/memory/search", json={"query": "green tea", "strategy": "semantic"}).json()
    assert hit["provenance"]["vectorStore"] == "sqlite-vec"  # back on the configured store, rebuilt there
    assert [h["memory"]["content"] for h in hit["hits"]][:1] == ["I prefer green tea"]
    for client in (admin, a, b):
        client.close()


@pytest.mark.parametrize("bad, field", [
    ({"vectorStore": "qdrant"}, "vectorStore"), ({"port": 0}, "port"), ({"port": 65536}, "port"),
    ({"port": "6333"}, "port"), ({"port": True}, "port"), ({"enabled": "yes"}, "enabled"), ({"host": ""}, "host"),
    ({"host": "ftp://q.internal"}, "host"), ({"host": "http://user:pw@q.internal"}, "host"),
    ({"collection": "a b"}, "collection"), ({"quantization": "int4"}, "quantization"), ({"apiKey": 5}, "apiKey"),
    ({"embeddingModel": "openai/text-embedding-3-small"}, "embeddingModel"),
    ({"enabled": True, "host": None}, "host"),  # no server to reach: local mode is configured only in the file
])
def test_bad_bodies_are_422_with_the_field_and_store_nothing(server, bad, field):
    with server.client(server.admin) as admin:
        stored = server.mem.state.get_value("settings", "qdrant")
        answer = admin.put("/api/settings/qdrant", json=bad)
        assert answer.status_code == 422, answer.text
        body = answer.json()["error"]
        assert body["message"] and any(field in d["field"] for d in body["details"]), body
        assert server.mem.state.get_value("settings", "qdrant") == stored


def test_a_tenant_key_is_refused(server, qdrant):
    with server.client(server.tenant_a) as a:
        assert a.put("/api/settings/qdrant", json=_enable(qdrant)).status_code == 403
        assert a.get("/api/settings/qdrant").status_code == 403
    with server.client() as anonymous:
        assert anonymous.put("/api/settings/qdrant", json=_enable(qdrant)).status_code == 401


def test_the_route_is_documented_with_an_example(server):
    with server.client() as anonymous:
        operation = anonymous.get("/openapi.json").json()["paths"]["/api/settings/qdrant"]["put"]
    assert operation["requestBody"]["content"]["application/json"]["example"]["host"]
    assert "apiKeyMasked" in operation["responses"]["200"]["content"]["application/json"]["example"]


def test_two_worker_processes_follow_a_change(tmp_path):
    """Two ``memroute serve`` workers: the PUT lands on one; within the staleness bound (plus the background
    switch) every worker's searches run on Qdrant, and back."""
    with QdrantRestServer() as qdrant, MemrouteServer(tmp_path, workers=2) as server:
        with server.client(server.tenant_a) as a:
            assert a.post("/api/memory", json={"content": "I prefer green tea", "key": "pref:tea"}).status_code == 201

        def stores(n: int = 10) -> set:
            seen = set()
            for _ in range(n):  # new connections: spread over both workers
                with server.client(server.tenant_a) as fresh:
                    body = fresh.post("/api/memory/search", json={"query": "green tea", "strategy": "semantic"})
                seen.add(body.json()["provenance"]["vectorStore"])
            return seen

        _wait(lambda: stores() == {"sqlite-vec"})
        with server.client(server.admin) as admin:
            answer = admin.put("/api/settings/qdrant", json={"enabled": True, "host": qdrant.url})
            assert answer.status_code == 200, answer.text
            time.sleep(RUNTIME_SETTINGS_TTL_S)
            _wait(lambda: stores() == {"qdrant"})
            assert qdrant.points(COLLECTION) == 1
            assert admin.put("/api/settings/qdrant", json={"enabled": None}).status_code == 200  # drop the override
            _wait(lambda: stores() == {"sqlite-vec"})
