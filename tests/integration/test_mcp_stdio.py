"""``memroute mcp`` as a real subprocess, driven by the MCP SDK's stdio client (the way Claude Desktop, Claude
Code and Cursor start it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

import memroute

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def data_dir(tmp_path) -> Path:
    return tmp_path / "data"


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMROUTE_", "MEMORY_"))}
    # Keyword retrieval keeps the subprocess quick to start; the tools' logic is what is under test.
    env.update(MEMROUTE_DATA_DIR=str(data_dir), MEMORY_EMBEDDING_SOURCE="none", MEMORY_VECTOR_STORE="none")
    env.update(extra)
    return env


def _params(data_dir: Path, *args: str, **env: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "memroute.cli", "mcp", *args],
                                 env=_env(data_dir, **env))


def _run(data_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Start ``memroute mcp`` expecting it to refuse (it exits before reading stdin)."""
    return subprocess.run([sys.executable, "-m", "memroute.cli", "mcp", *args], env=_env(data_dir, **env),
                          input="", capture_output=True, text=True, timeout=60)


async def _call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def test_tenant_mode_serves_the_tools_over_stdio(data_dir):
    async with Client(_params(data_dir, "--tenant", "alice")) as client:
        assert client.server_info is not None and client.server_info.name == "memroute"
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"memory_search", "memory_add", "memory_clear"} <= names
        added = await _call(client, "memory_add", content="Prefers dark roast coffee", key="preference:coffee")
        found = await _call(client, "memory_search", query="coffee")
        assert [m["id"] for m in found["memories"]] == [added["memory"]["id"]]
        bad = await client.call_tool("memory_add", {"content": ""})
        assert bad.is_error and "content" in bad.content[0].text
        assert (await _call(client, "memory_list"))["total"] == 1  # the session survived the error
    with memroute.open(data_dir=str(data_dir), embedding={"source": "none"}, vectors={"store": "none"}) as mem:
        assert [m.content for m in mem.list(api_key_id="alice").data] == ["Prefers dark roast coffee"]


def test_refuses_to_start_without_a_key(data_dir):
    done = _run(data_dir)
    assert done.returncode == 1
    assert "MEMROUTE_API_KEY" in done.stderr and "--tenant" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_refuses_to_start_with_an_unknown_key(data_dir):
    done = _run(data_dir, MEMROUTE_API_KEY="mr_" + "x" * 43)
    assert done.returncode == 1 and "invalid API key" in done.stderr and "Traceback" not in done.stderr


def test_refuses_a_key_and_a_tenant_together(data_dir):
    done = _run(data_dir, "--tenant", "alice", MEMROUTE_API_KEY="mr_whatever")
    assert done.returncode == 1 and "not both" in done.stderr


def test_refuses_an_invalid_tenant_name(data_dir):
    done = _run(data_dir, "--tenant", " ")
    assert done.returncode == 2 and "--tenant" in done.stderr and "Traceback" not in done.stderr


async def test_a_key_binds_the_session_to_its_tenant_and_revocation_applies_at_once(data_dir):
    with memroute.open(data_dir=str(data_dir), embedding={"source": "none"}, vectors={"store": "none"}) as mem:
        alice_key, alice = mem.keys.create("alice laptop", scopes="read,write", tenant="alice")
        _, reader = mem.keys.create("bob reader", scopes="read", tenant="bob")
        mem.add(api_key_id="bob", content="Bob's private note about tea")
    async with Client(_params(data_dir, MEMROUTE_API_KEY=alice)) as client:
        await _call(client, "memory_add", content="Alice likes green tea")
        found = await _call(client, "memory_search", query="tea")
        assert [m["content"] for m in found["memories"]] == ["Alice likes green tea"]
        with memroute.open(data_dir=str(data_dir), embedding={"source": "none"},
                           vectors={"store": "none"}) as mem:
            mem.keys.revoke(alice_key.id)
        refused = await client.call_tool("memory_list", {})
        assert refused.is_error and "revoked" in refused.content[0].text
    async with Client(_params(data_dir, MEMROUTE_API_KEY=reader)) as client:
        assert (await _call(client, "memory_list"))["total"] == 1
        denied = await client.call_tool("memory_add", {"content": "x"})
        assert denied.is_error and "'write' scope" in denied.content[0].text
