"""The reference's MCP tools (``omniroute_memory_search/add/clear``) through the real MCP SDK client, over stdio
(``memroute mcp`` as a subprocess) and streamable HTTP (the real ``memroute serve``): the reference's argument
names and result envelope, the tenant from the key whatever ``apiKeyId`` says, and ``[mcp] omniroute_tools``."""

from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

import memroute
from tests.integration.test_mcp_http import call, call_error, mcp_client
from tests.servers.memroute_server import write_toml

pytestmark = pytest.mark.anyio
ALIASES = {"omniroute_memory_search", "omniroute_memory_add", "omniroute_memory_clear"}
KEYWORD_ONLY = {"embedding": {"source": "none"}, "vectors": {"store": "none"}}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _stdio(data_dir: Path, *args: str) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMROUTE_", "MEMORY_"))}
    env.update(MEMROUTE_DATA_DIR=str(data_dir), MEMORY_EMBEDDING_SOURCE="none", MEMORY_VECTOR_STORE="none")
    return StdioServerParameters(command=sys.executable, args=["-m", "memroute.cli", *args], env=env)


async def test_an_agent_written_for_the_reference_works_over_stdio(tmp_path):
    data_dir = tmp_path / "data"
    with memroute.open(KEYWORD_ONLY, use_env=False, data_dir=str(data_dir)) as mem:
        for i in range(60):  # more than the reference's clear could delete in one call (its page of 50)
            mem.add(api_key_id="alice", content=f"Old note number {i} about gardening", key=f"note:{i}")
    async with Client(_stdio(data_dir, "mcp", "--tenant", "alice")) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) >= ALIASES
        assert {"apiKeyId", "query", "type", "maxTokens", "limit"} == set(
            tools["omniroute_memory_search"].input_schema["properties"])
        assert {"apiKeyId", "type", "olderThan"} == set(tools["omniroute_memory_clear"].input_schema["properties"])

        added = await call(client, "omniroute_memory_add", apiKeyId="alice", sessionId="s-1", type="factual",
                           key="preference:coffee", content="Prefers dark roast coffee", metadata={"source": "agent"})
        assert added["success"] is True and added["data"]["message"] == "Memory created successfully"
        memory = added["data"]["memory"]
        assert (memory["apiKeyId"], memory["sessionId"], memory["metadata"]) == ("alice", "s-1", {"source": "agent"})
        assert {"createdAt", "updatedAt", "expiresAt", "accessCount"} <= set(memory)

        found = await call(client, "omniroute_memory_search", query="dark roast coffee", maxTokens=500, limit=5)
        assert found["success"] is True and found["data"]["count"] == 1
        assert found["data"]["memories"][0]["id"] == memory["id"]
        assert found["data"]["totalTokens"] == (len("Prefers dark roast coffee") + 3) // 4

        refused = await call_error(client, "omniroute_memory_search", apiKeyId="bob", query="coffee")
        assert "another tenant" in refused
        assert "maxTokens" in await call_error(client, "omniroute_memory_search", query="x", maxTokens=9000)
        assert "olderThan" in await call_error(client, "omniroute_memory_clear", olderThan="last tuesday")
        assert "key" in await call_error(client, "omniroute_memory_add", type="factual", key="", content="x")

        past = (datetime.now(timezone.utc) - timedelta(days=1)).isoformat()
        assert (await call(client, "omniroute_memory_clear", olderThan=past))["data"]["deletedCount"] == 0
        future = (datetime.now(timezone.utc) + timedelta(days=1)).date().isoformat()  # a date, as agents send
        kept = await call(client, "omniroute_memory_clear", type="episodic", olderThan=future)
        assert kept["data"]["deletedCount"] == 0
        cleared = await call(client, "omniroute_memory_clear", apiKeyId="", olderThan=future)
        assert cleared["success"] is True and cleared["data"]["deletedCount"] == 61
    with memroute.open(KEYWORD_ONLY, use_env=False, data_dir=str(data_dir)) as mem:
        assert mem.list(api_key_id="alice").total == 0


async def test_the_aliases_can_be_turned_off(tmp_path):
    config = write_toml(tmp_path / "memroute.toml", {"mcp": {"omniroute_tools": False}})
    async with Client(_stdio(tmp_path / "data", "--config", str(config), "mcp", "--tenant", "alice")) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert "memory_search" in names and not names & ALIASES
        missing = await client.call_tool("omniroute_memory_search", {"query": "x"})
        assert missing.is_error


async def test_over_http_each_key_reaches_only_its_tenant(memroute_server):
    server = memroute_server
    async with mcp_client(server, server.tenant_a) as alice, mcp_client(server, server.tenant_b) as bob:
        mine: dict[str, Any] = await call(alice, "omniroute_memory_add", type="episodic", key="project:bluebird",
                                          content="Project Bluebird launches in March")
        await call(bob, "omniroute_memory_add", apiKeyId="tenant-b", type="factual", key="pref:tea",
                   content="Bob drinks Bluebird tea")
        # The reference obeyed apiKeyId: Bob could read and clear Alice's memories. Here it is refused.
        assert "another tenant" in await call_error(bob, "omniroute_memory_search", apiKeyId="tenant-a",
                                                    query="Bluebird")
        assert "another tenant" in await call_error(bob, "omniroute_memory_clear", apiKeyId="tenant-a")
        found = await call(bob, "omniroute_memory_search", query="Bluebird")
        assert [m["apiKeyId"] for m in found["data"]["memories"]] == ["tenant-b"]
        # The reference's apiKeyId "" cleared every key's memories; here it is the caller's own.
        assert (await call(bob, "omniroute_memory_clear", apiKeyId=""))["data"]["deletedCount"] == 1
        still = await call(alice, "omniroute_memory_search", query="Bluebird launches")
        assert [m["id"] for m in still["data"]["memories"]] == [mine["data"]["memory"]["id"]]
    _, reader = server.create_key("reader", scopes="read", tenant="tenant-a")
    async with mcp_client(server, reader) as read_only:
        assert "'write' scope" in await call_error(read_only, "omniroute_memory_clear")
        assert (await call(read_only, "omniroute_memory_search", query="Bluebird"))["data"]["count"] == 1


def test_clear_by_creation_time_refuses_bad_input(tmp_path):
    from memroute.errors import ValidationError

    with memroute.open(KEYWORD_ONLY, use_env=False, data_dir=str(tmp_path / "data")) as mem:
        mem.add(api_key_id="a", content="A note to keep")
        with pytest.raises(ValidationError, match="created_before: not an ISO-8601"):
            mem.clear("a", created_before="last week")
        with pytest.raises(ValidationError, match="not both"):
            mem.clear("a", created_before="2020-01-01", older_than_days=3)
        assert mem.clear("a", created_before="2020-01-01").deleted == 0
        assert mem.clear("a", created_before=datetime.now(timezone.utc) + timedelta(seconds=1)).deleted == 1
