"""The memory proxy's pure parts: its settings, which headers cross it, and reading a collected stream."""

from __future__ import annotations

import json

import httpx
import pytest

from memroute.config.settings import UpstreamSettings, load_settings
from memroute.errors import ConfigError
from memroute.pipeline.requests import assistant_text
from memroute.server.proxy.sse import ReplyCollector, iter_events, reply_from_events
from memroute.server.proxy.upstream import Upstream, forward_headers, response_headers


def test_upstream_settings_expand_the_environment_and_hide_the_key():
    settings = load_settings({"proxy": {"openai": {"base_url": "https://api.example.com/v1",
                                                   "api_key": "${UPSTREAM_KEY}"}}},
                             environ={"UPSTREAM_KEY": "sk-123"})
    assert settings.proxy.openai.api_key == "sk-123"
    assert "sk-123" not in repr(settings)
    assert settings.proxy.anthropic.base_url is None  # no network unless configured


@pytest.mark.parametrize(("options", "field"), [
    ({"base_url": "ftp://example.com"}, "base_url"),
    ({"base_url": "https://user:pw@example.com/v1"}, "base_url"),
    ({"timeout": 0}, "timeout"),
    ({"allow_private": "yes please"}, "allow_private"),
    ({"bogus": 1}, "bogus"),
    ({"max_connections": 0}, r"max_connections: must be in \[1, 10000\], got 0"),
    ({"max_connections": 10_001}, r"max_connections: must be in \[1, 10000\]"),
    ({"max_connections": -5}, r"max_connections: must be in"),
    ({"max_connections": 2.5}, "max_connections: expected an integer"),
    ({"max_connections": True}, "max_connections: expected an integer"),
    ({"max_connections": "many"}, "max_connections"),
])
def test_bad_upstream_settings_are_config_errors_naming_the_field(options, field):
    with pytest.raises(ConfigError, match=field):
        load_settings({"proxy": {"openai": options}}, environ={})


def test_max_connections_is_per_upstream_with_httpxs_default():
    settings = load_settings({"proxy": {"anthropic": {"max_connections": 8}}}, environ={}).proxy
    assert settings.openai.max_connections == 100 and settings.anthropic.max_connections == 8


def test_the_callers_credentials_and_control_headers_stay_home():
    kept = forward_headers([
        ("Authorization", "Bearer mr_secret"), ("x-api-key", "mr_secret"), ("Cookie", "a=b"),
        ("Host", "memroute"), ("Content-Length", "12"), ("Connection", "keep-alive"),
        ("x-memroute-no-memory", "1"), ("X-Omniroute-Session-Id", "s"), ("accept-encoding", "br"),
        ("anthropic-version", "2023-06-01"), ("OpenAI-Organization", "org"), ("x-stainless-lang", "python"),
        ("content-type", "application/json"),
    ])
    assert [name.lower() for name, _ in kept] == ["anthropic-version", "openai-organization", "x-stainless-lang",
                                                 "content-type"]


def test_upstream_requests_carry_memroutes_credential_in_the_apis_style():
    openai = Upstream("openai", UpstreamSettings(base_url="http://127.0.0.1:1/v1/", api_key="sk-o"))
    request = openai.build("POST", "/chat/completions", headers=[("authorization", "Bearer mr_x")], content=b"{}")
    assert str(request.url) == "http://127.0.0.1:1/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-o"
    anthropic = Upstream("anthropic", UpstreamSettings(base_url="http://127.0.0.1:1", api_key="sk-a"))
    request = anthropic.build("POST", "/v1/messages", headers=[("x-api-key", "mr_x")], content=b"{}", json_body=True)
    assert request.headers["x-api-key"] == "sk-a" and "authorization" not in request.headers
    assert request.headers["content-type"] == "application/json"
    bare = Upstream("openai", UpstreamSettings(base_url="http://127.0.0.1:1/v1"))
    assert "authorization" not in bare.build("GET", "/models", headers=[("authorization", "Bearer mr_x")]).headers


def test_response_headers_keep_rate_limit_information():
    headers = httpx.Headers([("Retry-After", "7"), ("x-ratelimit-remaining-requests", "0"), ("content-length", "9"),
                             ("content-encoding", "gzip"), ("transfer-encoding", "chunked"), ("set-cookie", "a=b"),
                             ("content-type", "application/json")])
    assert response_headers(headers) == {"retry-after": "7", "x-ratelimit-remaining-requests": "0",
                                         "content-type": "application/json"}


def _sse(*events: tuple[str | None, object]) -> bytes:
    out = b""
    for name, payload in events:
        if name:
            out += f"event: {name}\r\n".encode()
        out += b"data: " + (payload if isinstance(payload, bytes) else json.dumps(payload).encode()) + b"\r\n\r\n"
    return out


def test_a_streamed_chat_reply_reads_like_a_non_streamed_one():
    data = _sse((None, {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
                (None, {"choices": [{"index": 0, "delta": {"content": "I always "}}]}),
                (None, {"choices": [{"index": 1, "delta": {"content": "other choice"}}]}),
                (None, b"not json"), (None, {"choices": [{"index": 0, "delta": {"content": "use Rust."}}]}),
                (None, b"[DONE]"))
    reply = reply_from_events("openai-chat", data)
    assert assistant_text(reply) == "I always use Rust."


def test_streamed_anthropic_and_responses_replies():
    anthropic = _sse(("message_start", {"type": "message_start", "message": {}}),
                     ("content_block_delta", {"type": "content_block_delta",
                                              "delta": {"type": "text_delta", "text": "Hello "}}),
                     ("content_block_delta", {"type": "content_block_delta",
                                              "delta": {"type": "input_json_delta", "partial_json": "{"}}),
                     ("content_block_delta", {"type": "content_block_delta",
                                              "delta": {"type": "text_delta", "text": "there"}}))
    assert assistant_text(reply_from_events("anthropic", anthropic)) == "Hello there"
    responses = _sse(("response.output_text.delta", {"type": "response.output_text.delta", "delta": "A"}),
                     ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "B"}))
    assert assistant_text(reply_from_events("responses", responses)) == "AB"
    assert reply_from_events("responses", b"") is None


def test_sse_parsing_handles_comments_multiline_data_and_a_cut_off_tail():
    events = list(iter_events(b": keep-alive\n\nevent: x\ndata: a\ndata: b\n\ndata: {\"partial"))
    assert events == [("x", "a\nb"), ("", '{"partial')]


def test_the_collector_is_bounded():
    collector = ReplyCollector(limit=10)
    collector.feed(b"123456")
    collector.feed(b"789abc")
    collector.feed(b"more")
    assert collector.data() == b"123456789a" and collector.truncated and collector.size == 10
