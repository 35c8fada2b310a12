"""Keys, scopes and the error contract over real HTTP (the in-thread server on a loopback socket)."""

from __future__ import annotations

import httpx
import pytest
from fastapi.routing import APIRoute

from memroute.server.auth import PUBLIC, SCOPE_KEY, ScopedRouter, iter_routes
from tests.servers.memroute_server import MemrouteServer


def _error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and isinstance(body["error"]["message"], str)
    assert isinstance(body["error"]["details"], list)
    return body["error"]


def test_healthz_needs_no_key_and_everything_else_does(memroute_server):
    with memroute_server.client() as anonymous:
        assert anonymous.get("/healthz").json() == {"ok": True}
        error = _error(anonymous.get("/readyz"), 401)
        assert "Bearer" in error["message"]
        assert anonymous.get("/api/keys").headers["www-authenticate"].startswith("Bearer")
    with memroute_server.client("mr_not-a-real-key") as bad:
        assert _error(bad.get("/readyz"), 401)["message"] == "invalid API key"
    with memroute_server.client(memroute_server.admin) as admin:
        ready = admin.get("/readyz")
        assert ready.status_code == 200 and ready.json()["ready"] is True



def test_key_lifecycle_over_http(memroute_server):
    with memroute_server.client(memroute_server.admin) as admin:
        created = admin.post("/api/keys", json={"name": "ci", "scopes": ["read"], "tenant": "tenant-a"})
        assert created.status_code == 201
        body = created.json()
        key, secret = body["key"], body["secret"]
        assert secret.startswith("mr_") and key["tenant"] == "tenant-a" and key["scopes"] == ["read"]
        assert secret not in admin.get("/api/keys").text  # never listed again
        with memroute_server.client(secret) as ci:
            assert ci.get("/readyz").status_code == 200
            _error(ci.get("/api/keys"), 403)  # read scope cannot manage keys
            rotated = admin.post(f"/api/keys/{key['id']}/rotate").json()
            assert rotated["key"]["tenant"] == "tenant-a" and rotated["key"]["id"] != key["id"]
            _error(ci.get("/readyz"), 401)  # the old secret died with the rotation
        with memroute_server.client(rotated["secret"]) as ci2:
            assert ci2.get("/readyz").status_code == 200
            revoked = admin.post(f"/api/keys/{rotated['key']['id']}/revoke").json()
            assert revoked["revokedAt"] is not None
            assert _error(ci2.get("/readyz"), 401)["message"] == "API key revoked"
        _error(admin.post(f"/api/keys/{rotated['key']['id']}/rotate"), 409)
        _error(admin.get("/api/keys/key_missing"), 404)
        _error(admin.post("/api/keys/key_missing/revoke"), 404)


@pytest.mark.parametrize("body, field", [
    ({"name": "x", "scopes": ["root"]}, "scopes"),
    ({"name": "", "scopes": ["read"]}, "name"),
    ({"scopes": ["read"]}, "name"),
    ({"name": "x", "surprise": 1}, "surprise"),
    ({"name": "x", "tenant": ""}, "tenant"),
    ({"name": "x", "scopes": []}, "scopes"),
])
def test_bad_key_requests_are_422_with_the_field(memroute_server, body, field):
    with memroute_server.client(memroute_server.admin) as admin:
        error = _error(admin.post("/api/keys", json=body), 422)
        assert any(d["field"].split(".")[0] == field for d in error["details"]), error


def test_invalid_json_is_400_and_unknown_routes_404(memroute_server):
    with memroute_server.client(memroute_server.admin) as admin:
        error = _error(admin.post("/api/keys", content=b"{not json", headers={"content-type": "application/json"}),
                       400)
        assert error["message"] == "Invalid JSON body"
        _error(admin.get("/api/nothing-here"), 404)
        _error(admin.delete("/healthz"), 405)


def test_oversized_bodies_are_413(tmp_path):
    with MemrouteServer(tmp_path, config={"server": {"max_body_bytes": 2048}}) as server, \
            server.client(server.admin) as admin:
        big = {"name": "x" * 5000}
        _error(admin.post("/api/keys", json=big), 413)

        def chunks():  # no Content-Length: the limit is enforced on the bytes that arrive
            yield b'{"name": "'
            for _ in range(10):
                yield b"y" * 500
            yield b'"}'

        _error(admin.post("/api/keys", content=chunks(), headers={"content-type": "application/json"}), 413)


def test_security_headers_and_no_cors_by_default(memroute_server):
    with memroute_server.client(memroute_server.admin) as admin:
        response = admin.get("/api/keys", headers={"Origin": "https://evil.example"})
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
        assert "default-src 'none'" in response.headers["content-security-policy"]
        assert response.headers["cache-control"] == "no-store"
        assert "access-control-allow-origin" not in response.headers
        preflight = admin.options("/api/keys", headers={"Origin": "https://evil.example",
                                                         "Access-Control-Request-Method": "GET"})
        assert "access-control-allow-origin" not in preflight.headers


def test_cors_only_for_configured_origins(tmp_path):
    config = {"server": {"cors_origins": ["https://app.example.com"]}}
    with MemrouteServer(tmp_path, config=config) as server, server.client(server.admin) as admin:
        ok = admin.get("/api/keys", headers={"Origin": "https://app.example.com"})
        assert ok.headers["access-control-allow-origin"] == "https://app.example.com"
        other = admin.get("/api/keys", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers


def test_allowed_hosts(tmp_path):
    with MemrouteServer(tmp_path, config={"server": {"allowed_hosts": ["memory.example.com"]}}) as server, \
            server.client(server.admin) as admin:
        _error(admin.get("/readyz"), 400)
        assert admin.get("/readyz", headers={"Host": "memory.example.com"}).status_code == 200


# The reviewed exceptions that need no key: liveness, the dashboard's data-free page shell, and its sign-in
# (which takes an admin key in the body). /static serves the page's script and stylesheet.
_REVIEWED_PUBLIC = {("/healthz", ("GET",)), ("/", ("GET",)), ("/dashboard/session", ("POST",))}


def test_every_route_declares_a_scope(memroute_server):
    app = _app_of(memroute_server)
    undeclared, seen = [], []
    for path, route in iter_routes(app.routes):
        seen.append(path)
        if isinstance(route, APIRoute):
            scope = (route.openapi_extra or {}).get(SCOPE_KEY)
            public_ok = (path, tuple(sorted(route.methods))) in _REVIEWED_PUBLIC
            if scope is None or (scope == PUBLIC and not public_ok):
                undeclared.append(path)
        elif getattr(route, "memroute_scope", None) is not None:  # a surface mounted as plain routes (MCP)
            if route.memroute_scope == PUBLIC and not path.startswith("/.well-known/"):
                undeclared.append(path)
        elif path not in ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/static"):
            undeclared.append(path or repr(route))
    assert "/api/keys/{key_id}/rotate" in seen and "/healthz" in seen
    assert not undeclared, f"routes without a scope: {undeclared}"


def _app_of(server: MemrouteServer):
    return server._server.config.app


def test_a_route_without_a_scope_cannot_be_declared():
    router = ScopedRouter()
    with pytest.raises(TypeError):
        router.get("/x")(lambda: None)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        router.add_api_route("/y", lambda: None)
