"""The MCP tools' logic through the SDK's in-process client (memory streams, no socket).

Auth over a real socket, two-tenant isolation over HTTP and the stdio subprocess are in
tests/integration/test_mcp_http.py and tests/integration/test_mcp_stdio.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from mcp import Client

import memroute
from memroute.server.mcp import build_mcp_server
from memroute.server.mcp.tools import Caller

pytestmark = pytest.mark.anyio

READ_WRITE = frozenset({"read", "write"})


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def mem(tmp_path) -> Iterator[memroute.Memroute]:
    # Keyword retrieval only: the tool logic is under test here, not the embedding tier.
    with memroute.open(data_dir=str(tmp_path / "data"), embedding={"source": "none"},
                       vectors={"store": "none"}) as service:
        yield service


def _client(mem: memroute.Memroute, tenant: str = "alice", scopes: frozenset[str] = READ_WRITE) -> Client:
    return Client(build_mcp_server(mem, lambda: Caller(tenant=tenant, scopes=scopes)))


@pytest.fixture
async def alice(mem) -> AsyncIterator[Client]:
    async with _client(mem) as client:
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


# --- the published tools -------------------------------------------------------------------------------

async def test_the_eight_tools_with_output_schemas_and_no_tenant_argument(alice):
    listed = {tool.name: tool for tool in (await alice.list_tools()).tools}
    # The reference's omniroute_memory_* aliases are tested in tests/integration/test_mcp_omniroute.py.
    tools = {name: tool for name, tool in listed.items() if not name.startswith("omniroute_")}
    assert set(tools) == {"memory_search", "memory_add", "memory_clear", "memory_list", "memory_get",
                          "memory_update", "memory_delete", "memory_history"}
    assert set(listed) - set(tools) == {"omniroute_memory_search", "omniroute_memory_add", "omniroute_memory_clear"}
    for tool in tools.values():
        assert tool.output_schema is not None, tool.name
        assert tool.description and len(tool.description) > 40, tool.name
        names = set(tool.input_schema.get("properties", {}))
        assert not names & {"tenant", "api_key_id", "apiKeyId", "caller"}, (tool.name, names)
    assert tools["memory_search"].input_schema["required"] == ["query"]
    assert tools["memory_search"].annotations.read_only_hint is True
    assert tools["memory_clear"].annotations.destructive_hint is True
    memory_props = tools["memory_get"].output_schema["properties"]
    assert {"id", "key", "type", "content", "created_at"} <= set(memory_props)
    assert "api_key_id" not in memory_props  # the tenant is the caller's own: not repeated in every result


async def test_initialize_names_the_server_and_tells_the_model_how_to_use_it(alice):
    assert alice.server_info is not None and alice.server_info.name == "memroute"
    assert "memory_search" in (alice.instructions or "")


# --- add / search ----------------------------------------------------------------------------------------

async def test_add_then_search_finds_it_with_a_score(alice):
    added = await call(alice, "memory_add", content="Prefers TypeScript for frontend code",
                       key="preference:language", metadata={"source": "chat"})
    assert added["created"] is True and added["memory"]["type"] == "factual"
    assert added["memory"]["metadata"] == {"source": "chat"}
    found = await call(alice, "memory_search", query="TypeScript frontend")
    assert found["count"] == 1 and found["memories"][0]["id"] == added["memory"]["id"]
    assert found["memories"][0]["score"] > 0
    assert found["total_tokens"] == -(-len("Prefers TypeScript for frontend code") // 4)


async def test_add_with_an_existing_key_updates_in_place(alice):
    first = await call(alice, "memory_add", content="Prefers tabs", key="preference:indent")
    second = await call(alice, "memory_add", content="Prefers spaces", key="preference:indent")
    assert second["created"] is False and second["memory"]["id"] == first["memory"]["id"]
    assert second["memory"]["content"] == "Prefers spaces"


async def test_search_type_filter_applies_before_the_limit(alice):
    for n in range(6):
        await call(alice, "memory_add", content=f"coffee fact number {n}", type="factual")
    await call(alice, "memory_add", content="decided coffee every morning", type="episodic")
    found = await call(alice, "memory_search", query="coffee", type="episodic", limit=1)
    assert [m["type"] for m in found["memories"]] == ["episodic"]


async def test_search_budget_and_limit(alice):
    for n in range(5):
        await call(alice, "memory_add", content=f"tea note {n} " + "x" * 40)
    assert (await call(alice, "memory_search", query="tea", limit=2))["count"] == 2
    budgeted = await call(alice, "memory_search", query="tea", max_tokens=30)
    assert budgeted["count"] == 2 and budgeted["total_tokens"] <= 30


# --- list / get / update / delete --------------------------------------------------------------------

async def test_list_pages_with_an_opaque_cursor(alice):
    ids = [(await call(alice, "memory_add", content=f"note {n}"))["memory"]["id"] for n in range(5)]
    seen: list[str] = []
    cursor = None
    while True:
        arguments: dict[str, Any] = {"limit": 2} if cursor is None else {"limit": 2, "cursor": cursor}
        page = await call(alice, "memory_list", **arguments)
        assert page["total"] == 5
        seen += [m["id"] for m in page["memories"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids) and len(seen) == 5


async def test_get_update_delete(alice):
    memory = (await call(alice, "memory_add", content="Lives in Lisbon", key="fact:city"))["memory"]
    assert (await call(alice, "memory_get", id=memory["id"]))["content"] == "Lives in Lisbon"
    updated = await call(alice, "memory_update", id=memory["id"], content="Lives in Porto", type="episodic")
    assert updated["content"] == "Lives in Porto" and updated["type"] == "episodic"
    assert updated["id"] == memory["id"]
    assert await call(alice, "memory_delete", id=memory["id"]) == {"id": memory["id"], "deleted": True}
    assert "no memory with id" in await call_error(alice, "memory_get", id=memory["id"])
    assert "no memory with id" in await call_error(alice, "memory_delete", id=memory["id"])
    assert "no memory with id" in await call_error(alice, "memory_update", id=memory["id"], content="x")


# --- clear ---------------------------------------------------------------------------------------------

async def test_clear_reports_the_real_count_past_the_references_cap_of_50(alice, mem):
    for n in range(60):
        mem.add(api_key_id="alice", content=f"bulk memory {n}")
    mem.add(api_key_id="alice", content="procedure one", type="procedural")
    dry = await call(alice, "memory_clear", dry_run=True)
    assert dry["matched"] == 61 and dry["deleted"] == 0 and dry["dry_run"] is True
    typed = await call(alice, "memory_clear", type="procedural")
    assert typed["deleted"] == 1 and typed["type"] == "procedural"
    everything = await call(alice, "memory_clear")
    assert everything["deleted"] == 60
    assert (await call(alice, "memory_list"))["total"] == 0


# --- bad input: tool errors with the service's message; the session carries on ---------------------------

@pytest.mark.parametrize(("tool", "arguments", "expected"), [
    ("memory_add", {"content": ""}, "content"),
    ("memory_add", {"content": "x", "type": "gossip"}, "type"),
    ("memory_add", {"content": "x", "metadata": "not an object"}, "metadata"),
    ("memory_search", {"query": "x", "limit": 0}, "limit"),
    ("memory_search", {"query": "x", "max_tokens": 99999}, "max_tokens"),
    ("memory_list", {"cursor": "not-a-cursor"}, "cursor"),
    ("memory_update", {"id": "whatever"}, "nothing to change"),
    ("memory_get", {"id": ""}, "id"),
    ("memory_clear", {"older_than_days": -3}, "older_than_days"),
    ("memory_search", {}, "query"),
])
async def test_bad_input_is_a_tool_error_naming_the_field(alice, tool, arguments, expected):
    message = await call_error(alice, tool, **arguments)
    assert expected in message
    assert "Traceback" not in message
    # The same session still answers.
    assert (await call(alice, "memory_list"))["total"] >= 0


async def test_an_unknown_tool_is_an_error_not_a_crash(alice):
    result = await alice.call_tool("memory_teleport", {})
    assert result.is_error
    assert (await call(alice, "memory_list"))["total"] == 0


# --- scopes and tenants ----------------------------------------------------------------------------------

async def test_a_read_only_caller_can_read_but_not_write(mem):
    memory = mem.add(api_key_id="alice", content="Uses vim")
    async with _client(mem, scopes=frozenset({"read"})) as reader:
        assert (await call(reader, "memory_search", query="vim"))["count"] == 1
        assert (await call(reader, "memory_get", id=memory.id))["content"] == "Uses vim"
        assert (await call(reader, "memory_list"))["total"] == 1
        for tool, arguments in [("memory_add", {"content": "x"}), ("memory_delete", {"id": memory.id}),
                                ("memory_update", {"id": memory.id, "content": "y"}), ("memory_clear", {})]:
            assert "needs the 'write' scope" in await call_error(reader, tool, **arguments)
    assert mem.get(memory.id, api_key_id="alice") is not None


async def test_a_write_only_caller_cannot_read(mem):
    async with _client(mem, scopes=frozenset({"write"})) as writer:
        await call(writer, "memory_add", content="Writes only")
        assert "needs the 'read' scope" in await call_error(writer, "memory_search", query="x")


async def test_each_tenant_sees_only_its_own_memories(mem):
    async with _client(mem, "alice") as alice, _client(mem, "bob") as bob:
        secret = (await call(alice, "memory_add", content="Alice's secret project codename"))["memory"]
        assert (await call(bob, "memory_search", query="secret project codename"))["count"] == 0
        assert (await call(bob, "memory_list"))["total"] == 0
        assert "no memory with id" in await call_error(bob, "memory_get", id=secret["id"])
        assert "no memory with id" in await call_error(bob, "memory_update", id=secret["id"], content="pwned")
        assert "no memory with id" in await call_error(bob, "memory_delete", id=secret["id"])
        assert (await call(bob, "memory_clear"))["deleted"] == 0
        assert (await call(alice, "memory_get", id=secret["id"]))["content"] == "Alice's secret project codename"


async def test_history_and_consolidation_per_tenant(mem):
    async with _client(mem, "alice") as alice, _client(mem, "bob") as bob:
        first = (await call(alice, "memory_add", content="Lives in Lisbon", key="profile:location"))["memory"]
        await call(bob, "memory_add", content="Lives in Porto", key="profile:location")
        moved = await call(alice, "memory_add", content="Lives in Berlin", key="profile:location", consolidate=True)
        assert moved["memory"]["id"] == first["id"] and moved["memory"]["content"] == "Lives in Berlin"
        history = await call(alice, "memory_history", id=first["id"])
        assert history["recorded"] is True and history["current"]["content"] == "Lives in Berlin"
        assert [(c["event"], c["actor"], c["old_content"], c["new_content"]) for c in history["changes"]] == [
            ("created", "mcp", None, "Lives in Lisbon"), ("superseded", "mcp", "Lives in Lisbon", "Lives in Berlin")]
        assert "no memory with id" in await call_error(bob, "memory_history", id=first["id"])
        await call(alice, "memory_delete", id=first["id"])
        after = await call(alice, "memory_history", id=first["id"])
        assert after["current"] is None and after["changes"][-1]["event"] == "deleted"
        assert after["changes"][-1]["old_content"] == "Lives in Berlin"
        assert "no memory with id" in await call_error(bob, "memory_history", id=first["id"])
        assert "not a UUID" in await call_error(alice, "memory_history", id="nope")


async def test_an_unexpected_failure_is_a_tool_error_without_internals(mem, monkeypatch):
    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("internal detail: /var/secret/path")

    monkeypatch.setattr(mem, "search", broken)
    async with _client(mem) as client:
        message = await call_error(client, "memory_search", query="x")
        assert "memory_search" in message and "/var/secret" not in message
        assert (await call(client, "memory_list"))["total"] == 0


async def test_a_memroute_error_keeps_its_message(mem, monkeypatch):
    from memroute.errors import BackendUnavailableError

    def unavailable(*_args: Any, **_kwargs: Any) -> Any:
        raise BackendUnavailableError("primary backend 'main' is unavailable: start it or add a fallback")

    monkeypatch.setattr(mem, "list", unavailable)
    async with _client(mem) as client:
        assert "start it or add a fallback" in await call_error(client, "memory_list")
