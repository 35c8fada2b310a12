"""End users under one app key through the memory proxy (issue 30), with the real ``openai`` and ``anthropic`` SDKs
against the fake model server: the end user comes from ``x-memroute-user``, OpenAI's ``user`` /
``metadata.user_id`` or Anthropic's ``metadata.user_id``; each end user gets only its own memories injected and
learns into its own tenant; two apps with the same end user ids never meet."""

from __future__ import annotations

import time

import anthropic
import openai
import pytest

from memroute import end_user_tenant
from tests.servers.proxy_stack import proxy_stack

FACTS = {("shop", "u1"): "I'll use Postgres for this project.", ("shop", "u2"): "I'll use MySQL for this project.",
         ("cafe", "u1"): "I'll use SQLite for this project.", ("cafe", "u2"): "I'll use Oracle for this project."}
DATABASES = ("Postgres", "MySQL", "SQLite", "Oracle")
QUESTION = "Which database for this project?"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with proxy_stack(tmp_path_factory.mktemp("proxy-end-users")) as running:
        for app in ("shop", "cafe"):
            _key, running.keys[app] = running.server.create_key(app, tenant=app, end_users=True)
        for (app, user), fact in FACTS.items():
            running.mem.observe({"messages": [{"role": "user", "content": fact}]},
                                api_key_id=end_user_tenant(app, user), wait=True)
        yield running


def injected(stack) -> set[str]:
    """The databases named in the memory block of the last request the upstream received."""
    text = str(stack.upstream.last["body"])
    return {name for name in DATABASES if name in text}


def oai(stack, who: str, **kwargs) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.openai_url, api_key=stack.keys[who], max_retries=0, **kwargs)


def test_openai_user_field_metadata_and_header_each_pick_the_end_user(stack):
    ask = [{"role": "user", "content": QUESTION}]
    oai(stack, "shop").chat.completions.create(model="gpt-4o", messages=ask, user="u1")
    assert injected(stack) == {"Postgres"}
    assert stack.upstream.last["body"]["user"] == "u1"  # the field itself reaches the upstream unchanged
    oai(stack, "shop").chat.completions.create(model="gpt-4o", messages=ask, metadata={"user_id": "u2"})
    assert injected(stack) == {"MySQL"}
    oai(stack, "cafe", default_headers={"x-memroute-user": "u1"}).chat.completions.create(model="gpt-4o", messages=ask)
    assert injected(stack) == {"SQLite"}
    assert "x-memroute-user" not in {k.lower() for k in stack.upstream.last["headers"]}
    # the header wins over the body's field
    oai(stack, "cafe", default_headers={"x-memroute-user": "u2"}).chat.completions.create(
        model="gpt-4o", messages=ask, user="u1")
    assert injected(stack) == {"Oracle"}


def test_anthropic_metadata_user_id_picks_the_end_user(stack):
    client = anthropic.Anthropic(base_url=stack.url, api_key=stack.keys["cafe"], max_retries=0)
    client.messages.create(model="claude-3-5-haiku-latest", max_tokens=64, metadata={"user_id": "u2"},
                           messages=[{"role": "user", "content": QUESTION}])
    assert injected(stack) == {"Oracle"}


def test_an_app_key_without_an_end_user_or_with_a_bad_one_is_refused(stack):
    before = len(stack.upstream.requests)
    with pytest.raises(openai.UnprocessableEntityError, match="app key"):
        oai(stack, "shop").chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.UnprocessableEntityError, match="user"):
        oai(stack, "shop").chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                                   user="not/allowed")
    with pytest.raises(anthropic.UnprocessableEntityError, match="app key"):
        anthropic.Anthropic(base_url=stack.url, api_key=stack.keys["shop"], max_retries=0).messages.create(
            model="claude-3-5-haiku-latest", max_tokens=64, messages=[{"role": "user", "content": "hi"}])
    assert len(stack.upstream.requests) == before  # nothing went upstream


def test_a_plain_key_keeps_the_user_field_as_openai_means_it_and_cannot_use_the_header(stack):
    oai(stack, "alice").chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": QUESTION}],
                                                user="u1")
    assert injected(stack) == set()  # tenant-a's own memories (none), never shop/u1's
    with pytest.raises(openai.PermissionDeniedError, match="not an app key"):
        oai(stack, "alice", default_headers={"x-memroute-user": "u1"}).chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": QUESTION}])


def test_each_end_user_learns_into_its_own_tenant(stack):
    oai(stack, "shop").chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "I love sushi."}], user="u2")
    deadline = time.monotonic() + 10
    while not any("sushi" in m.content for m in stack.mem.export("shop/u2")):
        assert time.monotonic() < deadline, "the turn was not learned"
        time.sleep(0.02)
    stack.mem.flush(timeout=10)
    for owner in ("shop/u1", "cafe/u2", "cafe/u1", "shop", "tenant-a"):
        assert not any("sushi" in m.content for m in stack.mem.export(owner))
