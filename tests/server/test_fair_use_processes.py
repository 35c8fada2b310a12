"""A key's concurrency cap holds across two real ``memroute serve`` processes on one deployment (issue 29: "works
across several server processes"), and a process killed with ``kill -9`` does not keep its slots: they come free
when its lease in the state store runs out (``[server] concurrency_lease_s``).

Process A proxies a chat stream that the loopback model server holds open (one request of tenant A's key in
flight); process B then refuses that key a second request — a 429 in memroute's shape with ``Retry-After`` —
while it serves tenant B. A is killed; B keeps refusing until A's lease has expired, then serves tenant A."""

from __future__ import annotations

import os
import signal
import time

import httpx

from tests.servers.fake_llm import fake_llm_server
from tests.servers.memroute_server import MemrouteServer

LEASE_S = 4


def _config(upstream_url: str) -> dict:
    return {"embedding": {"source": "none"}, "memory": {"enabled": True},
            "extraction": {"extractors": ["regex"], "keep_turns": "none"},
            "server": {"concurrency_lease_s": LEASE_S},
            "proxy": {"openai": {"base_url": upstream_url + "/v1", "allow_private": True, "api_key": "sk-up"}}}


def _search(url: str, secret: str) -> httpx.Response:
    return httpx.post(url + "/api/memory/search", json={"query": "tea"},
                      headers={"Authorization": f"Bearer {secret}"}, timeout=30)


def test_the_concurrency_cap_holds_across_processes_and_a_killed_process_frees_its_slots(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    chat = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hello"}]}
    with fake_llm_server() as upstream, \
            MemrouteServer(tmp_path / "a", config=_config(upstream.base_url), workers=1) as one, \
            MemrouteServer(tmp_path / "b", config=_config(upstream.base_url), workers=1, keys=False) as two:
        alice, bob = one.tenant_a, one.tenant_b  # keys of the shared deployment, seen by both processes
        with one.client(one.admin) as admin:
            assert admin.put(f"/api/keys/{one.keys['tenant_a'].id}/limits",
                             json={"concurrentRequests": 1}).status_code == 200
        assert _search(two.base_url, alice).status_code == 200  # one at a time is within the cap
        upstream.hold()
        held = httpx.Client(base_url=one.base_url, timeout=60)
        stream = held.stream("POST", "/v1/chat/completions", json=chat, headers={"authorization": f"Bearer {alice}"})
        response = stream.__enter__()
        try:
            assert response.status_code == 200
            assert upstream.first_event_sent.wait(30)  # alice's one request is in flight, in process A
            refused = _search(two.base_url, alice)
            assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["message"] == \
                "too many requests in flight for this API key (at most 1 at once)"
            assert _search(two.base_url, bob).status_code == 200  # another key is not affected

            os.kill(one._process.pid, signal.SIGKILL)  # A dies with alice's slot leased
            one._process.wait(30)
            killed_at = time.monotonic()
            assert _search(two.base_url, alice).status_code == 429  # the lease outlives the process ...
            deadline = killed_at + LEASE_S * 10
            status = 429
            while status == 429 and time.monotonic() < deadline:
                time.sleep(0.25)
                status = _search(two.base_url, alice).status_code
            assert status == 200  # ... until it runs out: the slot is free again
        finally:
            upstream.release()
            try:
                stream.__exit__(None, None, None)
            except httpx.HTTPError:
                pass  # the connection died with process A
            held.close()
