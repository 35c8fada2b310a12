"""End users under one app key over ``/mcp`` (issue 30), with the MCP SDK's streamable HTTP client on the real
server: an app key's session acts for the end user named when it was opened (``x-memroute-user``), fixed for
the session's life; two apps with two end users each never see each other's memories; a session cannot be
switched to another end user; an app key without an end user and a plain key naming one are refused."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.integration.test_mcp_http import INITIALIZE, MCP_HEADERS, call, call_error
from tests.servers.memroute_server import MemrouteServer

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server(memroute_server):
    for app in ("shop", "cafe"):
        key, secret = memroute_server.create_key(app, tenant=app, end_users=True)
        memroute_server.keys[app], memroute_server.secrets[app] = key, secret
    return memroute_server


DROPPED: list[str] = []
"""Requests sent without the end user header by an ``only_at_connect`` client (so the test cannot pass vacuously)."""


@contextlib.asynccontextmanager
async def mcp_client(server: MemrouteServer, secret: str, end_user: str | None, *, mode: str = "legacy",
                     only_at_connect: bool = False) -> AsyncIterator[Client]:
    """An SDK client on ``/mcp`` naming ``end_user`` on every request, or (``only_at_connect``) on the requests
    sent before the server handed out a session id."""
    headers = {"Authorization": f"Bearer {secret}"}
    if end_user is not None:
        headers["x-memroute-user"] = end_user

    async def drop_after_connect(request: Any) -> None:
        if only_at_connect and "mcp-session-id" in request.headers:
            del request.headers["x-memroute-user"]
            DROPPED.append(request.headers["mcp-session-id"])

    async with httpx2.AsyncClient(headers=headers, timeout=30,
                                  event_hooks={"request": [drop_after_connect]}) as http, \
            Client(streamable_http_client(server.base_url + "/mcp", http_client=http), mode=mode) as client:
        yield client


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_two_apps_with_two_end_users_each_are_isolated(server, mode):
    added = {}
    for app in ("shop", "cafe"):
        for user in ("u1", "u2"):
            async with mcp_client(server, server.secrets[app], user, mode=mode) as client:
                memory = (await call(client, "memory_add", content=f"{app} {user} plays the cello"))["memory"]
                added[(app, user)] = memory["id"]
    for (app, user), memory_id in added.items():
        async with mcp_client(server, server.secrets[app], user, mode=mode) as client:
            listed = await call(client, "memory_list")
            assert [m["id"] for m in listed["memories"]] == [memory_id]
            found = await call(client, "memory_search", query="cello")
            assert [m["id"] for m in found["memories"]] == [memory_id]
            for other in set(added.values()) - {memory_id}:
                assert "no memory with id" in await call_error(client, "memory_get", id=other)
                assert "no memory with id" in await call_error(client, "memory_delete", id=other)
    for (app, user), memory_id in added.items():
        assert server.mem.get(memory_id, api_key_id=f"{app}/{user}") is not None


async def test_the_end_user_is_fixed_when_the_session_opens(server):
    server.mem.add(api_key_id="shop/u1", content="u1 owns a red bicycle")
    server.mem.add(api_key_id="shop/u2", content="u2 owns a blue bicycle")
    async with mcp_client(server, server.secrets["shop"], "u1", only_at_connect=True) as client:
        found = await call(client, "memory_search", query="bicycle")  # no header: the session's end user
        assert [m["content"] for m in found["memories"]] == ["u1 owns a red bicycle"]
    assert DROPPED, "the later requests of the session went without the header"
    opened = httpx.post(server.base_url + "/mcp", json=INITIALIZE, timeout=30,
                        headers={**MCP_HEADERS, "Authorization": f"Bearer {server.secrets['shop']}",
                                 "x-memroute-user": "u1"})
    session = opened.headers["mcp-session-id"]
    switched = httpx.post(server.base_url + "/mcp", timeout=30,
                          json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                          headers={**MCP_HEADERS, "Authorization": f"Bearer {server.secrets['shop']}",
                                   "mcp-session-id": session, "x-memroute-user": "u2",
                                   "mcp-protocol-version": "2025-06-18"})
    assert switched.status_code == 400 and "fixed per session" not in switched.text
    assert "acts for end user 'u1'" in switched.json()["error_description"]


async def test_an_app_key_needs_an_end_user_and_a_plain_key_cannot_name_one(server):
    async with mcp_client(server, server.secrets["shop"], None) as client:
        assert "app key" in await call_error(client, "memory_list")
    async with mcp_client(server, server.tenant_a, "u1") as client:
        assert "not an app key" in await call_error(client, "memory_list")
    bad = httpx.post(server.base_url + "/mcp", json=INITIALIZE, timeout=30,
                     headers={**MCP_HEADERS, "Authorization": f"Bearer {server.secrets['shop']}",
                              "x-memroute-user": "no/slash"})
    assert bad.status_code == 400 and "end user id" in bad.json()["error_description"]


async def test_tools_tag_and_filter_by_agent(server):
    async with mcp_client(server, server.secrets["cafe"], "u1") as client:
        planner = (await call(client, "memory_add", content="Reserve a window table", agent="planner"))["memory"]
        await call(client, "memory_add", content="The window table was cold", agent="critic")
        assert planner["metadata"] == {"agent": "planner"}
        found = await call(client, "memory_search", query="window table", agent="planner")
        assert [m["id"] for m in found["memories"]] == [planner["id"]]
        listed = await call(client, "memory_list", agent="critic")
        assert [m["content"] for m in listed["memories"]] == ["The window table was cold"]
        assert "agent" in await call_error(client, "memory_add", content="x", agent="no/slash")


def test_stdio_sessions_take_the_end_user_at_start(tmp_path):
    import memroute
    from memroute.errors import PermissionDeniedError, ValidationError
    from memroute.server.mcp.stdio import key_caller, stdio_server

    with memroute.open(data_dir=str(tmp_path / "d"), embedding={"source": "none"}) as mem:
        _key, app = mem.keys.create("shop", scopes="read,write", tenant="shop", end_users=True)
        _key, plain = mem.keys.create("plain", scopes="read,write", tenant="tenant-a")
        assert key_caller(mem, app, "u1")().tenant == "shop/u1"
        with pytest.raises(ValidationError, match="MEMROUTE_END_USER"):
            key_caller(mem, app)
        with pytest.raises(ValidationError, match="end user id"):
            key_caller(mem, app, "no/slash")
        with pytest.raises(PermissionDeniedError, match="not an app key"):
            key_caller(mem, plain, "u1")
        assert key_caller(mem, plain)().tenant == "tenant-a"
        with pytest.raises(ValidationError, match="endUser"):  # --tenant shop --user no/slash
            stdio_server(mem, api_key=None, tenant="shop", end_user="no/slash")
