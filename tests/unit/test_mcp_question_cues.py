"""MCP's memory_search answers "when did I …" with the time each memory was said (``said_at``), and prefers what
the named person said; two tenants through the SDK's in-process client (memory streams, no socket)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from mcp import Client

import memroute
from memroute.server.mcp import build_mcp_server
from memroute.server.mcp.tools import Caller

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def mem(tmp_path) -> Iterator[memroute.Memroute]:
    with memroute.open(data_dir=str(tmp_path / "data"), embedding={"source": "none"},
                       vectors={"store": "none"}) as service:
        service.add(api_key_id="alice", content="I started learning Japanese with a tutor", type="episodic",
                    metadata={"said_at": "2025-06-01T10:00:00Z", "speaker": None})
        service.add(api_key_id="alice", content="The move is stressful, so many boxes", type="episodic",
                    metadata={"said_at": "2026-03-05T10:00:00Z", "speaker": "Maria"})
        service.add(api_key_id="alice", content="The move to the new flat is done", type="episodic",
                    metadata={"said_at": "2026-01-20T10:00:00Z", "speaker": "Tom"})
        service.add(api_key_id="alice", content="Japanese grammar notes, no time recorded")
        service.add(api_key_id="bob", content="I started learning Japanese at school", type="episodic",
                    metadata={"said_at": "2010-09-01T08:00:00Z"})
        yield service


def _client(mem: memroute.Memroute, tenant: str) -> Client:
    return Client(build_mcp_server(mem, lambda: Caller(tenant=tenant, scopes=frozenset({"read", "write"}))))


async def test_memory_search_shows_when_each_memory_was_said_and_stays_in_its_tenant(mem):
    async with _client(mem, "alice") as alice, _client(mem, "bob") as bob:
        found = await alice.call_tool("memory_search", {"query": "when did I start learning Japanese"})
        assert not found.is_error
        memories = found.structured_content["memories"]
        said = {m["content"]: m["said_at"] for m in memories}
        assert said["I started learning Japanese with a tutor"].startswith("2025-06-01T10:00:00")
        notes = await alice.call_tool("memory_search", {"query": "Japanese grammar notes"})
        assert notes.structured_content["memories"][0]["said_at"] is None  # a memory that records no time
        assert "I started learning Japanese at school" not in said
        text = " ".join(block.text for block in found.content if block.type == "text")
        assert "2025-06-01T10:00:00" in text  # the text a model reads has it too
        moved = await alice.call_tool("memory_search", {"query": "what did Maria say about the move"})
        assert moved.structured_content["memories"][0]["content"] == "The move is stressful, so many boxes"
        theirs = await bob.call_tool("memory_search", {"query": "when did I start learning Japanese"})
        assert [m["content"] for m in theirs.structured_content["memories"]] == [
            "I started learning Japanese at school"]
        assert theirs.structured_content["memories"][0]["said_at"].startswith("2010-09-01")
