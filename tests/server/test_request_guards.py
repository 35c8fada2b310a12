"""The guard in front of every route, against the real server over a socket (issue 29, "High 1"): a body of
deeply nested JSON is refused with a 400 before any parser recurses into it — on the lean fast path (which
parses before authentication), REST, storage, MCP and the proxy alike — and while such bodies arrive,
``/healthz`` keeps answering. Before the guard, 1,500 nested ``[`` raised ``RecursionError`` inside the server:
a 500 whose traceback the ``mcp`` SDK's rich handler rendered on the event loop for 1-3.5 s each."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

DEEP = ('{"query":' + "[" * 1500 + "]" * 1500 + "}").encode()
JSON = {"content-type": "application/json"}


def _deep(levels: int) -> bytes:
    return ("[" * levels + "]" * levels).encode()


@pytest.mark.parametrize("path", ["/api/memory/search", "/api/memory/retrieve-preview"])
def test_the_lean_routes_refuse_deep_json_before_authentication(memroute_server, path):
    with httpx.Client(base_url=memroute_server.base_url, timeout=30) as anonymous:
        r = anonymous.post(path, content=DEEP, headers=JSON)
    assert r.status_code == 400
    assert r.json() == {"error": {"message": "request body nests JSON deeper than 64 levels", "details": []}}


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/api/memory"),
    ("POST", "/api/memory/search"),
    ("POST", "/api/storage/memories"),
    ("PUT", "/api/storage/memories/00000000-0000-4000-8000-000000000000"),
    ("POST", "/api/memory/import"),
    ("POST", "/mcp"),
])
def test_every_route_refuses_deep_json(memroute_server, method, path):
    with memroute_server.client(memroute_server.tenant_a) as a:
        r = a.request(method, path, content=DEEP, headers={**JSON, "accept": "application/json, text/event-stream"})
    assert r.status_code == 400, r.text
    assert "deeper than 64 levels" in r.json()["error"]["message"]


def test_the_proxy_refuses_deep_messages_in_the_callers_error_format(memroute_server):
    body = '{"model": "m", "messages": [{"role": "user", "content": ' + "[" * 5000 + "]" * 5000 + "}]}"
    with memroute_server.client(memroute_server.tenant_a) as a:
        openai = a.post("/v1/chat/completions", content=body, headers=JSON)
        anthropic = a.post("/v1/messages", content=body, headers=JSON)
    assert openai.status_code == 400 and openai.json()["error"]["type"] == "invalid_request_error"
    assert anthropic.status_code == 400 and anthropic.json()["type"] == "error"


def test_nesting_up_to_the_limit_is_parsed_as_usual(memroute_server):
    with memroute_server.client(memroute_server.tenant_a) as a:
        at_limit = a.post("/api/memory/search", content=b'{"query": ' + _deep(63) + b"}", headers=JSON)
        fine = a.post("/api/memory/search", json={"query": "tea [with] {brackets}" + "[" * 200})
    assert at_limit.status_code == 422  # a list is not a query: the validation speaks, not the guard
    assert fine.status_code == 200  # brackets inside a string do not nest anything


def test_the_limit_is_configurable(tmp_path):
    from tests.servers.memroute_server import MemrouteServer

    with MemrouteServer(tmp_path, config={"server": {"max_json_depth": 4}}) as server, \
            server.client(server.tenant_a) as a:
        deep = a.post("/api/memory", json={"content": "x", "metadata": {"a": {"b": {"c": {}}}}})
        shallow = a.post("/api/memory", json={"content": "I like tea", "metadata": {"a": {"b": 1}}})
    assert deep.status_code == 400 and "deeper than 4 levels" in deep.json()["error"]["message"]
    assert shallow.status_code == 201


def test_healthz_keeps_answering_during_a_flood_of_deep_bodies(memroute_server):
    statuses: list[int] = []

    def flood() -> None:
        with httpx.Client(base_url=memroute_server.base_url, timeout=30) as anonymous:
            for _ in range(10):
                statuses.append(anonymous.post("/api/memory/search", content=DEEP, headers=JSON).status_code)

    threads = [threading.Thread(target=flood) for _ in range(5)]
    for thread in threads:
        thread.start()
    health = []
    with httpx.Client(base_url=memroute_server.base_url, timeout=30) as probe:
        while any(thread.is_alive() for thread in threads):
            health.append(probe.get("/healthz").status_code)
    for thread in threads:
        thread.join()
    assert statuses == [400] * 50
    assert health and set(health) == {200}


def _whole_reply(sock) -> str:
    """One HTTP response read off ``sock``: its head, then as many body bytes as its content-length says (the
    two can arrive in separate packets)."""
    data = b""
    while b"\r\n\r\n" not in data and (chunk := sock.recv(65536)):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length and (chunk := sock.recv(65536)):
        body += chunk
    return (head + b"\r\n\r\n" + body).decode()


def test_a_body_sent_too_slowly_is_a_408(tmp_path):
    import socket

    from tests.servers.memroute_server import MemrouteServer

    with MemrouteServer(tmp_path, config={"server": {"body_timeout_s": 0.5}}) as server:
        host, port = server.base_url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(b"POST /api/memory/search HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                         b"content-length: 100\r\n\r\n{\"query\":")  # ... and the rest never comes
            reply = _whole_reply(sock)
    assert reply.startswith("HTTP/1.1 408")
    assert json.loads(reply.split("\r\n\r\n", 1)[1])["error"]["message"].startswith("request body not received")
