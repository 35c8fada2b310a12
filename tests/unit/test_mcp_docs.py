"""docs/mcp.md stays true: every tool has a section whose example call, replayed in order, answers a result of
the documented shape; every client snippet is valid JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

import memroute
from memroute.server.mcp import build_mcp_server
from memroute.server.mcp.tools import Caller

pytestmark = pytest.mark.anyio

DOCS = Path(__file__).resolve().parents[2] / "docs" / "mcp.md"
DOC_ID = "3f1c2a9e-5b7d-4c1e-9a0f-2d8e6b4c7a10"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _sections() -> list[tuple[str, Any, Any]]:
    text = DOCS.read_text(encoding="utf-8")
    tools_part = text.split("## The tools", 1)[1].split("\n## ", 1)[0]
    sections = []
    for chunk in re.split(r"^### ", tools_part, flags=re.M)[1:]:
        name = re.match(r"`(\w+)\(", chunk)
        assert name, chunk[:80]
        blocks = re.findall(r"```json\n(.*?)```", chunk, flags=re.S)
        assert len(blocks) == 2, f"{name.group(1)}: expected a call and a result"
        sections.append((name.group(1), json.loads(blocks[0]), json.loads(blocks[1])))
    return sections


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return type(value).__name__ if value is not None else None


def _same_shape(documented: Any, actual: Any, path: str = "$") -> None:
    if isinstance(documented, dict):
        assert isinstance(actual, dict) and set(documented) == set(actual), (path, documented, actual)
        for key in documented:
            _same_shape(documented[key], actual[key], f"{path}.{key}")
    elif isinstance(documented, list):
        assert isinstance(actual, list) and bool(documented) == bool(actual), (path, documented, actual)
        if documented:
            _same_shape(documented[0], actual[0], f"{path}[0]")
    elif documented is not None and actual is not None:
        assert type(documented) is type(actual), (path, documented, actual)


async def test_every_tool_example_replays_with_the_documented_result_shape(tmp_path):
    sections = _sections()
    with memroute.open(data_dir=str(tmp_path / "data"), embedding={"source": "none"},
                       vectors={"store": "none"}) as mem:
        server = build_mcp_server(mem, lambda: Caller(tenant="docs", scopes=frozenset({"read", "write"})))
        async with Client(server) as client:
            # The omniroute_memory_* aliases are documented in docs/omniroute-compatibility.md (its own test).
            own = {t.name for t in (await client.list_tools()).tools if not t.name.startswith("omniroute_")}
            assert {name for name, _, _ in sections} == own
            real_id = None
            for name, arguments, documented in sections:
                if real_id is not None and arguments.get("id") == DOC_ID:
                    arguments = {**arguments, "id": real_id}
                result = await client.call_tool(name, arguments)
                assert not result.is_error, (name, result.content)
                actual = result.structured_content
                if name == "memory_add":
                    real_id = actual["memory"]["id"]
                _same_shape(documented, actual, name)
                if name == "memory_search":
                    assert actual["count"] == documented["count"]


def test_client_snippets_are_valid_json():
    text = DOCS.read_text(encoding="utf-8")
    snippets = re.findall(r"```json\n(.*?)```", text.split("## The tools", 1)[0], flags=re.S)
    assert len(snippets) >= 5
    for snippet in snippets:
        config = json.loads(snippet)
        assert "memroute" in config["mcpServers"]
