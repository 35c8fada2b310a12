"""Through the memory proxy (the real ``openai`` SDK, loopback sockets, the fake model server): a message that
names a time gets the memories said then first, relative to its ``x-memroute-message-time``; two tenants."""

from __future__ import annotations

import openai
import pytest

from tests.servers.proxy_stack import proxy_stack


@pytest.fixture
def stack(tmp_path):
    with proxy_stack(tmp_path) as running:
        yield running


def block_lines(stack) -> list[str]:
    block = stack.upstream.last["body"]["messages"][0]["content"]
    return [line for line in block.splitlines() if line.startswith("- ")]


def test_the_message_time_says_which_day_yesterday_is_and_each_tenant_gets_its_own(stack):
    for who in ("alice", "bob"):
        for said, text in (("2026-03-11T09:00:00Z", "The trip to Vienna is booked"),
                           ("2026-02-02T09:00:00Z", "The trip to Rome was lovely")):
            stack.mem.add(api_key_id=stack.tenants[who], content=f"{text} ({who})", type="episodic",
                          metadata={"said_at": said})
    stack.mem.flush()
    question = [{"role": "user", "content": "What did I say yesterday about the trip?"}]
    for who in ("alice", "bob"):
        client = openai.OpenAI(base_url=stack.openai_url, api_key=stack.keys[who], max_retries=0)
        for sent, first in (("2026-03-12T10:00:00Z", "Vienna"), ("2026-02-03T10:00:00Z", "Rome")):
            client.chat.completions.create(model="gpt-4o", messages=question,
                                           extra_headers={"x-memroute-message-time": sent})
            lines = block_lines(stack)
            assert first in lines[0] and f"({who})" in lines[0], (who, sent, lines)
            assert all(f"({who})" in line for line in lines)
