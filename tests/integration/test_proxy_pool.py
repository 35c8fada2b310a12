"""The proxy's per-upstream connection cap (``[proxy.*] max_connections``) end to end: the real ``openai`` and
``anthropic`` SDKs and raw httpx against memroute on a loopback socket, in front of the fake model server
(``tests/servers/fake_llm.py``). With the cap at 1 and a held stream on the one connection, another request waits
and goes through once the stream ends; past ``connect_timeout`` it is a 504 in the caller's API format; a client
that leaves mid-stream or an upstream that stops mid-stream frees the connection, so the next request does not
wait. The pool's state comes from ``GET /api/proxy/status``."""

from __future__ import annotations

import threading
import time

import anthropic
import httpx
import openai
import pytest

from tests.servers.proxy_stack import proxy_stack

CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
MESSAGE = {"model": "claude-x", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}


def wait_until(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def chat(stack):
    with openai.OpenAI(base_url=stack.openai_url, api_key=stack.keys["alice"], max_retries=0) as client:
        return client.chat.completions.create(**CHAT)


def message(stack):
    with anthropic.Anthropic(base_url=stack.url, api_key=stack.keys["alice"], max_retries=0) as client:
        return client.messages.create(**MESSAGE)


def connections(stack, upstream="openai"):
    status = httpx.get(stack.url + "/api/proxy/status", headers={"authorization": f"Bearer {stack.keys['admin']}"})
    assert status.status_code == 200, status.text
    return status.json()["upstreams"][upstream]["connections"]


def open_stream(client, stack, path="/chat/completions", body=None):
    """A streamed chat request whose first event has arrived; the upstream holds the rest (``upstream.hold()``)."""
    body = {**(body or CHAT), "stream": True}
    stream = client.stream("POST", stack.openai_url + path, json=body,
                           headers={"authorization": f"Bearer {stack.keys['alice']}",
                                    "x-api-key": stack.keys["alice"], "anthropic-version": "2023-06-01"})
    response = stream.__enter__()
    assert response.status_code == 200
    chunks = response.iter_bytes()
    assert next(chunks)
    return stream, response, chunks


def test_at_the_cap_a_request_waits_for_the_held_connection_and_then_goes_through(tmp_path):
    with proxy_stack(tmp_path, upstream_options={"max_connections": 1, "connect_timeout": 30}) as stack:
        stack.upstream.hold()
        with httpx.Client() as client:
            stream, _response, chunks = open_stream(client, stack)
            answers = []
            waiting = threading.Thread(target=lambda: answers.append(chat(stack)))
            waiting.start()
            wait_until(lambda: connections(stack)["waiting"] == 1)
            assert answers == [] and connections(stack)["open"] == 1
            stack.upstream.release()
            assert b"[DONE]" in b"".join(chunks)
            stream.__exit__(None, None, None)
            waiting.join(10)
        assert answers[0].choices[0].message.content == "OK."
        state = connections(stack)
        assert state["open"] == 1 and state["waited"] == 1 and state["max"] == 1


def test_past_connect_timeout_at_the_cap_it_is_a_504_in_each_apis_format(tmp_path):
    with proxy_stack(tmp_path, upstream_options={"max_connections": 1, "connect_timeout": 0.3}) as stack:
        stack.upstream.hold()
        with httpx.Client() as client:
            held = [open_stream(client, stack),
                    open_stream(client, stack, "/messages", MESSAGE)]  # each upstream table has its own cap
            with pytest.raises(openai.InternalServerError) as raised:
                chat(stack)
            assert raised.value.status_code == 504
            error = raised.value.body
            assert error["type"] == "timeout_error" and "[proxy.openai] max_connections = 1" in error["message"]
            with pytest.raises(anthropic.InternalServerError) as caught:
                message(stack)
            assert caught.value.status_code == 504
            assert caught.value.body["error"]["type"] == "timeout_error"
            assert "[proxy.anthropic] max_connections = 1" in caught.value.body["error"]["message"]
            stack.upstream.release()
            for stream, _response, chunks in held:
                b"".join(chunks)
                stream.__exit__(None, None, None)
        assert stack.proxy.stats.pool_timeouts == 2 and stack.proxy.stats.upstream_timeouts == 0
        # the connections are back: the next requests go straight through
        reply = chat(stack)
        assert reply.choices[0].message.content == "OK."
        assert connections(stack)["waited"] == 1


def test_clients_that_leave_mid_stream_free_the_connection(tmp_path):
    with proxy_stack(tmp_path, upstream_options={"max_connections": 1, "connect_timeout": 30}) as stack:
        stack.upstream.hold()
        for left in range(1, 4):  # more than the cap: a lost connection would make the next one wait forever
            with httpx.Client() as client:
                stream, _response, _chunks = open_stream(client, stack)
                stream.__exit__(None, None, None)  # the client hangs up mid-stream
            wait_until(lambda left=left: stack.upstream.disconnects == left)
            wait_until(lambda: connections(stack)["open"] == 0)
        stack.upstream.release()
        reply = chat(stack)
        assert reply.choices[0].message.content == "OK."
        assert connections(stack)["waited"] == 0 and stack.proxy.stats.client_disconnects == 3


def test_an_upstream_that_stops_mid_stream_frees_the_connection(tmp_path):
    with proxy_stack(tmp_path, upstream_options={"max_connections": 1, "timeout": 0.3}) as stack:
        stack.upstream.hold()
        for _ in range(2):
            with httpx.Client() as client:
                stream, _response, chunks = open_stream(client, stack)
                assert b'"type": "timeout_error"' in b"".join(chunks)  # the error event, then the end
                stream.__exit__(None, None, None)
        stack.upstream.release()
        reply = chat(stack)
        assert reply.choices[0].message.content == "OK."
        assert connections(stack)["waited"] == 0 and stack.proxy.stats.stream_failures == 2
