"""What the memory proxy learns with the default learning (the ``everyday`` extractor, salient messages kept):
the real ``openai`` and ``anthropic`` SDKs talk to memroute's proxy over a loopback socket, which forwards to the
fake model server; two tenants, the message-time header, and a malformed header refused before anything goes
out."""

from __future__ import annotations

import time

import anthropic
import openai
import pytest

from tests.servers.proxy_stack import proxy_stack

LEARNING = {"extractors": ["everyday"], "keep_turns": "salient"}


def wait_until(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


@pytest.fixture
def stack(tmp_path):
    with proxy_stack(tmp_path, extraction=LEARNING) as running:
        yield running


def memories(stack, who):
    stack.mem.flush()
    return {m.key: m for m in stack.mem.export(stack.tenants[who])}


def test_each_tenant_learns_its_own_messages_facts_and_times(stack):
    alice = openai.OpenAI(base_url=stack.openai_url, api_key=stack.keys["alice"], max_retries=0)
    bob = anthropic.Anthropic(base_url=stack.url, api_key=stack.keys["bob"], max_retries=0)
    alice.chat.completions.create(
        model="gpt-4o", extra_headers={"x-memroute-message-time": "2026-02-14T20:00:00+01:00"},
        messages=[{"role": "user", "name": "ana", "content": "I'm allergic to peanuts and my wife is called Maria."}])
    alice.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Thanks!"}])
    bob.messages.create(model="claude-x", max_tokens=20,
                        messages=[{"role": "user", "content": "We moved to Berlin last year."}])
    wait_until(lambda: stack.proxy.stats.observed == 3)

    mine = memories(stack, "alice")
    assert {k for k in mine if not k.startswith("turn:")} == {"diet:allergy:peanuts", "family:wife"}
    [turn] = [m for k, m in mine.items() if k.startswith("turn:")]  # "Thanks!" was not kept
    assert turn.content == "I'm allergic to peanuts and my wife is called Maria."
    assert turn.metadata["speaker"] == "ana"
    assert {m.metadata["said_at"] for m in mine.values()} == {"2026-02-14T19:00:00+00:00"}
    assert "x-memroute-message-time" not in stack.upstream.last["headers"]

    theirs = memories(stack, "bob")
    assert theirs["profile:location"].content == "Moved to Berlin last year"
    assert len(theirs) == 2 and not set(theirs) & {"diet:allergy:peanuts", "family:wife"}

    # The next request of each tenant gets its own memories, with the time they were said.
    alice.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Are peanuts ok for me?"}])
    block = stack.upstream.last["body"]["messages"][0]["content"]
    assert "Is allergic to peanuts" in block and "(said 2026-02-14)" in block and "Berlin" not in block


@pytest.mark.parametrize("value", ["yesterday", "2026-02-14T20:00:00", "3026-01-01T00:00:00Z"])
def test_a_malformed_message_time_is_a_422_before_anything_goes_out(stack, value):
    client = openai.OpenAI(base_url=stack.openai_url, api_key=stack.keys["alice"], max_retries=0)
    sent_before = len(stack.upstream.requests)
    with pytest.raises(openai.UnprocessableEntityError) as info:
        client.chat.completions.create(model="gpt-4o", extra_headers={"x-memroute-message-time": value},
                                       messages=[{"role": "user", "content": "I live in Lisbon"}])
    assert "x-memroute-message-time" in str(info.value)
    sent_after = len(stack.upstream.requests)
    assert sent_after == sent_before
    assert memories(stack, "alice") == {}
