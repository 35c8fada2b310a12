"""The SDK wrappers with the real ``openai`` and ``anthropic`` SDKs, sync and async clients, plain and streamed
(``stream=True`` and the SDKs' ``.stream()`` helpers), against the loopback fake model server (it stands in
for the paid remote API) and a real SQLite-backed service. Two tenants throughout."""

from __future__ import annotations

import asyncio
import logging

import anthropic
import openai
import pytest

import memroute
from memroute.aio import AsyncMemroute
from memroute.errors import ValidationError
from memroute.integrations import wrap_anthropic, wrap_openai
from memroute.pipeline.inject import BLOCK_START
from tests.servers.fake_llm import fake_llm_server

REPLY = "I prefer Rust for tooling."
QUESTION = "Which database for this project? I prefer Ubuntu servers."
MESSAGES = [{"role": "user", "content": QUESTION}]
APIS = ("chat", "responses", "anthropic")
MODES = ("plain", "stream", "helper")


@pytest.fixture(scope="module")
def server():
    with fake_llm_server() as running:
        yield running


@pytest.fixture
def mem(tmp_path, server):
    server.reply = REPLY
    server.release()
    with memroute.open(data_dir=str(tmp_path / "d"), memory={"enabled": True}, embedding={"source": "none"},
                       # the wrappers' tests count what the reference's regex extractor learns, facts only
                       extraction={"mine_assistant": True, "extractors": ["regex"], "keep_turns": "none"}) as service:
        service.add(api_key_id="alice", content="I'll use Postgres for this project", key="decision:db")
        service.add(api_key_id="bob", content="I'll use MySQL for this project", key="decision:db")
        yield service


def _client(api: str, server, *, asynchronous: bool):
    if api == "anthropic":
        kind = anthropic.AsyncAnthropic if asynchronous else anthropic.Anthropic
        return kind(base_url=server.base_url, api_key="sk-fake", max_retries=0)
    kind = openai.AsyncOpenAI if asynchronous else openai.OpenAI
    return kind(base_url=server.base_url + "/v1", api_key="sk-fake", max_retries=0)


def _wrap(api: str, client, mem, tenant: str):
    return (wrap_anthropic if api == "anthropic" else wrap_openai)(client, mem, tenant)


def _text_of(api: str, event) -> str:
    """The reply text one event carries (raw SDK events and the helpers' events alike)."""
    kind = getattr(event, "type", None)
    if api == "chat":
        if kind == "content.delta":  # chat.completions.stream()
            return event.delta
        if kind is None and event.choices:  # a raw ChatCompletionChunk
            return event.choices[0].delta.content or ""
        return ""
    if api == "anthropic":
        return event.delta.text if kind == "content_block_delta" else ""
    return event.delta if kind == "response.output_text.delta" else ""


def _request(api: str, client):
    """(the wrapped resource, the call's keywords) of one API."""
    if api == "anthropic":
        return client.messages, {"model": "m", "max_tokens": 50, "messages": MESSAGES}
    if api == "chat":
        return client.chat.completions, {"model": "m", "messages": MESSAGES}
    return client.responses, {"model": "m", "input": MESSAGES}


def _reply_of(api: str, response) -> str:
    if api == "anthropic":
        return response.content[0].text
    return response.choices[0].message.content if api == "chat" else response.output_text


def _call(api: str, client, mode: str) -> tuple[str, list]:
    """(reply text, events) of one call through a sync client."""
    resource, kwargs = _request(api, client)
    if mode == "plain":
        response = resource.create(**kwargs)
        return _reply_of(api, response), []
    if mode == "stream":
        with resource.create(**kwargs, stream=True) as stream:
            events = list(stream)
    else:
        with resource.stream(**kwargs) as stream:
            events = list(stream)
    return "".join(_text_of(api, event) for event in events), events


async def _acall(api: str, client, mode: str) -> tuple[str, list]:
    async with client:  # the async client's connections close on this loop
        return await _acall_open(api, client, mode)


async def _acall_open(api: str, client, mode: str) -> tuple[str, list]:
    resource, kwargs = _request(api, client)
    if mode == "plain":
        response = await resource.create(**kwargs)
        return _reply_of(api, response), []
    if mode == "stream":
        stream = await resource.create(**kwargs, stream=True)
        async with stream:
            events = [event async for event in stream]
    else:
        async with resource.stream(**kwargs) as stream:
            events = [event async for event in stream]
    return "".join(_text_of(api, event) for event in events), events


def _sent_memory(api: str, body: dict) -> str:
    if api == "anthropic":
        return body.get("system") or ""
    if api == "responses":
        return str(body.get("instructions") or "") + str(body.get("input"))
    return str(body["messages"])


def _contents(service, tenant: str) -> set[str]:
    service.flush(10)
    return {m.content for m in service.list(api_key_id=tenant, limit=100).data}


def _check_turn(api: str, server, mem, text: str, events: list) -> None:
    assert text == REPLY
    sent = _sent_memory(api, server.last["body"])
    assert sent.count(BLOCK_START) == 1 and "Postgres" in sent and "MySQL" not in sent
    alice, bob = _contents(mem, "alice"), _contents(mem, "bob")
    assert {"Ubuntu servers", "Rust for tooling"} <= alice  # the user turn and (mine_assistant) the reply
    assert bob == {"I'll use MySQL for this project"}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_sync_clients(api, mode, server, mem):
    client = _wrap(api, _client(api, server, asynchronous=False), mem, "alice")
    _wrap(api, client, mem, "alice")  # wrapping twice changes nothing
    text, events = _call(api, client, mode)
    _check_turn(api, server, mem, text, events)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_async_clients_with_the_async_api(api, mode, server, mem):
    async def main() -> tuple[str, list]:
        amem = AsyncMemroute(mem, max_workers=2)  # (closing it would close mem: the fixture does that)
        client = _wrap(api, _client(api, server, asynchronous=True), amem, "alice")
        return await _acall(api, client, mode)

    text, events = asyncio.run(main())
    _check_turn(api, server, mem, text, events)


def test_an_async_client_with_the_sync_service_and_a_sync_client_with_the_async_api(server, mem):
    text, _ = asyncio.run(_acall("chat", _wrap("chat", _client("chat", server, asynchronous=True), mem, "alice"),
                                 "stream"))
    _check_turn("chat", server, mem, text, [])
    amem = AsyncMemroute(mem)
    text, _ = _call("anthropic", _wrap("anthropic", _client("anthropic", server, asynchronous=False), amem, "bob"),
                    "helper")
    assert text == REPLY and "MySQL" in server.last["body"]["system"]
    assert "Postgres" not in server.last["body"]["system"]
    assert {"Ubuntu servers", "Rust for tooling"} <= _contents(mem, "bob")


def test_streamed_events_are_the_sdks_own_unchanged(server, mem):
    plain = _client("chat", server, asynchronous=False)
    with plain.chat.completions.create(model="m", messages=MESSAGES, stream=True) as stream:
        expected = [event.model_dump() for event in stream]
    wrapped = wrap_openai(_client("chat", server, asynchronous=False), mem, "alice")
    with wrapped.chat.completions.create(model="m", messages=MESSAGES, stream=True) as stream:
        assert stream.response.status_code == 200  # the SDK stream's own attributes pass through
        events = list(stream)
    assert all(isinstance(event, openai.types.chat.ChatCompletionChunk) for event in events)
    assert [event.model_dump() for event in events] == expected


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("api", ["chat", "anthropic"])
def test_the_first_event_arrives_before_the_model_finishes(api, asynchronous, server, mem):
    """The server holds the stream after its first event: the caller must get that event while the rest
    has not been sent, and nothing is observed until the stream ends."""
    kwargs = {"model": "m", "messages": MESSAGES, "stream": True}
    if api == "anthropic":
        kwargs["max_tokens"] = 50
    server.hold()
    try:
        if asynchronous:
            async def main() -> list:
                client = _wrap(api, _client(api, server, asynchronous=True), AsyncMemroute(mem), "alice")
                async with client:
                    resource = client.messages if api == "anthropic" else client.chat.completions
                    stream = await resource.create(**kwargs)
                    first = await stream.__anext__()
                    assert "Ubuntu servers" not in _contents(mem, "alice")
                    server.release()
                    return [first] + [event async for event in stream]

            events = asyncio.run(main())
        else:
            client = _wrap(api, _client(api, server, asynchronous=False), mem, "alice")
            resource = client.messages if api == "anthropic" else client.chat.completions
            stream = resource.create(**kwargs)
            first = next(stream)
            assert "Ubuntu servers" not in _contents(mem, "alice")
            server.release()
            events = [first, *stream]
    finally:
        server.release()
    assert "".join(_text_of(api, event) for event in events) == REPLY
    assert {"Ubuntu servers", "Rust for tooling"} <= _contents(mem, "alice")


@pytest.mark.parametrize("api", APIS)
def test_a_stream_left_early_observes_the_user_turn_only(api, server, mem):
    client = _wrap(api, _client(api, server, asynchronous=False), mem, "alice")
    resource, kwargs = _request(api, client)
    with resource.stream(**kwargs) as stream:
        next(iter(stream))
    contents = _contents(mem, "alice")
    assert "Ubuntu servers" in contents and "Rust for tooling" not in contents  # a cut-off reply is not mined
    with resource.create(**kwargs, stream=True) as raw:
        next(raw)
    assert "Rust for tooling" not in _contents(mem, "alice")


@pytest.mark.parametrize("asynchronous", [False, True])
def test_an_observe_failure_never_breaks_the_callers_stream(asynchronous, server, mem, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("extraction exploded")

    monkeypatch.setattr(mem, "observe", broken)  # fault injection: the service's observe fails
    amem = AsyncMemroute(mem)
    monkeypatch.setattr(amem, "observe", broken)
    caplog.set_level(logging.ERROR, "memroute.integrations")
    for api in APIS:
        for mode in ("stream", "helper", "plain"):
            if asynchronous:
                client = _wrap(api, _client(api, server, asynchronous=True), amem, "alice")
                text, _ = asyncio.run(_acall(api, client, mode))
            else:
                text, _ = _call(api, _wrap(api, _client(api, server, asynchronous=False), mem, "alice"), mode)
            assert text == REPLY
    assert "observe failed" in caplog.text


def test_an_augment_failure_sends_the_request_without_memory(server, mem, monkeypatch):
    monkeypatch.setattr(mem, "explain_augment", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("down")))
    text, _ = _call("anthropic", _wrap("anthropic", _client("anthropic", server, asynchronous=False), mem, "alice"),
                    "helper")
    assert text == REPLY and "system" not in server.last["body"]


def test_two_tenants_concurrently_from_one_loop(server, mem):
    async def main() -> None:
        amem = AsyncMemroute(mem, max_workers=4)
        clients = {tenant: wrap_openai(_client("chat", server, asynchronous=True), amem, tenant)
                   for tenant in ("alice", "bob")}

        async def turn(tenant: str, i: int) -> str:
            stream = await clients[tenant].chat.completions.create(
                model=f"{tenant}-{i}", stream=True,
                messages=[{"role": "user", "content": f"database for this project? I prefer {tenant} {i} tea."}])
            return "".join([_text_of("chat", event) async for event in stream])

        texts = await asyncio.gather(*(turn(("alice", "bob")[i % 2], i) for i in range(10)))
        for client in clients.values():
            await client.close()
        assert texts == [REPLY] * 10

    asyncio.run(main())
    for request in [r for r in server.requests if r["path"] == "/v1/chat/completions"][-10:]:
        tenant = request["body"]["model"].split("-")[0]
        system = request["body"]["messages"][0]["content"]
        assert ("Postgres" in system) == (tenant == "alice") and ("MySQL" in system) == (tenant == "bob")
    alice, bob = _contents(mem, "alice"), _contents(mem, "bob")
    assert all("alice" in c for c in alice if c.endswith("tea"))
    assert all("bob" in c for c in bob if c.endswith("tea"))
    assert len([c for c in alice | bob if c.endswith("tea")]) == 10


def test_a_bad_tenant_is_refused_when_wrapping(server, mem):
    with pytest.raises(ValidationError):
        wrap_openai(_client("chat", server, asynchronous=False), mem, "")
