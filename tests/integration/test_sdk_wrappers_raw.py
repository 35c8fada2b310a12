"""The SDK wrappers beyond ``create``: structured outputs (``parse``), the ``beta`` namespaces, and the raw views
(``with_raw_response``, ``with_streaming_response``), with the real ``openai`` and ``anthropic`` SDKs (sync and
async clients) against the loopback fake model server (it stands in for the paid remote API) and a real
SQLite-backed service. Two tenants: alice's requests carry alice's memories only."""

from __future__ import annotations

import asyncio
import inspect

import openai
import pydantic
import pytest

import memroute
from memroute.aio import AsyncMemroute
from tests.integration.test_sdk_wrappers import (
    APIS,
    MESSAGES,
    REPLY,
    _check_turn,
    _client,
    _contents,
    _reply_of,
    _request,
    _sent_memory,
    _text_of,
    _wrap,
)
from tests.servers.fake_llm import fake_llm_server

RAW_MODES = ("raw", "raw-stream", "streaming", "streaming-stream", "streaming-unread")


@pytest.fixture(scope="module")
def server():
    with fake_llm_server() as running:
        yield running


@pytest.fixture
def mem(tmp_path, server):
    server.reply = REPLY
    server.release()
    # At the default relevance floor: the turn's first sentence ("Which database ...") finds the stored decision
    # whatever else the turn and the tenant hold (tests/integration/test_relevance_scores.py).
    with memroute.open(data_dir=str(tmp_path / "d"), memory={"enabled": True},
                       embedding={"source": "none"},
                       # the wrappers' tests count what the reference's regex extractor learns, facts only
                       extraction={"mine_assistant": True, "extractors": ["regex"], "keep_turns": "none"}) as service:
        service.add(api_key_id="alice", content="I'll use Postgres for this project", key="decision:db")
        service.add(api_key_id="bob", content="I'll use MySQL for this project", key="decision:db")
        yield service


def _check_user_turn_only(api: str, server, mem) -> None:
    sent = _sent_memory(api, server.last["body"])
    assert "Postgres" in sent and "MySQL" not in sent
    alice = _contents(mem, "alice")
    assert "Ubuntu servers" in alice and "Rust for tooling" not in alice  # nothing parsed: nothing mined


# --- with_raw_response / with_streaming_response --------------------------------------------------------------
def _raw_call(api: str, client, mode: str) -> str | None:
    """The reply text of one call through a raw view of a sync client (``None``: the body was not parsed)."""
    resource, kwargs = _request(api, client)
    if mode == "raw":
        response = resource.with_raw_response.create(**kwargs)
        assert type(response).__name__ in ("LegacyAPIResponse", "APIResponse")  # the SDK's own, not a stand-in
        assert response.headers["x-request-id"] == "req_fake"
        return _reply_of(api, response.parse())
    if mode == "raw-stream":
        with resource.with_raw_response.create(**kwargs, stream=True).parse() as stream:
            return "".join(_text_of(api, event) for event in stream)
    with resource.with_streaming_response.create(**kwargs, stream=mode == "streaming-stream") as response:
        assert response.status_code == 200
        if mode == "streaming":
            return _reply_of(api, response.parse())
        if mode == "streaming-stream":
            return "".join(_text_of(api, event) for event in response.parse())
        assert b"".join(response.iter_bytes())  # read, but not parsed
        return None


async def _maybe_await(value):  # type: ignore[no-untyped-def]
    """OpenAI's raw ``parse()`` is sync on async clients too (its "legacy" response); Anthropic's is async."""
    return await value if inspect.isawaitable(value) else value


async def _araw_call(api: str, client, mode: str) -> str | None:
    async with client:
        resource, kwargs = _request(api, client)
        if mode == "raw":
            response = await resource.with_raw_response.create(**kwargs)
            assert type(response).__name__ in ("LegacyAPIResponse", "AsyncAPIResponse")
            return _reply_of(api, await _maybe_await(response.parse()))
        if mode == "raw-stream":
            stream = await _maybe_await((await resource.with_raw_response.create(**kwargs, stream=True)).parse())
            async with stream:
                return "".join([_text_of(api, event) async for event in stream])
        async with resource.with_streaming_response.create(**kwargs, stream=mode == "streaming-stream") as response:
            assert response.status_code == 200
            if mode == "streaming":
                return _reply_of(api, await response.parse())
            if mode == "streaming-stream":
                return "".join([_text_of(api, event) async for event in await response.parse()])
            assert b"".join([chunk async for chunk in response.iter_bytes()])
            return None


@pytest.mark.parametrize("mode", RAW_MODES)
@pytest.mark.parametrize("api", APIS)
def test_raw_views_of_sync_clients(api, mode, server, mem):
    client = _wrap(api, _client(api, server, asynchronous=False), mem, "alice")
    text = _raw_call(api, client, mode)
    if text is None:
        _check_user_turn_only(api, server, mem)
    else:
        _check_turn(api, server, mem, text, [])


@pytest.mark.parametrize("mode", RAW_MODES)
@pytest.mark.parametrize("api", APIS)
def test_raw_views_of_async_clients(api, mode, server, mem):
    async def main() -> str | None:
        client = _wrap(api, _client(api, server, asynchronous=True), AsyncMemroute(mem, max_workers=2), "alice")
        return await _araw_call(api, client, mode)

    text = asyncio.run(main())
    if text is None:
        _check_user_turn_only(api, server, mem)
    else:
        _check_turn(api, server, mem, text, [])


def test_a_raw_view_built_before_wrapping_is_rebuilt_wrapped(server, mem):
    client = _client("chat", server, asynchronous=False)
    stale = client.chat.completions.with_raw_response  # cached by the SDK, bound to the unwrapped create
    client_stale = client.with_raw_response.chat.completions
    wrap_openai_ = _wrap("chat", client, mem, "alice")
    assert client.chat.completions.with_raw_response is not stale
    for view in (wrap_openai_.chat.completions.with_raw_response, wrap_openai_.with_raw_response.chat.completions):
        assert view is not client_stale
        _check_turn("chat", server, mem, _reply_of("chat", view.create(model="m", messages=MESSAGES).parse()), [])


# --- structured outputs (parse) and the beta namespaces -------------------------------------------------------
class Decision(pydantic.BaseModel):
    database: str
    note: str


DECISION = '{"database": "Postgres", "note": "I prefer Rust for tooling."}'
BETA = "some-beta-2026-01-01"
PARSERS = ("chat", "beta-chat", "responses", "anthropic", "beta-anthropic")


def _api_of(parser: str) -> str:
    return parser.removeprefix("beta-")


def _parse_call(parser: str, client):
    """(the resource, the call's keywords, how to read the parsed object) of one structured-output call."""
    api = _api_of(parser)
    resource, kwargs = _request(api, client.beta if parser.startswith("beta-") else client)
    if api == "chat":
        return resource, {**kwargs, "response_format": Decision}, lambda r: r.choices[0].message.parsed
    if api == "responses":
        return resource, {**kwargs, "text_format": Decision}, lambda r: r.output_parsed
    if parser == "beta-anthropic":
        kwargs = {**kwargs, "betas": [BETA]}
    return resource, {**kwargs, "output_format": Decision}, lambda r: r.parsed_output


def _check_parsed(parser: str, server, mem, decision) -> None:
    assert decision == Decision.model_validate_json(DECISION)
    sent = _sent_memory(_api_of(parser), server.last["body"])
    assert sent.count("<memroute_memories>") == 1 and "Postgres" in sent and "MySQL" not in sent
    if parser == "beta-anthropic":
        assert server.last["headers"]["anthropic-beta"] == BETA
    alice, bob = _contents(mem, "alice"), _contents(mem, "bob")
    assert "Ubuntu servers" in alice and any("Rust for tooling" in c for c in alice)  # the parsed reply, mined
    assert bob == {"I'll use MySQL for this project"}


@pytest.mark.parametrize("parser", PARSERS)
def test_parse_through_sync_clients(parser, server, mem):
    server.reply = DECISION
    client = _wrap(_api_of(parser), _client(_api_of(parser), server, asynchronous=False), mem, "alice")
    _wrap(_api_of(parser), client, mem, "alice")  # twice: nothing injected twice
    resource, kwargs, parsed = _parse_call(parser, client)
    _check_parsed(parser, server, mem, parsed(resource.parse(**kwargs)))


@pytest.mark.parametrize("parser", PARSERS)
def test_parse_through_async_clients(parser, server, mem):
    server.reply = DECISION

    async def main():  # type: ignore[no-untyped-def]
        client = _wrap(_api_of(parser), _client(_api_of(parser), server, asynchronous=True), AsyncMemroute(mem),
                       "alice")
        async with client:
            resource, kwargs, parsed = _parse_call(parser, client)
            return parsed(await resource.parse(**kwargs))

    _check_parsed(parser, server, mem, asyncio.run(main()))


def test_parse_through_a_raw_view(server, mem):
    server.reply = DECISION
    client = _wrap("chat", _client("chat", server, asynchronous=False), mem, "alice")
    response = client.chat.completions.with_raw_response.parse(model="m", messages=MESSAGES, response_format=Decision)
    _check_parsed("chat", server, mem, response.parse().choices[0].message.parsed)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_anthropic_beta_messages_create_and_stream(asynchronous, server, mem):
    kwargs = {"model": "m", "max_tokens": 50, "messages": MESSAGES, "betas": [BETA]}
    if asynchronous:
        async def main() -> list[str]:
            client = _wrap("anthropic", _client("anthropic", server, asynchronous=True), AsyncMemroute(mem), "alice")
            async with client:
                reply = await client.beta.messages.create(**kwargs)
                async with client.beta.messages.stream(**kwargs) as stream:
                    streamed = "".join([text async for text in stream.text_stream])
                return [reply.content[0].text, streamed]

        texts = asyncio.run(main())
    else:
        client = _wrap("anthropic", _client("anthropic", server, asynchronous=False), mem, "alice")
        reply = client.beta.messages.create(**kwargs)
        with client.beta.messages.stream(**kwargs) as stream:
            texts = [reply.content[0].text, "".join(stream.text_stream)]
    assert texts == [REPLY, REPLY]
    beta_posts = [r for r in server.requests if r["path"].startswith("/v1/messages")][-2:]
    assert [r["headers"].get("anthropic-beta") for r in beta_posts] == [BETA] * 2
    _check_turn("anthropic", server, mem, REPLY, [])


def test_openai_beta_chat_is_wrapped_where_the_sdk_has_it(server, mem):
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="sk-fake", max_retries=0)
    _wrap("chat", client, mem, "alice")
    assert getattr(client.beta.chat.completions.create, "__memroute_wrapped__", False)
    with client.beta.chat.completions.stream(model="m", messages=MESSAGES) as stream:
        text = "".join(_text_of("chat", event) for event in stream)
    _check_turn("chat", server, mem, text, [])
