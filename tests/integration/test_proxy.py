"""The memory proxy end to end: the real ``openai`` and ``anthropic`` SDKs (and raw httpx) talk to memroute's
proxy on a loopback socket, which talks to the fake model server (``tests/servers/fake_llm.py``, standing in for
the paid remote API) on another one. Nothing in between is mocked."""

from __future__ import annotations

import json
import time

import anthropic
import httpx
import openai
import pytest

from memroute.pipeline.inject import BLOCK_START
from memroute.plugins import get_plugin_manager
from tests.servers.faulty_sqlite import FaultySqlitePlugin
from tests.servers.proxy_stack import proxy_stack

PREFS = "I'll use Postgres for this project. I prefer TypeScript."
QUESTION = "Which database for this project?"


def wait_until(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def remember(stack, who, text=PREFS):
    stack.mem.observe({"messages": [{"role": "user", "content": text}]}, api_key_id=stack.tenants[who], wait=True)


def contents(stack, who):
    return sorted(m.content for m in stack.mem.export(stack.tenants[who]))


def oai(stack, who="alice", **kwargs):
    return openai.OpenAI(base_url=stack.openai_url, api_key=stack.keys[who], max_retries=0, **kwargs)


def claude(stack, who="alice", **kwargs):
    return anthropic.Anthropic(base_url=stack.url, api_key=stack.keys[who], max_retries=0, **kwargs)


@pytest.fixture
def stack(tmp_path):
    with proxy_stack(tmp_path) as running:
        yield running


# --- injection and pass-through -----------------------------------------------------------------------------

def test_chat_completion_gets_memory_after_the_system_prompt_and_everything_else_unchanged(stack):
    remember(stack, "alice")
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}]
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": [{"type": "text", "text": QUESTION}, image]}]
    raw = oai(stack).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=messages, tools=tools, response_format={"type": "json_object"}, temperature=0.25,
        extra_body={"vendor_knob": {"x": [1, 2.5, None]}}, extra_headers={"x-memroute-session-id": "s-1",
                                                                          "x-custom": "kept"},
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "OK."
    assert raw.headers["x-memroute-memories"] == "1" and raw.headers["x-memroute-learning"] == "on"
    assert "x-memroute-memory-skipped" not in raw.headers
    assert raw.headers["x-request-id"] == "req_fake"  # upstream response headers reach the client

    sent = stack.upstream.last
    body = sent["body"]
    assert [m["role"] for m in body["messages"]] == ["system", "system", "user"]
    assert body["messages"][0] == messages[0]
    assert body["messages"][1]["content"].startswith(BLOCK_START)
    assert "Postgres for this project" in body["messages"][1]["content"]
    assert body["messages"][2] == messages[1]  # the image part arrives untouched
    assert body["tools"] == tools and body["response_format"] == {"type": "json_object"}
    assert body["temperature"] == 0.25 and body["vendor_knob"] == {"x": [1, 2.5, None]}
    # memroute's own upstream credential, never the caller's memroute key; control headers stay home.
    assert sent["headers"]["authorization"] == "Bearer sk-upstream-secret"
    assert not any(stack.keys["alice"] in value for value in sent["headers"].values())
    assert not any(name.startswith("x-memroute-") for name in sent["headers"])
    assert sent["headers"]["x-custom"] == "kept"


def test_non_streamed_response_is_returned_byte_for_byte(stack):
    request = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]}
    direct = httpx.post(stack.upstream.base_url + "/v1/chat/completions", json=request)
    through = httpx.post(stack.openai_url + "/chat/completions", json=request,
                         headers={"authorization": f"Bearer {stack.keys['alice']}"})
    assert through.status_code == direct.status_code == 200
    assert through.content == direct.content
    assert through.headers["content-type"] == "application/json"
    assert through.headers["x-memroute-memories"] == "0"
    assert through.headers["x-memroute-memory-skipped"] == "no memories"


def test_request_without_memories_goes_out_byte_for_byte(stack):
    raw = b'{"model": "gpt-4o",   "messages": [{"role": "user", "content": "hi"}], "z": 1e3, "a": {}}'
    httpx.post(stack.openai_url + "/chat/completions", content=raw,
               headers={"authorization": f"Bearer {stack.keys['alice']}", "content-type": "application/json"})
    assert stack.upstream.last["body"] == json.loads(raw)


def test_anthropic_messages_get_memory_in_top_level_system(stack):
    remember(stack, "alice")
    client = claude(stack)
    message = client.messages.create(model="claude-x", max_tokens=50, system="Be brief.",
                                     messages=[{"role": "user", "content": QUESTION}])
    assert message.content[0].text == "OK."
    sent = stack.upstream.last
    assert sent["path"] == "/v1/messages"
    assert sent["body"]["system"].startswith("Be brief.\n\n" + BLOCK_START)
    assert [m["role"] for m in sent["body"]["messages"]] == ["user"]
    assert sent["headers"]["x-api-key"] == "sk-upstream-secret"
    assert "anthropic-version" in sent["headers"]  # the SDK's protocol headers pass through

    # Prompt caching: the system prefix and its breakpoint stay byte-identical; memory goes in the last user turn.
    system = [{"type": "text", "text": "Long cached prompt.", "cache_control": {"type": "ephemeral"}}]
    turns = [{"role": "user", "content": "Earlier turn."}, {"role": "assistant", "content": "Sure."},
             {"role": "user", "content": [{"type": "text", "text": QUESTION, "cache_control": {"type": "ephemeral"}}]}]
    client.messages.create(model="claude-x", max_tokens=50, system=system, messages=turns)
    body = stack.upstream.last["body"]
    assert body["system"] == system and body["messages"][:2] == turns[:2]
    assert body["messages"][2]["content"][0]["text"].startswith(BLOCK_START)
    assert body["messages"][2]["content"][1:] == turns[2]["content"]


def test_responses_api_gets_a_developer_item_before_the_user_input(stack):
    remember(stack, "alice")
    response = oai(stack).responses.create(model="gpt-4o", instructions="Be brief.", input=QUESTION)
    assert response.output_text == "OK."
    body = stack.upstream.last["body"]
    assert body["instructions"] == "Be brief."
    assert [item["role"] for item in body["input"]] == ["developer", "user"]
    assert BLOCK_START in body["input"][0]["content"][0]["text"]
    assert body["input"][1] == {"role": "user", "content": QUESTION}


def test_provider_without_system_role_gets_memory_as_a_user_message(stack):
    remember(stack, "alice")
    completion = oai(stack).chat.completions.create(model="o1-mini", messages=[{"role": "user", "content": QUESTION}])
    assert completion.choices[0].message.content == "OK."  # the fake rejects a system role for o1 models
    assert [m["role"] for m in stack.upstream.last["body"]["messages"]] == ["user", "user"]


@pytest.mark.parametrize("model", ["glm-4", "glm-4.6", "z-ai/glm-4.5-air", "glm/glm-4-plus", "o1-2024-12-17"])
def test_a_glm_or_o1_model_gets_memory_as_a_user_message_by_its_name(stack, model):
    # No [proxy.openai] provider is configured: the model name alone must say the API rejects a system role.
    remember(stack, "alice")
    completion = oai(stack).chat.completions.create(model=model, messages=[{"role": "user", "content": QUESTION}])
    assert completion.choices[0].message.content == "OK."
    messages = stack.upstream.last["body"]["messages"]
    assert [m["role"] for m in messages] == ["user", "user"] and BLOCK_START in messages[0]["content"]


def test_a_model_of_another_family_keeps_the_system_message(stack):
    remember(stack, "alice")
    oai(stack).chat.completions.create(model="gpt-4o-glm-tuned", messages=[{"role": "user", "content": QUESTION}])
    assert [m["role"] for m in stack.upstream.last["body"]["messages"]] == ["system", "user"]


# --- streaming -------------------------------------------------------------------------------------------------

STREAMS = {
    "chat": ("/v1/chat/completions", {"model": "gpt-4o", "stream": True,
                                      "messages": [{"role": "user", "content": QUESTION}]}),
    "responses": ("/v1/responses", {"model": "gpt-4o", "stream": True, "input": QUESTION}),
    "messages": ("/v1/messages", {"model": "claude-x", "max_tokens": 50, "stream": True,
                                  "messages": [{"role": "user", "content": QUESTION}]}),
}


@pytest.mark.parametrize("api", sorted(STREAMS))
def test_stream_delivers_the_upstream_events_unchanged_and_in_order(stack, api):
    remember(stack, "alice")
    stack.upstream.reply = "Use Postgres, as you decided."
    path, body = STREAMS[api]
    direct = httpx.post(stack.upstream.base_url + path, json=body)
    with httpx.stream("POST", stack.url + path, json=body,
                      headers={"authorization": f"Bearer {stack.keys['alice']}"}) as through:
        assert through.status_code == 200
        assert through.headers["content-type"] == "text/event-stream"
        assert through.headers["x-memroute-memories"] == "1"
        received = b"".join(through.iter_bytes())
    assert received == direct.content
    assert BLOCK_START in json.dumps(stack.upstream.last["body"])


def test_openai_stream_first_event_arrives_before_the_upstream_finished(stack):
    stack.upstream.reply = "one two three"
    stack.upstream.hold()
    stream = oai(stack).chat.completions.create(model="gpt-4o", stream=True,
                                                messages=[{"role": "user", "content": "I prefer Rust. Count."}])
    first = next(iter(stream))
    assert first.choices[0].delta.role == "assistant"
    assert stack.upstream.streams_finished == 0  # the upstream is still holding the rest of the stream
    assert stack.proxy.stats.observed == 0  # nothing is learned before the turn is over
    stack.upstream.release()
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "one two three"
    wait_until(lambda: stack.proxy.stats.observed == 1)
    stack.mem.flush()
    assert contents(stack, "alice") == ["Rust"]


def test_anthropic_stream_first_event_arrives_before_the_upstream_finished(stack):
    stack.upstream.reply = "alpha beta"
    stack.upstream.hold()
    with claude(stack).messages.stream(model="claude-x", max_tokens=50,
                                       messages=[{"role": "user", "content": "hello"}]) as stream:
        events = iter(stream)
        assert next(events).type == "message_start"
        assert stack.upstream.streams_finished == 0
        stack.upstream.release()
        assert "".join(stream.text_stream) == "alpha beta"
    wait_until(lambda: stack.upstream.streams_finished == 1)


def test_streamed_assistant_text_is_learned_when_mining_the_assistant(tmp_path):
    with proxy_stack(tmp_path, extraction={"mine_assistant": True}) as stack:
        stack.upstream.reply = "I always recommend Rust."
        for api in ("chat", "responses", "messages"):
            path, body = STREAMS[api]
            with httpx.stream("POST", stack.url + path, json=body,
                              headers={"x-api-key": stack.keys["alice"]}) as response:
                response.read()
        wait_until(lambda: stack.proxy.stats.observed == 3)
        stack.mem.flush()
        assert contents(stack, "alice") == ["recommend Rust"]


def test_client_disconnect_mid_stream_closes_the_upstream_and_still_learns(stack):
    stack.upstream.reply = "a b c d"
    stack.upstream.hold()
    body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "I prefer Vim. Go."}]}
    with httpx.Client() as client, client.stream("POST", stack.openai_url + "/chat/completions", json=body,
                                                 headers={"authorization": f"Bearer {stack.keys['alice']}"}) as r:
        first = next(r.iter_bytes())
        assert first.startswith(b"data: ")
    # The client is gone while the upstream still holds the stream: memroute notices and hangs up on it.
    wait_until(lambda: stack.upstream.disconnects == 1)
    wait_until(lambda: stack.proxy.stats.client_disconnects == 1)
    assert stack.upstream.streams_finished == 0
    wait_until(lambda: stack.proxy.stats.observed == 1)
    stack.mem.flush()
    assert contents(stack, "alice") == ["Vim"]


# --- learning, tenants, headers ------------------------------------------------------------------------------

def test_learning_happens_after_the_turn_for_the_callers_tenant_only(stack):
    oai(stack, "alice").chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": PREFS}])
    claude(stack, "bob").messages.create(model="claude-x", max_tokens=20,
                                         messages=[{"role": "user", "content": "I love sushi."}])
    wait_until(lambda: stack.proxy.stats.observed == 2)
    stack.mem.flush()
    assert contents(stack, "alice") == ["Postgres for this project", "TypeScript"]
    assert contents(stack, "bob") == ["sushi"]


def test_two_keys_never_see_each_others_memories(stack):
    remember(stack, "alice", "I'll use Postgres for this project.")
    remember(stack, "bob", "I'll use MongoDB for this project.")
    for who, mine, theirs in (("alice", "Postgres", "MongoDB"), ("bob", "MongoDB", "Postgres")):
        oai(stack, who).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": QUESTION}])
        injected = json.dumps(stack.upstream.last["body"])
        assert mine in injected and theirs not in injected
        claude(stack, who).messages.create(model="claude-x", max_tokens=20,
                                           messages=[{"role": "user", "content": QUESTION}])
        injected = json.dumps(stack.upstream.last["body"])
        assert mine in injected and theirs not in injected


@pytest.mark.parametrize("header", ["x-memroute-no-memory", "x-omniroute-no-memory"])
def test_opt_out_header_means_no_injection_and_no_learning(stack, header):
    remember(stack, "alice")
    before = contents(stack, "alice")
    raw = oai(stack).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "I prefer Emacs. " + QUESTION}],
        extra_headers={header: "1"})
    assert raw.headers["x-memroute-memories"] == "0"
    assert raw.headers["x-memroute-memory-skipped"] == "opted out by header"
    assert raw.headers["x-memroute-learning"] == "off (opted out by header)"
    sent = stack.upstream.last
    assert [m["role"] for m in sent["body"]["messages"]] == ["user"] and header not in sent["headers"]
    stack.mem.flush()
    assert contents(stack, "alice") == before and stack.proxy.stats.observed == 0


@pytest.mark.parametrize("header", ["x-memroute-session-id", "x-omniroute-session-id"])
def test_session_header_names_the_session_of_learned_memories(stack, header):
    claude(stack).messages.create(model="claude-x", max_tokens=20, extra_headers={header: "chat-42"},
                                  messages=[{"role": "user", "content": "I prefer dark roast."}])
    wait_until(lambda: stack.proxy.stats.observed == 1)
    stack.mem.flush()
    [memory] = list(stack.mem.export(stack.tenants["alice"]))
    assert memory.content == "dark roast" and memory.session_id == "chat-42"
    assert header not in stack.upstream.last["headers"]


def test_read_only_key_gets_memories_but_teaches_nothing(stack):
    remember(stack, "alice")
    raw = oai(stack, "reader").chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "I prefer tabs. " + QUESTION}])
    assert raw.headers["x-memroute-memories"] == "1"
    assert raw.headers["x-memroute-learning"] == "off (key lacks the write scope)"
    stack.mem.flush()
    assert "tabs" not in contents(stack, "alice")


# --- errors ----------------------------------------------------------------------------------------------------

def test_missing_or_unknown_key_is_401_and_nothing_reaches_the_upstream(stack):
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=stack.openai_url, api_key="mr_wrong", max_retries=0).chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=stack.url, api_key="mr_wrong", max_retries=0).messages.create(
            model="claude-x", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    bare = httpx.post(stack.url + "/v1/responses", json={"model": "m", "input": "hi"})
    assert bare.status_code == 401 and "message" in bare.json()["error"]
    revoked, secret = stack.server.create_key("gone", tenant=stack.tenants["alice"])
    stack.mem.keys.revoke(revoked.id)
    assert httpx.get(stack.openai_url + "/models", headers={"authorization": f"Bearer {secret}"}).status_code == 401
    assert stack.upstream.requests == []


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b"\xff\xfe"])
def test_malformed_body_is_a_400_in_the_apis_error_format(stack, body):
    for path, style in (("/v1/chat/completions", "openai"), ("/v1/messages", "anthropic")):
        response = httpx.post(stack.url + path, content=body, headers={"x-api-key": stack.keys["alice"]})
        assert response.status_code == 400
        error = response.json()
        assert (error["type"] == "error") if style == "anthropic" else ("message" in error["error"])
        assert error["error"]["type"] == "invalid_request_error"
    assert stack.upstream.requests == []


def test_upstream_429_reaches_the_client_with_retry_after_and_body(stack):
    stack.upstream.fail_next(429, {"error": {"message": "slow down", "type": "rate_limit"}}, {"Retry-After": "7"})
    with pytest.raises(openai.RateLimitError) as caught:
        oai(stack).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "I prefer tea."}])
    assert caught.value.status_code == 429 and caught.value.response.headers["retry-after"] == "7"
    assert "slow down" in str(caught.value)
    stack.upstream.fail_next(429, {"type": "error", "error": {"type": "rate_limit_error", "message": "later"}},
                             {"Retry-After": "3"})
    with pytest.raises(anthropic.RateLimitError) as limited:
        claude(stack).messages.create(model="claude-x", max_tokens=5, stream=True,
                                      messages=[{"role": "user", "content": "hi"}])
    assert limited.value.response.headers["retry-after"] == "3" and "later" in str(limited.value)
    assert stack.proxy.stats.upstream_errors == 2
    stack.mem.flush()
    assert contents(stack, "alice") == []  # nothing is learned from a turn the upstream refused


def _timings(response):
    """``{metric: (dur, desc)}`` from a Server-Timing header (W3C syntax: ``name;dur=1.5;desc="x", …``)."""
    metrics = {}
    for entry in response.headers["server-timing"].split(","):
        name, *params = (part.strip() for part in entry.split(";"))
        values = dict(param.split("=", 1) for param in params)
        metrics[name] = (float(values["dur"]), values.get("desc", "").strip('"') or None)
    return metrics


def test_server_timing_says_what_the_memory_step_and_the_upstream_took(tmp_path):
    # The static embedding: only a hybrid retrieval (not one degraded to keyword) is reused for a repeat.
    with proxy_stack(tmp_path, embedding="static") as stack:
        _server_timing_of_each_case(stack)


def _server_timing_of_each_case(stack):
    remember(stack, "alice")
    stack.mem.flush()
    # Alice's read-only key: no turn is learned, so nothing moves her data between the first request and the repeat.
    auth = {"authorization": f"Bearer {stack.keys['reader']}"}
    request = {"model": "gpt-4o", "messages": [{"role": "user", "content": QUESTION}]}
    first = httpx.post(stack.openai_url + "/chat/completions", json=request, headers=auth)
    again = httpx.post(stack.openai_url + "/chat/completions", json=request, headers=auth)
    opted = httpx.post(stack.openai_url + "/chat/completions", json=request,
                       headers={**auth, "x-memroute-no-memory": "1"})
    # the same memories, searched then reused (at the default floor "TypeScript" joins the Postgres decision)
    assert first.headers["x-memroute-memories"] == again.headers["x-memroute-memories"] != "0"
    seen = [_timings(response) for response in (first, again, opted)]
    assert [metrics["memroute-memory"][1] for metrics in seen] == ["search", "reused", "none"]
    for metrics in seen:
        assert list(metrics) == ["memroute-memory", "memroute-upstream"]
        assert all(duration >= 0 for duration, _ in metrics.values())
    with httpx.stream("POST", stack.url + "/v1/messages", headers={"x-api-key": stack.keys["bob"]},
                      json={**STREAMS["messages"][1], "messages": [{"role": "user", "content": QUESTION}]}) as streamed:
        assert streamed.status_code == 200
        streamed.read()
    # Bob has no memories: his search ran and found none.
    assert _timings(streamed)["memroute-memory"][1] == "search" and streamed.headers["x-memroute-memories"] == "0"


def test_server_timing_follows_the_upstreams_own_and_errors_carry_it(stack):
    stack.upstream.fail_next(500, {"error": {"message": "model exploded"}}, {"Server-Timing": 'gpu;dur=812.5;desc="x"'})
    response = httpx.post(stack.openai_url + "/chat/completions", json=STREAMS["chat"][1],
                          headers={"authorization": f"Bearer {stack.keys['alice']}"})
    assert response.status_code == 500
    assert response.headers["server-timing"].startswith('gpu;dur=812.5;desc="x", memroute-memory;dur=')
    assert list(_timings(response)) == ["gpu", "memroute-memory", "memroute-upstream"]


def test_server_timing_can_be_turned_off(tmp_path):
    with proxy_stack(tmp_path, proxy={"server_timing": False}) as stack:
        response = httpx.post(stack.openai_url + "/chat/completions", json=STREAMS["chat"][1],
                              headers={"authorization": f"Bearer {stack.keys['alice']}"})
        assert response.status_code == 200 and "server-timing" not in response.headers


def test_upstream_500_reaches_the_client_with_its_body(stack):
    stack.upstream.fail_next(500, {"error": {"message": "model exploded"}})
    response = httpx.post(stack.openai_url + "/chat/completions", json=STREAMS["chat"][1],
                          headers={"authorization": f"Bearer {stack.keys['alice']}"})
    assert response.status_code == 500 and response.json() == {"error": {"message": "model exploded"}}


def test_upstream_timeout_is_a_504(tmp_path):
    with proxy_stack(tmp_path, upstream_options={"timeout": 0.3}) as stack:
        stack.upstream.delay = 1.0
        with pytest.raises(openai.APIStatusError) as caught:
            oai(stack).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        assert caught.value.status_code == 504 and "timeout" in str(caught.value)
        response = httpx.post(stack.url + "/v1/messages", json=STREAMS["messages"][1],
                              headers={"x-api-key": stack.keys["alice"]})
        assert response.status_code == 504 and response.json()["error"]["type"] == "timeout_error"
        assert stack.proxy.stats.upstream_timeouts == 2


def test_unreachable_or_unconfigured_upstream(tmp_path):
    with proxy_stack(tmp_path, proxy={"openai": {"base_url": "http://127.0.0.1:9/v1"}}) as stack:
        response = httpx.post(stack.openai_url + "/chat/completions", json=STREAMS["chat"][1],
                              headers={"authorization": f"Bearer {stack.keys['alice']}"})
        assert response.status_code == 502 and "could not be reached" in response.json()["error"]["message"]
    with proxy_stack(tmp_path / "b", proxy={"anthropic": {"base_url": None}}) as stack:
        response = httpx.post(stack.url + "/v1/messages", json=STREAMS["messages"][1],
                              headers={"x-api-key": stack.keys["alice"]})
        assert response.status_code == 503 and "[proxy.anthropic] base_url" in response.json()["error"]["message"]


def test_loopback_upstream_needs_allow_private(tmp_path):
    with proxy_stack(tmp_path, upstream_options={"allow_private": False}) as stack:
        response = httpx.post(stack.openai_url + "/chat/completions", json=STREAMS["chat"][1],
                              headers={"authorization": f"Bearer {stack.keys['alice']}"})
        assert response.status_code == 502
        assert "allow_private" in response.json()["error"]["message"]
        assert stack.upstream.requests == []


def test_memory_failure_does_not_break_the_request(tmp_path):
    faults = FaultySqlitePlugin()
    get_plugin_manager().add_plugin(faults, name="faulty-sqlite-test")  # the server's plugins (reset after the test)
    backends = {"primary": "main", "main": {"type": "faulty-sqlite"}}
    with proxy_stack(tmp_path, backends=backends) as stack:
        remember(stack, "alice")
        faults.instances["main"].fail()  # the database is down: retrieval and storage raise
        messages = [{"role": "user", "content": "I prefer Zig. " + QUESTION}]
        raw = oai(stack).chat.completions.with_raw_response.create(model="gpt-4o", messages=messages)
        assert raw.parse().choices[0].message.content == "OK."
        assert raw.headers["x-memroute-memories"] == "0"
        assert raw.headers["x-memroute-memory-skipped"] == "retrieval failed"
        assert _timings(raw)["memroute-memory"][1] == "failed"
        assert stack.upstream.last["body"]["messages"] == messages  # the request went out as it came
        with httpx.stream("POST", stack.url + "/v1/messages", json=STREAMS["messages"][1],
                          headers={"x-api-key": stack.keys["alice"]}) as streamed:
            assert streamed.status_code == 200 and b"message_stop" in streamed.read()
        assert stack.proxy.stats.memory_failures == 2
        faults.instances["main"].recover()


# --- models ----------------------------------------------------------------------------------------------------

def test_models_are_passed_through_for_both_sdks(stack):
    assert [m.id for m in oai(stack).models.list()] == ["fake-model"]
    assert oai(stack).models.retrieve("fake-model").id == "fake-model"
    assert [m.id for m in claude(stack).models.list()] == ["claude-fake"]
    assert stack.upstream.last["headers"]["x-api-key"] == "sk-upstream-secret"


# --- the server around it ----------------------------------------------------------------------------------------

def test_proxy_status_is_for_admins_and_never_shows_the_upstream_key(stack):
    oai(stack).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    status = httpx.get(stack.url + "/api/proxy/status", headers={"authorization": f"Bearer {stack.keys['admin']}"})
    assert status.status_code == 200
    body = status.json()
    assert body["counters"]["requests"] == 1 and body["upstreams"]["openai"]["credential"] is True
    assert "sk-upstream-secret" not in status.text
    tenant = httpx.get(stack.url + "/api/proxy/status", headers={"authorization": f"Bearer {stack.keys['alice']}"})
    assert tenant.status_code == 403


def test_a_key_without_the_read_scope_is_refused(stack):
    _key, writer = stack.server.create_key("writer", scopes="write", tenant=stack.tenants["alice"])
    response = httpx.post(stack.openai_url + "/chat/completions", json=STREAMS["chat"][1],
                          headers={"authorization": f"Bearer {writer}"})
    assert response.status_code == 403 and stack.upstream.requests == []


def test_large_chat_bodies_pass_up_to_the_proxy_limit(tmp_path):
    with proxy_stack(tmp_path, proxy={"max_body_bytes": 3_000_000}) as stack:
        image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 2_000_000}}
        messages = [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, image]}]
        oai(stack).chat.completions.create(model="gpt-4o", messages=messages)  # over the REST API's 1 MiB
        assert stack.upstream.last["body"]["messages"] == messages
        messages[0]["content"][1]["image_url"]["url"] += "A" * 1_000_000
        with pytest.raises(openai.APIStatusError) as caught:
            oai(stack).chat.completions.create(model="gpt-4o", messages=messages)
        assert caught.value.status_code == 413


def test_a_hung_memory_store_delays_the_request_only_up_to_memory_timeout(tmp_path):
    faults = FaultySqlitePlugin()
    get_plugin_manager().add_plugin(faults, name="faulty-sqlite-test")
    backends = {"primary": "main", "main": {"type": "faulty-sqlite"}}
    with proxy_stack(tmp_path, backends=backends, proxy={"memory_timeout_s": 0.3}) as stack:
        remember(stack, "alice")
        faults.instances["main"].hang("search")  # retrieval blocks until released
        try:
            started = time.monotonic()
            raw = oai(stack).chat.completions.with_raw_response.create(
                model="gpt-4o", messages=[{"role": "user", "content": QUESTION}])
            assert time.monotonic() - started < 5  # not the manager's 30 s operation timeout
            assert raw.parse().choices[0].message.content == "OK."
            assert raw.headers["x-memroute-memory-skipped"] == "memory timed out"
            assert stack.upstream.last["body"]["messages"] == [{"role": "user", "content": QUESTION}]
            assert stack.proxy.stats.memory_failures == 1
        finally:
            faults.instances["main"].recover()
