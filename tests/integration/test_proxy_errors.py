"""Errors on the proxy's routes come in the format of the API the caller speaks, so the real ``openai`` and
``anthropic`` SDKs raise their typed errors with memroute's message: Anthropic's ``{"type": "error", "error":
{"type", "message"}}`` on ``/v1/messages``, OpenAI's ``{"error": {"message", "type", "param", "code"}}`` on the
OpenAI routes; memroute's own routes keep memroute's shape. The real server on a loopback socket in front of the
fake model server (``tests/servers/fake_llm.py``); nothing reaches the upstream."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.servers.proxy_stack import proxy_stack

CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
MESSAGE = {"model": "claude-x", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with proxy_stack(tmp_path_factory.mktemp("proxy-errors"), proxy={"max_body_bytes": 20_000}) as running:
        _key, writer = running.server.create_key("writer", scopes="write", tenant=running.tenants["alice"])
        revoked, secret = running.server.create_key("gone", tenant=running.tenants["alice"])
        running.mem.keys.revoke(revoked.id)
        running.keys.update(writer=writer, revoked=secret)
        yield running
        assert running.upstream.requests == []  # no error here ever reached the model


def oai(stack, key):
    return openai.OpenAI(base_url=stack.openai_url, api_key=key, max_retries=0)


def claude(stack, key):
    return anthropic.Anthropic(base_url=stack.url, api_key=key, max_retries=0)


def anthropic_error(body, kind):
    assert set(body) == {"type", "error"} and body["type"] == "error", body
    assert set(body["error"]) == {"type", "message"} and body["error"]["type"] == kind, body
    return body["error"]["message"]


def openai_error(error, code, param=None):
    """``error``: the object under ``"error"`` (what the OpenAI SDK keeps as ``exc.body``)."""
    assert set(error) == {"message", "type", "param", "code"}, error
    assert error["type"] == "invalid_request_error" and error["code"] == code and error["param"] == param, error
    return error["message"]


@pytest.mark.parametrize("who", ["wrong", "revoked"])
def test_a_bad_or_revoked_key_is_each_sdks_authentication_error(stack, who):
    key = stack.keys.get(who, "mr_wrong")
    with pytest.raises(anthropic.AuthenticationError) as caught:
        claude(stack, key).messages.create(**MESSAGE)
    message = anthropic_error(caught.value.body, "authentication_error")
    assert ("revoked" in message) == (who == "revoked")
    with pytest.raises(openai.AuthenticationError) as raised:
        oai(stack, key).chat.completions.create(**CHAT)
    assert raised.value.code == "invalid_api_key" and raised.value.type == "invalid_request_error"
    openai_error(raised.value.body, "invalid_api_key")
    with pytest.raises(openai.AuthenticationError):
        oai(stack, key).responses.create(model="gpt-4o", input="hi")


def test_a_missing_key_is_a_401_in_each_apis_shape(stack):
    anthropic_response = httpx.post(stack.url + "/v1/messages", json=MESSAGE, headers=ANTHROPIC_HEADERS)
    assert anthropic_response.status_code == 401 and "missing API key" in anthropic_error(
        anthropic_response.json(), "authentication_error")
    for path in ("/v1/chat/completions", "/v1/responses"):
        response = httpx.post(stack.url + path, json=CHAT)
        assert response.status_code == 401 and response.headers["www-authenticate"].startswith("Bearer")
        assert "missing API key" in openai_error(response.json()["error"], "invalid_api_key")


def test_models_errors_follow_the_callers_api(stack):
    with pytest.raises(anthropic.AuthenticationError) as caught:
        claude(stack, "mr_wrong").models.list()
    anthropic_error(caught.value.body, "authentication_error")
    with pytest.raises(openai.AuthenticationError) as raised:
        oai(stack, "mr_wrong").models.list()
    openai_error(raised.value.body, "invalid_api_key")


def test_a_key_without_the_read_scope_is_each_sdks_permission_error(stack):
    with pytest.raises(anthropic.PermissionDeniedError) as caught:
        claude(stack, stack.keys["writer"]).messages.create(**MESSAGE)
    assert "'read' scope" in anthropic_error(caught.value.body, "permission_error")
    with pytest.raises(openai.PermissionDeniedError) as raised:
        oai(stack, stack.keys["writer"]).chat.completions.create(**CHAT)
    assert "'read' scope" in openai_error(raised.value.body, "insufficient_permissions")


def test_a_body_over_the_proxy_limit_is_a_413_in_each_apis_shape(stack):
    big = [{"role": "user", "content": "x" * 30_000}]
    with pytest.raises(anthropic.RequestTooLargeError) as caught:
        claude(stack, stack.keys["alice"]).messages.create(model="claude-x", max_tokens=5, messages=big)
    assert "larger than 20000 bytes" in anthropic_error(caught.value.body, "request_too_large")
    with pytest.raises(openai.APIStatusError) as raised:
        oai(stack, stack.keys["alice"]).chat.completions.create(model="gpt-4o", messages=big)
    assert raised.value.status_code == 413
    openai_error(raised.value.body, "request_too_large")

    def chunks():  # no content-length: the limit trips while the body is read
        yield b'{"model": "m", "messages": [{"role": "user", "content": "'
        for _ in range(30):
            yield b"x" * 1000
        yield b'"}]}'

    streamed = httpx.post(stack.url + "/v1/messages", content=chunks(),
                          headers={"x-api-key": stack.keys["alice"], **ANTHROPIC_HEADERS})
    assert streamed.status_code == 413
    anthropic_error(streamed.json(), "request_too_large")


def test_an_invalid_session_header_is_a_422_naming_the_header(stack):
    header = {"x-memroute-session-id": "s" * 300}
    with pytest.raises(anthropic.UnprocessableEntityError) as caught:
        claude(stack, stack.keys["alice"]).messages.create(**MESSAGE, extra_headers=header)
    assert "x-memroute-session-id" in anthropic_error(caught.value.body, "invalid_request_error")
    with pytest.raises(openai.UnprocessableEntityError) as raised:
        oai(stack, stack.keys["alice"]).chat.completions.create(**CHAT, extra_headers=header)
    assert "256" in openai_error(raised.value.body, "invalid_value", param="x-memroute-session-id")


def test_unknown_proxy_routes_and_methods_answer_in_the_apis_shape(stack):
    auth = {"authorization": f"Bearer {stack.keys['alice']}"}
    missing = httpx.post(stack.openai_url + "/embeddings", json={"model": "m", "input": "x"}, headers=auth)
    assert missing.status_code == 404
    openai_error(missing.json()["error"], "not_found")
    wrong_method = httpx.get(stack.url + "/v1/messages", headers={"x-api-key": stack.keys["alice"]})
    assert wrong_method.status_code == 405
    anthropic_error(wrong_method.json(), "invalid_request_error")


def test_memroutes_own_routes_keep_memroutes_error_shape(stack):
    response = httpx.get(stack.url + "/api/memory", headers={"authorization": "Bearer mr_wrong"})
    assert response.status_code == 401
    assert response.json() == {"error": {"message": "invalid API key", "details": []}}
