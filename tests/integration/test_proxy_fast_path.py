"""The proxy's request path after the latency work (docs/performance.md, "The memory proxy"): what it skips must
not change what it guarantees. The real ``openai`` SDK and raw httpx against memroute on a loopback socket, the
fake model server behind it (standing in for the paid remote API)."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

import memroute
from memroute.server.proxy.upstream import _CoalescingStream
from tests.servers.proxy_stack import proxy_stack

QUESTION = "Which database for this project?"
REPLY = {"id": "chatcmpl-x", "object": "chat.completion", "created": 0, "model": "gpt-4o",
         "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "OK."}}]}


@pytest.fixture
def stack(tmp_path):
    # The embedded default's static embedding: with no vector leg a retrieval is degraded and never reused.
    with proxy_stack(tmp_path, embedding="static") as running:
        yield running


@pytest.fixture
def roomy(tmp_path):
    """A stack whose inline budget no search here exceeds (``[proxy] inline_search_ms = 1000``): which searches run
    on the loop then depends on what the proxy has seen, not on how loaded the machine running the tests is."""
    with proxy_stack(tmp_path, embedding="static", proxy={"inline_search_ms": 1000}) as running:
        yield running


def _chat(stack, who, content=QUESTION, **headers):
    return httpx.post(stack.openai_url + "/chat/completions",
                      json={"model": "gpt-4o", "messages": [{"role": "user", "content": content}]},
                      headers={"authorization": f"Bearer {stack.keys[who]}", **headers})


def test_a_key_revoked_elsewhere_fails_at_once_on_the_next_request(stack):
    key, secret = stack.server.create_key("short-lived", tenant=stack.tenants["alice"])
    stack.keys["short"] = secret
    assert _chat(stack, "short").status_code == 200
    other = memroute.open(str(stack.server.config_path))  # another process of the deployment, in effect
    try:
        other.keys.revoke(key.id)
    finally:
        other.close()
    refused = _chat(stack, "short")
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]
    assert len(stack.upstream.requests) == 1


def test_a_cookie_the_upstream_sets_for_one_tenant_never_rides_along_for_another(stack):
    stack.upstream.fail_next(200, REPLY, {"Set-Cookie": "upstream_session=alice-only; Path=/"})
    first = _chat(stack, "alice")
    assert first.status_code == 200 and "set-cookie" not in first.headers
    assert _chat(stack, "bob").status_code == 200
    assert _chat(stack, "alice").status_code == 200
    assert [r["headers"].get("cookie") for r in stack.upstream.requests] == [None, None, None]


def test_the_retrieval_reused_for_a_repeated_message_stays_with_its_tenant(stack, hops):
    """Two tenants send the same message over and over (an agent's tool loop each): each gets its own memories
    every time, the first time and from the reused retrieval, and a write by one tenant shows up in its next
    request without touching the other's."""
    for who, fact in (("alice", "I'll use Postgres for this project."), ("bob", "I'll use MySQL for this project.")):
        stack.mem.observe({"messages": [{"role": "user", "content": fact}]}, api_key_id=stack.tenants[who], wait=True)
    assert stack.mem.flush(timeout=30)  # vectors indexed: a retrieval while they are pending is degraded
    client = {who: openai.OpenAI(base_url=stack.openai_url, api_key=stack.keys[who], max_retries=0)
              for who in ("alice", "bob")}
    for _ in range(3):
        for who, mine, theirs in (("alice", "Postgres", "MySQL"), ("bob", "MySQL", "Postgres")):
            raw = client[who].chat.completions.with_raw_response.create(
                model="gpt-4o", messages=[{"role": "user", "content": QUESTION}])
            assert raw.headers["x-memroute-memories"] == "1"
            injected = stack.upstream.last["body"]["messages"][0]["content"]
            assert mine in injected and theirs not in injected
    assert hops.count("augment") == 2  # one search per tenant; the four repeats reused them
    stack.mem.observe({"messages": [{"role": "user", "content": "I prefer SQLite for this project."}]},
                      api_key_id=stack.tenants["alice"], wait=True)
    client["alice"].chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": QUESTION}])
    assert "SQLite" in stack.upstream.last["body"]["messages"][0]["content"]
    client["bob"].chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": QUESTION}])
    bobs = stack.upstream.last["body"]["messages"][0]["content"]
    assert "MySQL" in bobs and "SQLite" not in bobs and "Postgres" not in bobs
    for value in client.values():
        value.close()


def test_the_chat_routes_are_matched_first_and_still_declare_their_scope(stack):
    app = stack.server._server.config.app
    first = app.router.routes[:3]
    assert [route.path for route in first] == ["/v1/chat/completions", "/v1/responses", "/v1/messages"]
    assert all(route.memroute_scope == "read" and route.methods == {"POST"} for route in first)
    wrong_method = httpx.get(stack.openai_url + "/chat/completions",
                             headers={"authorization": f"Bearer {stack.keys['alice']}"})
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["code"] == "method_not_allowed"


class _RecordingStream:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.writes.append(buffer)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return b"HTTP/1.1 200 OK\r\n\r\n"

    async def aclose(self) -> None:
        self.closed = True

    def get_extra_info(self, info: str) -> object:
        return info


def test_a_request_goes_out_in_one_write_before_its_response_is_read():
    async def scenario() -> _RecordingStream:
        inner = _RecordingStream()
        stream = _CoalescingStream(inner)  # type: ignore[arg-type]
        await stream.write(b"POST /v1/chat/completions HTTP/1.1\r\n\r\n")
        await stream.write(b"")
        await stream.write(b'{"model": "m"}')
        assert inner.writes == []  # held: the head waits for the body
        assert await stream.read(65536) == b"HTTP/1.1 200 OK\r\n\r\n"
        assert stream.get_extra_info("is_readable") == "is_readable"
        await stream.write(b"x" * 70_000)  # past the limit: sent at once, not held
        await stream.aclose()
        return inner

    inner = asyncio.run(scenario())
    assert inner.writes == [b'POST /v1/chat/completions HTTP/1.1\r\n\r\n{"model": "m"}', b"x" * 70_000]
    assert inner.closed


@pytest.fixture
def hops(monkeypatch):
    """The functions the server hands to a worker thread (counted, not timed; the real call still runs)."""
    import anyio.to_thread

    counted: list[str] = []
    real = anyio.to_thread.run_sync

    async def counting(func, *args, **kwargs):
        target = getattr(func, "func", func)
        counted.append(getattr(target, "__name__", repr(target)))
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counting)
    return counted


def test_only_a_search_leaves_the_event_loop(tmp_path, hops):
    """With ``[proxy] inline_search_ms = 0`` a new message's search runs in a worker thread (bounded by
    memory_timeout_s); the key check, an opted-out request and a repeated message (its retrieval reused) are
    answered on the loop."""
    with proxy_stack(tmp_path, embedding="static", proxy={"inline_search_ms": 0}) as stack:
        stack.mem.observe({"messages": [{"role": "user", "content": "I'll use Postgres for this project."}]},
                          api_key_id=stack.tenants["alice"], wait=True)
        assert stack.mem.flush(timeout=30)
        _chat(stack, "alice", "warm up the connection")
        hops.clear()
        first = _chat(stack, "alice")
        assert first.headers["x-memroute-memories"] == "1" and hops == ["augment"]
        hops.clear()
        again = _chat(stack, "alice")
        assert again.headers["x-memroute-memories"] == "1" and hops == []
        opted = _chat(stack, "alice", "something new", **{"x-memroute-no-memory": "1"})
        assert opted.headers["x-memroute-memory-skipped"] == "opted out by header" and hops == []
        assert stack.upstream.last["body"]["messages"] == [{"role": "user", "content": "something new"}]


def test_a_tenant_with_short_searches_searches_on_the_event_loop(roomy, hops):
    """On the embedded default (every component in this process) a tenant's first search goes to a worker thread;
    once its augments are known to be short (``[proxy] inline_search_ms``), a new message searches on the loop,
    with the same memories injected. Another tenant, not seen yet, still starts in the thread."""
    stack = roomy
    stack.mem.observe({"messages": [{"role": "user", "content": "I'll use Postgres for this project."}]},
                      api_key_id=stack.tenants["alice"], wait=True)
    assert stack.mem.flush(timeout=30)
    _chat(stack, "alice", "warm up the connection")
    assert hops == ["augment"]
    hops.clear()
    first = _chat(stack, "alice")
    assert first.headers["x-memroute-memories"] == "1" and hops == []
    injected = stack.upstream.last["body"]["messages"]
    assert "Postgres" in str(injected)
    assert stack.proxy.inline.inline >= 1
    _chat(stack, "bob", "a question of bob's")
    assert hops == ["augment"]


def test_on_the_loop_each_request_prepares_its_augment_once_and_only_searches_are_averaged(roomy, hops,
                                                                                          monkeypatch):
    """Once a tenant searches on the loop, a new message is one ``explain_augment`` call (not a cached-only probe
    and then the search), a repeated one too (its retrieval reused); the inline budget's average takes the
    searches' durations only, so fast reused retrievals cannot hide slow searches."""
    stack = roomy
    stack.mem.observe({"messages": [{"role": "user", "content": "I'll use Postgres for this project."}]},
                      api_key_id=stack.tenants["alice"], wait=True)
    assert stack.mem.flush(timeout=30)
    _chat(stack, "alice", "warm up the connection")
    assert hops == ["augment"]
    calls: list[bool] = []
    real = stack.mem.explain_augment

    def counting(*args, **kwargs):
        calls.append(bool(kwargs.get("cached_only")))
        return real(*args, **kwargs)

    monkeypatch.setattr(stack.mem, "explain_augment", counting)
    recorded: list[float] = []
    budget = stack.proxy.inline
    monkeypatch.setattr(budget, "record", lambda tenant, seconds: recorded.append(seconds))
    first = _chat(stack, "alice")
    assert first.headers["x-memroute-memories"] == "1" and calls == [False] and len(recorded) == 1
    again = _chat(stack, "alice")
    assert again.headers["x-memroute-memories"] == "1" and calls == [False, False] and len(recorded) == 1
    opted = _chat(stack, "alice", "something else", **{"x-memroute-no-memory": "1"})
    assert opted.headers["x-memroute-memory-skipped"] == "opted out by header" and len(recorded) == 1
    assert hops == ["augment"]  # nothing after the first search left the loop


def test_an_augment_report_says_whether_it_searched(tmp_path):
    with memroute.open(data_dir=str(tmp_path), memory={"enabled": True}) as mem:
        mem.add(api_key_id="u", content="Prefers Postgres for new projects", key="pref:db")
        assert mem.flush(timeout=30)
        request = {"model": "m", "messages": [{"role": "user", "content": "which database?"}]}
        assert mem.explain_augment(request, api_key_id="u", preview=False).searched is True
        assert mem.explain_augment(request, api_key_id="u", preview=False).searched is False  # reused
        assert mem.explain_augment(request, api_key_id="u").searched is True  # a preview always retrieves
        opted = mem.explain_augment(request, api_key_id="u", headers={"x-memroute-no-memory": "1"})
        assert opted.searched is False and opted.skipped == "opted out by header"


def test_the_memories_a_proxied_request_injects_count_as_accessed_by_their_tenant(stack):
    """The proxy counts the injected memories' accesses itself, while the upstream answers (not before the request
    goes out): each injected memory of the caller's tenant once per request, nobody else's."""
    stack.mem.observe({"messages": [{"role": "user", "content": "I'll use Postgres for this project."}]},
                      api_key_id=stack.tenants["alice"], wait=True)
    stack.mem.observe({"messages": [{"role": "user", "content": "I'll use Postgres for the side project."}]},
                      api_key_id=stack.tenants["bob"], wait=True)
    assert stack.mem.flush(timeout=30)
    for _ in range(3):
        assert _chat(stack, "alice").headers["x-memroute-memories"] == "1"
    assert stack.mem.flush(timeout=30)
    alice = stack.mem.list(api_key_id=stack.tenants["alice"]).data
    bob = stack.mem.list(api_key_id=stack.tenants["bob"]).data
    assert [m.access_count for m in alice] == [3] and [m.access_count for m in bob] == [0]


def test_an_augment_report_names_the_memories_it_injected(tmp_path):
    with memroute.open(data_dir=str(tmp_path), memory={"enabled": True}) as mem:
        kept = mem.add(api_key_id="u", content="Prefers Postgres for new projects", key="pref:db")
        assert mem.flush(timeout=30)
        request = {"model": "m", "messages": [{"role": "user", "content": "which database, Postgres?"}]}
        report = mem.explain_augment(request, api_key_id="u", preview=False, record_access=False)
        assert report.memory_ids == (kept.id,) and report.count == 1
        assert mem.flush(timeout=30) and mem.get(kept.id, api_key_id="u").access_count == 0
        assert mem.explain_augment(request, api_key_id="nobody", preview=False).memory_ids == ()
