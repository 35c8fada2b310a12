"""The lean request path of ``POST /api/memory/search`` and ``/retrieve-preview`` (memroute.server.api.lean),
over the real server: a well-formed request skips FastAPI's dependency solving and response validation, and
everything else (bad JSON, another content type, a field out of range, a bad key, another tenant) answers
exactly as FastAPI's own handler does, because it is that handler that answers. The response writer
(:func:`memroute.server.schema.wire_dumper`) is held byte-equal to the response model's own serialisation."""

from __future__ import annotations

import json
from datetime import timedelta

import fastapi.routing
import httpx
import pydantic_core
import pytest

from memroute.models import utcnow
from memroute.reports import RetrievalPreview
from memroute.server.api import models as m
from memroute.server.schema import wire_dumper, wire_model
from tests.servers.memroute_server import MemrouteServer

FULL_PATH_TYPE = "application/vnd.memroute+json"
"""A JSON media type FastAPI accepts (``+json``) that the lean path leaves to FastAPI's handler."""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with MemrouteServer(tmp_path_factory.mktemp("lean")) as running:
        a = running.client(running.tenant_a)
        for index, text in enumerate(["I prefer green tea in the morning", "My sister lives in Lisbon",
                                      "I drink tea after lunch", "The dashboard is written in TypeScript"]):
            assert a.post("/api/memory", json={"content": text, "key": f"fact:{index}", "sessionId": "s1",
                                               "metadata": {"n": index, "tags": ["x", None, 1.5]}}).status_code == 201
        b = running.client(running.tenant_b)
        assert b.post("/api/memory", json={"content": "Tenant B also likes tea", "key": "b:tea"}).status_code == 201
        running.mem.flush(timeout=30)
        yield running


@pytest.fixture
def full_handler_calls(monkeypatch):
    """How many responses FastAPI's own handler serialised (instrumentation only: the real function runs)."""
    calls: list[str] = []
    real = fastapi.routing.serialize_response

    async def counting(*args, **kwargs):
        calls.append("serialize_response")
        return await real(*args, **kwargs)

    monkeypatch.setattr(fastapi.routing, "serialize_response", counting)
    return calls


def _comparable(body: dict) -> dict:
    """A search or preview body without what changes from one call to the next (access telemetry)."""
    for hit in body.get("hits", ()):
        hit["memory"].pop("accessCount")
        hit["memory"].pop("lastAccessedAt")
    return body


@pytest.mark.parametrize("path, request_body", [
    ("/api/memory/search", {"query": "tea", "strategy": "exact", "limit": 3}),
    ("/api/memory/retrieve-preview", {"query": "tea", "strategy": "exact", "maxTokens": 200}),
])
def test_a_well_formed_request_takes_the_lean_path_with_the_same_answer(server, full_handler_calls, path,
                                                                         request_body):
    a = server.client(server.tenant_a)
    lean = a.post(path, json=request_body)
    assert lean.status_code == 200, lean.text
    assert full_handler_calls == []  # neither dependency solving nor response validation ran
    assert lean.headers["content-type"] == "application/json"
    assert lean.headers["x-content-type-options"] == "nosniff" and lean.headers["cache-control"] == "no-store"
    full = a.post(path, content=json.dumps(request_body), headers={"content-type": FULL_PATH_TYPE})
    assert full.status_code == 200, full.text
    assert full_handler_calls == ["serialize_response"]  # this one went through FastAPI's handler
    assert _comparable(lean.json()) == _comparable(full.json())
    assert lean.json()  # and the lean body is what the documented model reads back
    model = wire_model(m.SearchResponse, name="SearchResult") if path.endswith("search") else wire_model(
        RetrievalPreview)
    model.model_validate_json(lean.content)


def test_the_lean_path_keeps_tenants_apart(server):
    a, b = server.client(server.tenant_a), server.client(server.tenant_b)
    mine = b.post("/api/memory/search", json={"query": "tea", "strategy": "exact"}).json()
    assert {hit["memory"]["apiKeyId"] for hit in mine["hits"]} == {"tenant-b"}
    theirs = a.post("/api/memory/search", json={"query": "tea", "strategy": "exact"}).json()
    assert theirs["hits"] and {hit["memory"]["apiKeyId"] for hit in theirs["hits"]} == {"tenant-a"}
    for path in ("/api/memory/search", "/api/memory/retrieve-preview"):
        refused = b.post(path, json={"query": "tea", "apiKeyId": "tenant-a"})
        assert refused.status_code == 403 and "own tenant" in refused.json()["error"]["message"]
    admin = server.client(server.admin)
    seen = admin.post("/api/memory/search", json={"query": "tea", "strategy": "exact", "apiKeyId": "tenant-a"})
    assert {hit["memory"]["apiKeyId"] for hit in seen.json()["hits"]} == {"tenant-a"}


def _error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "details"}
    return body["error"]


@pytest.mark.parametrize("path", ["/api/memory/search", "/api/memory/retrieve-preview"])
def test_anything_unusual_is_answered_by_fastapis_handler_as_before(server, path):
    a = server.client(server.tenant_a)
    url = server.base_url + path
    auth = {"Authorization": f"Bearer {server.tenant_a}"}
    assert _error(a.post(path, content=b"{not json", headers={"content-type": "application/json"}),
                  400)["message"] == "Invalid JSON body"
    _error(a.post(path, content=b'{"query": "\xff"}', headers={"content-type": "application/json"}), 400)
    _error(a.post(path, content=b"", headers={"content-type": "application/json"}), 422)  # no body
    _error(httpx.post(url, content=b'{"query": "tea"}', headers=auth), 422)  # no content-type
    _error(a.post(path, content=b'{"query": "tea"}', headers={"content-type": "text/plain"}), 422)
    _error(a.post(path, content=b'["tea"]', headers={"content-type": "application/json"}), 422)
    fields = _error(a.post(path, json={"query": "tea", "limit": 0, "surprise": 1}), 422)["details"]
    assert {detail["field"] for detail in fields} == {"limit", "surprise"}
    assert {detail["field"] for detail in _error(a.post(path, json={"query": 5}), 422)["details"]} == {"query"}
    # the checks keep FastAPI's order: a malformed body is reported before the key is looked at
    assert _error(httpx.post(url, content=b"{not json", headers={"content-type": "application/json"}),
                  400)["message"] == "Invalid JSON body"
    assert _error(httpx.post(url, json={"query": "tea", "limit": 0}), 401)["message"].startswith("missing")
    assert _error(httpx.post(url, json={"query": "tea"}), 401)["message"].startswith("missing")
    bad = {"Authorization": "Bearer mr_not-a-key"}
    assert _error(httpx.post(url, json={"query": "tea"}, headers=bad), 401)["message"] == "invalid API key"
    _key, writer = server.create_key("writer-only", scopes="write", tenant="tenant-a")
    assert "'read' scope" in _error(httpx.post(url, json={"query": "tea"},
                                               headers={"Authorization": f"Bearer {writer}"}), 403)["message"]


def test_a_revoked_key_fails_at_once_on_the_lean_path(server):
    key, secret = server.create_key("short-lived", scopes="read", tenant="tenant-a")
    url = server.base_url + "/api/memory/search"
    headers = {"Authorization": f"Bearer {secret}"}
    assert httpx.post(url, json={"query": "tea"}, headers=headers).status_code == 200
    server.mem.keys.revoke(key.id)
    assert _error(httpx.post(url, json={"query": "tea"}, headers=headers), 401)["message"] == "API key revoked"


def test_the_response_writer_equals_the_response_models_serialisation(server):
    """Byte for byte, on real reports: memories with sessions, metadata, expiry and access times; a hit's
    ranks and leg scores; the preview's resolution and computed properties (vecScore, ftsScore)."""
    mem = server.mem
    mem.add(api_key_id="tenant-a", content="I will visit Porto next week", key="trip:porto",
            expires_at=utcnow() + timedelta(days=3), metadata={"source": "user", "nested": {"a": [1, 2.5]}})
    mem.flush(timeout=30)
    porto = mem.search("Porto", api_key_id="tenant-a").hits[0].memory
    cases = [
        (wire_model(m.SearchResponse, name="SearchResult"), mem.search("tea Porto", api_key_id="tenant-a")),
        (wire_model(m.SearchResponse, name="SearchResult"), mem.search("nothing matches zzz", api_key_id="tenant-a",
                                                                     strategy="exact")),
        (wire_model(RetrievalPreview), mem.preview("tea Porto", api_key_id="tenant-a", max_tokens=50)),
        (wire_model(m.MemoryEnvelope), m.MemoryEnvelope(memory=porto)),
    ]
    accessed = mem.search("tea", api_key_id="tenant-a")
    mem.flush(timeout=30)
    cases.append((wire_model(m.SearchResponse, name="SearchResult"), mem.search("tea", api_key_id="tenant-a")))
    assert accessed.hits and cases[-1][1].hits
    for model, report in cases:
        expected = model.model_validate(report, from_attributes=True).model_dump_json().encode()
        assert pydantic_core.to_json(wire_dumper(model)(report), inf_nan_mode="null") == expected, model


def test_a_lean_route_of_another_shape_is_refused():
    from fastapi import Query, Request

    from memroute.server.api.lean import LeanRoute
    from memroute.server.auth import CurrentPrincipal, ScopedRouter

    router = ScopedRouter()
    body_model = wire_model(m.SearchRequest, mode="request")

    async def with_query(request: Request, principal: CurrentPrincipal, body: body_model,  # type: ignore[valid-type]
                         extra: str = Query("x")) -> dict:
        return {}

    def not_async(request: Request, principal: CurrentPrincipal, body: body_model) -> dict:  # type: ignore[valid-type]
        return {}

    for endpoint in (with_query, not_async):
        with pytest.raises(TypeError, match="LeanRoute"):
            router.add_api_route("/x", endpoint, methods=["POST"], scope="read", route_class_override=LeanRoute)
