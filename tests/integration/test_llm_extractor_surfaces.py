"""The ``llm`` extractor behind the surfaces that observe turns: memroute's proxy (the real ``openai`` SDK talks to
``memroute serve`` on a loopback socket, which forwards to the fake upstream) and the SDK wrappers
(``wrap_openai``). The extractor's model is a second loopback fake (tests/servers/fake_chat_model.py) whose
scripted answers stand in for a model's judgement; two tenants throughout, and ``engine-status`` shows each
tenant key only its own counters."""

from __future__ import annotations

import time

import openai
import pytest

import memroute
from memroute.integrations import wrap_openai
from tests.servers.fake_chat_model import Slow, fake_chat_model
from tests.servers.fake_llm import fake_llm_server
from tests.servers.proxy_stack import proxy_stack

LISBON = {"facts": [{"content": "Lives in Lisbon", "type": "factual", "category": "location"}]}
MADRID = {"facts": [{"content": "Lives in Madrid", "type": "factual", "category": "location"}]}


@pytest.fixture
def model():
    with fake_chat_model() as running:
        yield running


def llm_options(model, **more):
    return {"base_url": model.base_url, "model": "fake-extractor", "allow_private": True, "timeout": 5.0, **more}


def observed(stack, count, timeout=10.0):
    """Wait until the proxy handed ``count`` turns to ``observe`` (it does so after the answer went out), then
    until the service's extraction, the llm extractor's included, is done."""
    deadline = time.monotonic() + timeout
    while stack.proxy.stats.observed < count:
        assert time.monotonic() < deadline, "the proxy did not observe the turn"
        time.sleep(0.01)
    assert stack.mem.flush(30)


def contents(mem, tenant):
    return sorted(m.content for m in mem.export(tenant))


def test_turns_through_the_proxy_are_learned_per_tenant(tmp_path, model):
    with proxy_stack(tmp_path, extraction={"keep_turns": "none",
                                           "extractors": ["regex", "llm"], "llm": llm_options(model)}) as stack:
        model.on_extract(LISBON, MADRID)
        for count, (who, text) in enumerate((("alice", "I live in Lisbon."), ("bob", "I live in Madrid.")), 1):
            client = openai.OpenAI(base_url=stack.openai_url, api_key=stack.keys[who], max_retries=0)
            answer = client.chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": text}])
            assert answer.choices[0].message.content  # the upstream's reply came back untouched by extraction
            observed(stack, count)
        assert contents(stack.mem, stack.tenants["alice"]) == ["Lives in Lisbon"]
        assert contents(stack.mem, stack.tenants["bob"]) == ["Lives in Madrid"]
        sent = [model.data_of(r)["conversation"][0]["text"] for r in model.requests]
        assert sent == ["I live in Lisbon.", "I live in Madrid."]

        # A tenant key's engine-status shows its own counters only; the admin sees every tenant.
        with stack.server.client(stack.keys["bob"]) as bob:
            mine = bob.get("/api/memory/engine-status").json()["extraction"]
        assert mine["extractors"] == ["regex", "llm"]
        assert mine["llm"]["tenant"] == stack.tenants["bob"] and mine["llm"]["requests"] == 1
        assert "tenants" not in mine["llm"] and stack.tenants["alice"] not in str(mine)
        with stack.server.client(stack.keys["admin"]) as admin:
            every = admin.get("/api/memory/engine-status").json()["extraction"]["llm"]
        assert set(every["tenants"]) == {stack.tenants["alice"], stack.tenants["bob"]}
        assert every["requests"] == 2 and every["prompt_tokens"] == 240

        # The pipeline health probe runs the offline extractors only: no model request per probe.
        with stack.server.client(stack.keys["alice"]) as alice:
            assert alice.get("/api/memory/health").json()["working"] is True
        assert len(model.requests) == 2


def test_a_hung_extraction_model_never_delays_a_proxied_request(tmp_path, model):
    # The model hangs past the extractor's timeout; the proxied request answers anyway, and the regex fact stays.
    with proxy_stack(tmp_path, extraction={"keep_turns": "none", "extractors": ["regex", "llm"],
                                           "llm": llm_options(model, timeout=1.0)}) as stack:
        model.on_extract(Slow(3.0, LISBON))
        client = openai.OpenAI(base_url=stack.openai_url, api_key=stack.keys["alice"], max_retries=0, timeout=30)
        answer = client.chat.completions.create(
            model="gpt-x", messages=[{"role": "user", "content": "I prefer Rust for tooling."}])
        assert answer.choices[0].message.content
        observed(stack, 1)
        assert contents(stack.mem, stack.tenants["alice"]) == ["Rust for tooling"]
        assert stack.mem.status().extraction["llm"]["failures"] == {"timeout": 1}


def test_the_sdk_wrapper_observes_into_the_llm_extractor(tmp_path, model):
    with fake_llm_server() as upstream, memroute.open(
            data_dir=str(tmp_path / "d"), memory={"enabled": True}, embedding={"source": "none"},
            extraction={"keep_turns": "none", "extractors": ["regex", "llm"], "llm": llm_options(model)}) as mem:
        mem.add(api_key_id="alice", content="Lives in Berlin", key="profile:location")
        mem.add(api_key_id="bob", content="Lives in Berlin too", key="profile:location")
        model.on_extract(LISBON)
        model.on_decide({"operations": [{"candidate": 0, "event": "update", "memory": "m1",
                                         "content": "Lives in Lisbon"}]})
        client = wrap_openai(openai.OpenAI(base_url=upstream.base_url + "/v1", api_key="sk-fake", max_retries=0),
                             mem, "alice")
        client.chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": "I moved to Lisbon."}])
        assert mem.flush(30)
        assert contents(mem, "alice") == ["Lives in Lisbon"]
        assert contents(mem, "bob") == ["Lives in Berlin too"]
        (decide,) = model.of_step("decide")
        shown = [m["content"] for c in model.data_of(decide)["candidates"] for m in c["memories"]]
        assert shown == ["Lives in Berlin"]


def test_the_anthropic_and_async_wrappers_observe_into_the_llm_extractor(tmp_path, model):
    import asyncio

    import anthropic

    from memroute.aio import AsyncMemroute
    from memroute.integrations import wrap_anthropic

    with fake_llm_server() as upstream, memroute.open(
            data_dir=str(tmp_path / "d"), memory={"enabled": True}, embedding={"source": "none"},
            extraction={"keep_turns": "none", "extractors": ["llm"], "llm": llm_options(model)}) as mem:
        model.on_extract(LISBON, MADRID)
        claude = wrap_anthropic(anthropic.Anthropic(base_url=upstream.base_url, api_key="sk-fake", max_retries=0),
                                mem, "alice")
        claude.messages.create(model="claude-x", max_tokens=50,
                               messages=[{"role": "user", "content": "I live in Lisbon."}])
        assert mem.flush(30)

        async def bob_turn():
            amem = AsyncMemroute(mem, close_service=False)
            try:
                client = wrap_openai(openai.AsyncOpenAI(base_url=upstream.base_url + "/v1", api_key="sk-fake",
                                                        max_retries=0), amem, "bob")
                await client.chat.completions.create(model="gpt-x",
                                                     messages=[{"role": "user", "content": "I live in Madrid."}])
            finally:
                await amem.aclose()

        asyncio.run(bob_turn())
        assert mem.flush(30)
        assert contents(mem, "alice") == ["Lives in Lisbon"]
        assert contents(mem, "bob") == ["Lives in Madrid"]
