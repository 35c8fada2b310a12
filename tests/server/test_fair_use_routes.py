"""Fair use against the real server over a socket (issue 29, "Medium 6"): a key over its rate or concurrency cap
gets 429 with ``Retry-After`` — in memroute's error shape on REST, in the caller's API's on the proxy — while
another tenant's key goes on being served; limits are set per key by an admin (``PUT /api/keys/{id}/limits``, or
``memroute keys limits``) and kept in the key store; slow clients are timed out (headers, body)."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx

from memroute.cli import main
from memroute.deployment.fair_use import KeyLimits
from tests.servers.memroute_server import MemrouteServer
from tests.servers.proxy_stack import proxy_stack


def test_a_keys_rate_limit_is_a_429_for_it_alone(memroute_server):
    server = memroute_server
    with server.client(server.admin) as admin:
        set_ = admin.put(f"/api/keys/{server.keys['tenant_a'].id}/limits", json={"requestsPerMinute": 3})
        assert set_.status_code == 200 and set_.json() == {"requestsPerMinute": 3, "concurrentRequests": None}
        assert admin.put(f"/api/keys/{server.keys['tenant_a'].id}/limits",
                         json={"requestsPerMinute": -1}).status_code == 422
        assert admin.put("/api/keys/key_missing/limits", json={"requestsPerMinute": 3}).status_code == 404
    with server.client(server.tenant_a) as a, server.client(server.tenant_b) as b:
        answers = [a.post("/api/memory/search", json={"query": "tea"}) for _ in range(4)]
        assert [r.status_code for r in answers] == [200, 200, 200, 429]
        refused = answers[-1]
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert refused.json()["error"]["message"].startswith("rate limit of this API key reached")
        assert all(b.get("/api/memory").status_code == 200 for _ in range(6))  # tenant B is not affected
    with server.client(server.admin) as admin:
        assert admin.get(f"/api/keys/{server.keys['tenant_a'].id}/limits").json()["requestsPerMinute"] == 3


def test_the_concurrency_cap_refuses_a_proxy_request_in_the_callers_format(tmp_path):
    with proxy_stack(tmp_path) as stack:
        alice = stack.server.keys["tenant_a"].id
        stack.mem.fair_use.set_limits(alice, KeyLimits(concurrent_requests=1))
        headers = {"authorization": f"Bearer {stack.keys['alice']}"}
        body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hello"}]}
        stack.upstream.hold()
        with httpx.Client(base_url=stack.url, timeout=30) as client, \
                client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as held:
            assert held.status_code == 200
            assert stack.upstream.first_event_sent.wait(10)  # alice's one request is in flight
            second = client.post("/v1/chat/completions", json=body, headers=headers)
            other = client.post("/v1/chat/completions", json={**body, "stream": False},
                                headers={"authorization": f"Bearer {stack.keys['bob']}"})
            stack.upstream.release()
            held.read()
        assert second.status_code == 429 and second.headers["retry-after"] == "1"
        assert second.json()["error"]["type"] == "invalid_request_error"  # OpenAI's shape: the SDK raises its error
        assert other.status_code == 200
        after = httpx.post(stack.url + "/v1/chat/completions", json={**body, "stream": False}, headers=headers)
        assert after.status_code == 200  # the slot came free when the stream ended


def test_keys_limits_command(tmp_path, capsys, monkeypatch):
    config = tmp_path / "memroute.toml"
    config.write_text(f'data_dir = "{tmp_path / "data"}"\n', encoding="utf-8")
    monkeypatch.setenv("MEMORY_EMBEDDING_SOURCE", "none")

    def run(*args: str) -> tuple[int, str]:
        try:
            main(["--config", str(config), *args])
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        return code, capsys.readouterr().out

    _, out = run("keys", "create", "--name", "app", "--json")
    key_id = json.loads(out)["key"]["id"]
    code, out = run("keys", "limits", key_id, "--requests-per-minute", "120", "--json")
    assert code == 0 and json.loads(out) == {
        "key": key_id, "own": {"requestsPerMinute": 120, "concurrentRequests": None},
        "effective": {"requestsPerMinute": 120, "concurrentRequests": 64}}
    code, out = run("keys", "limits", key_id)
    assert code == 0 and "requests per minute: 120  concurrent requests: 64 (default)" in out
    code, out = run("keys", "limits", key_id, "--default", "--json")
    assert json.loads(out)["own"] == {"requestsPerMinute": None, "concurrentRequests": None}
    assert run("keys", "limits", "key_missing")[0] != 0


def test_slow_headers_are_cut_off_by_memroute_serve(tmp_path):
    with MemrouteServer(tmp_path, config={"server": {"header_timeout_s": 0.5}}, workers=1, keys=False) as server:
        host, port = server.base_url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=20) as trickle, \
                socket.create_connection((host, int(port)), timeout=20) as silent:
            trickle.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # ... and the rest never comes
            assert trickle.recv(1024) == b""  # closed by the server, not by our 20 s timeout
            assert silent.recv(1024) == b""  # a connection that never sends anything is closed too
        assert httpx.get(server.base_url + "/healthz").status_code == 200


def test_a_flood_of_one_key_is_refused_while_another_key_is_served(tmp_path):
    with MemrouteServer(tmp_path, config={"server": {"concurrent_requests": 4}}) as server:
        statuses: list[int] = []
        stop = threading.Event()

        def flood() -> None:
            with server.client(server.tenant_a) as a:
                while not stop.is_set():
                    statuses.append(a.post("/api/memory/search", json={"query": "tea"}).status_code)

        threads = [threading.Thread(target=flood) for _ in range(12)]
        for thread in threads:
            thread.start()
        try:
            with server.client(server.tenant_b) as b:
                served = [b.post("/api/memory/search", json={"query": "tea"}).status_code for _ in range(20)]
            deadline = time.monotonic() + 30
            while 429 not in statuses and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
    assert served == [200] * 20
    assert set(statuses) <= {200, 429} and 429 in statuses


def test_a_write_past_the_tenants_quota_is_a_403_naming_it(tmp_path):
    with MemrouteServer(tmp_path, config={"limits": {"max_memories_per_tenant": 2}}) as server, \
            server.client(server.tenant_a) as a, server.client(server.tenant_b) as b:
        for n in range(2):
            assert a.post("/api/memory", json={"content": f"I like tea {n}", "key": f"tea:{n}"}).status_code == 201
        refused = a.post("/api/memory", json={"content": "one too many", "key": "tea:2"})
        assert refused.status_code == 403
        assert refused.json()["error"]["details"] == [{"field": "quota", "message": "memories"}]
        assert refused.json()["error"]["message"].startswith("quota exceeded")
        assert b.post("/api/memory", json={"content": "I like coffee", "key": "coffee"}).status_code == 201
        assert a.get("/api/memory").json()["total"] == 2
