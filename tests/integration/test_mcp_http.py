"""``/mcp`` in the real ``memroute serve`` over a loopback socket, driven by the MCP SDK's streamable HTTP
client with real keys: auth, scopes, revocation, two-tenant isolation and the Host / Origin checks."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.servers.memroute_server import MemrouteServer

pytestmark = pytest.mark.anyio

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
MISSING_ID = "00000000-0000-4000-8000-000000000000"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@contextlib.asynccontextmanager
async def mcp_client(server: MemrouteServer, secret: str, mode: str = "auto") -> AsyncIterator[Client]:
    """An SDK client on ``/mcp``. ``mode="legacy"`` opens a stateful session (``initialize``, then a session id
    on every request), the 2025 protocol most clients speak today; ``auto`` negotiates the newest."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=30) as http, \
            Client(streamable_http_client(server.base_url + "/mcp", http_client=http), mode=mode) as client:
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def call_error(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return " ".join(block.text for block in result.content if block.type == "text")


def _post(server: MemrouteServer, secret: str | None = None, **headers: str) -> httpx.Response:
    auth = {"Authorization": f"Bearer {secret}"} if secret else {}
    return httpx.post(server.base_url + "/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **auth, **headers},
                      timeout=30)


async def test_one_tenant_never_sees_or_touches_the_others_memories(memroute_server):
    server = memroute_server
    async with mcp_client(server, server.tenant_a) as alice, mcp_client(server, server.tenant_b) as bob:
        secret = (await call(alice, "memory_add", content="Project Bluebird launches in March",
                             key="project:bluebird"))["memory"]
        mine = (await call(bob, "memory_add", content="Bob's own note about Bluebird"))["memory"]

        found = await call(bob, "memory_search", query="Bluebird launches March")
        assert [m["id"] for m in found["memories"]] == [mine["id"]]
        assert [m["id"] for m in (await call(bob, "memory_list"))["memories"]] == [mine["id"]]
        for tool, arguments in [("memory_get", {"id": secret["id"]}), ("memory_history", {"id": secret["id"]}),
                                ("memory_update", {"id": secret["id"], "content": "cancelled"}),
                                ("memory_delete", {"id": secret["id"]})]:
            # A guessed id of another tenant answers exactly like a missing one.
            foreign = await call_error(bob, tool, **arguments)
            missing = await call_error(bob, tool, **{**arguments, "id": MISSING_ID})
            assert "no memory with id" in foreign and foreign == missing.replace(MISSING_ID, secret["id"])
        cleared = await call(bob, "memory_clear")
        assert cleared["deleted"] == 1  # Bob's own note, nothing else

        kept = await call(alice, "memory_get", id=secret["id"])
        assert kept["content"] == "Project Bluebird launches in March"
        history = await call(alice, "memory_history", id=secret["id"])  # bob's tries changed nothing
        assert [(c["event"], c["actor"]) for c in history["changes"]] == [("created", "mcp")]
        assert (await call(alice, "memory_list"))["total"] == 1
    assert server.mem.get(secret["id"], api_key_id="tenant-a") is not None


async def test_scopes_read_for_search_list_get_write_for_the_rest(memroute_server):
    server = memroute_server
    _, reader = server.create_key("reader", scopes="read", tenant="tenant-a")
    _, writer = server.create_key("writer", scopes="write", tenant="tenant-a")
    memory = server.mem.add(api_key_id="tenant-a", content="Uses Neovim")
    async with mcp_client(server, reader) as client:
        assert (await call(client, "memory_search", query="Neovim"))["count"] == 1
        assert (await call(client, "memory_get", id=memory.id))["content"] == "Uses Neovim"
        assert (await call(client, "memory_list"))["total"] == 1
        for tool, arguments in [("memory_add", {"content": "x"}), ("memory_update", {"id": memory.id, "content": "y"}),
                                ("memory_delete", {"id": memory.id}), ("memory_clear", {})]:
            assert "needs the 'write' scope" in await call_error(client, tool, **arguments)
    async with mcp_client(server, writer) as client:
        await call(client, "memory_add", content="Prefers light theme")
        for tool, arguments in [("memory_search", {"query": "theme"}), ("memory_list", {}),
                                ("memory_get", {"id": memory.id})]:
            assert "needs the 'read' scope" in await call_error(client, tool, **arguments)
    assert server.mem.list(api_key_id="tenant-a").total == 2


async def test_a_revoked_key_is_refused_at_its_next_request(memroute_server):
    server = memroute_server
    key, secret = server.create_key("soon revoked", scopes="read,write", tenant="tenant-a")
    async with mcp_client(server, secret) as client:
        await call(client, "memory_add", content="Before revocation")
        server.mem.keys.revoke(key.id)
        with pytest.raises(MCPError):  # the transport surfaces the 401 as an error response to the call
            await client.call_tool("memory_list", {})
    assert _post(server, secret).status_code == 401


async def test_missing_or_unknown_key_is_401_pointing_at_the_resource_metadata(memroute_server):
    server = memroute_server
    for secret in (None, "mr_" + "x" * 43, "not-a-memroute-key"):
        response = _post(server, secret)
        assert response.status_code == 401, response.text
        challenge = response.headers["www-authenticate"]
        assert challenge.startswith("Bearer ") and "/.well-known/oauth-protected-resource/mcp" in challenge
    metadata = httpx.get(server.base_url + "/.well-known/oauth-protected-resource/mcp", timeout=30)
    assert metadata.status_code == 200
    document = metadata.json()
    assert document["resource"].endswith("/mcp") and document["bearer_methods_supported"] == ["header"]


async def test_host_and_origin_checks(memroute_server):
    server = memroute_server
    assert _post(server, server.tenant_a).status_code == 200
    assert _post(server, server.tenant_a, Host="evil.example").status_code == 421
    assert _post(server, server.tenant_a, Origin="http://evil.example").status_code == 403
    assert _post(server, server.tenant_a, Origin=server.base_url).status_code == 200


async def test_configured_hosts_and_origins_are_accepted(tmp_path):
    config = {"mcp": {"allowed_hosts": ["memory.internal"], "allowed_origins": ["https://app.example.com"]}}
    with MemrouteServer(tmp_path, config=config) as server:
        port = server.base_url.rsplit(":", 1)[1]
        assert _post(server, server.tenant_a, Host=f"memory.internal:{port}").status_code == 200
        assert _post(server, server.tenant_a, Host="other.internal").status_code == 421
        assert _post(server, server.tenant_a, Origin="https://app.example.com").status_code == 200
        assert _post(server, server.tenant_a, Origin="https://evil.example.com").status_code == 403


async def test_tool_errors_do_not_end_the_session(memroute_server):
    async with mcp_client(memroute_server, memroute_server.tenant_a) as client:
        assert "content" in await call_error(client, "memory_add", content="")
        assert "type" in await call_error(client, "memory_add", content="x", type="gossip")
        assert "no memory with id" in await call_error(client, "memory_get", id=MISSING_ID)
        assert "not a UUID" in await call_error(client, "memory_get", id="missing")
        assert (await call(client, "memory_add", content="still here"))["created"] is True


async def test_a_stateful_session_acts_for_its_key_and_dies_with_it(memroute_server):
    server = memroute_server
    key, secret = server.create_key("legacy client", scopes="read,write", tenant="tenant-a")
    async with mcp_client(server, secret, mode="legacy") as alice, \
            mcp_client(server, server.tenant_b, mode="legacy") as bob:
        await call(alice, "memory_add", content="Alice's stateful-session memory")
        assert (await call(alice, "memory_list"))["total"] == 1
        assert (await call(bob, "memory_list"))["total"] == 0
        assert (await call(bob, "memory_search", query="stateful session memory"))["count"] == 0
        server.mem.keys.revoke(key.id)
        with pytest.raises(MCPError):  # the 401 answers the revoked key's next request
            await alice.call_tool("memory_list", {})
        assert (await call(bob, "memory_list"))["total"] == 0  # the other session is unaffected


async def test_consolidation_restates_and_supersedes_over_http_per_tenant(memroute_server):
    server = memroute_server
    async with mcp_client(server, server.tenant_a) as alice, mcp_client(server, server.tenant_b) as bob:
        engineer = (await call(alice, "memory_add", content="Works as a data engineer at Acme"))["memory"]
        theirs = (await call(bob, "memory_add", content="Works as a data engineer at Acme"))["memory"]
        restated = await call(alice, "memory_add", content="Works at Acme as a data engineer", consolidate=True)
        assert restated["memory"]["id"] == engineer["id"] and restated["created"] is False
        unrelated = await call(alice, "memory_add", content="Has two cats named Mochi and Tofu", consolidate=True)
        assert unrelated["memory"]["id"] != engineer["id"]
        history = await call(alice, "memory_history", id=engineer["id"])
        assert [(c["event"], c["old_content"]) for c in history["changes"]] == [
            ("created", None), ("updated", "Works as a data engineer at Acme")]
        bob_history = await call(bob, "memory_history", id=theirs["id"])
        assert [c["event"] for c in bob_history["changes"]] == ["created"]
        assert bob_history["current"]["content"] == "Works as a data engineer at Acme"
