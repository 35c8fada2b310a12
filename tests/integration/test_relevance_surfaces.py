"""The relevance score on every surface: REST (search and retrieve-preview, which the dashboard's Playground
shows), MCP (``memory_search``) over the real ``memroute serve`` on a loopback socket, and the CLI's
``memroute search``: each hit's score is in [0, 1], the best above 0, the floor leaves an unrelated query with
less than every memory, and each tenant sees only its own memories."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import pytest
from click.testing import CliRunner
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

import memroute
from memroute.cli import cli

SEVEN = ["Lives in Porto since 2024", "Prefers Rust for CLIs", "Prefers TypeScript for frontend code",
         "Allergic to peanuts", "Works as a nurse at the city hospital", "Has two cats named Miso and Tofu",
         "Runs a half marathon every spring"]


def seed(mem) -> None:
    for index, content in enumerate(SEVEN):
        mem.add(api_key_id="tenant-a", content=content, key=f"fact:{index}")
    mem.add(api_key_id="tenant-b", content="Lives in Lisbon with his sister", key="home")
    assert mem.flush(timeout=60)


def in_unit_interval(scores: list[float]) -> bool:
    return bool(scores) and all(0.0 <= s <= 1.0 for s in scores) and max(scores) > 0.0


def test_rest_search_and_preview_scores_are_relevances(memroute_server) -> None:
    seed(memroute_server.mem)
    a, b = memroute_server.client(memroute_server.tenant_a), memroute_server.client(memroute_server.tenant_b)
    try:
        hits = a.post("/api/memory/search", json={"query": "where does the user live?"}).json()["hits"]
        assert hits[0]["memory"]["content"] == "Lives in Porto since 2024"
        assert in_unit_interval([hit["score"] for hit in hits])
        spicy = a.post("/api/memory/search", json={"query": "spicy food"}).json()["hits"]
        assert len(spicy) < len(SEVEN) / 2
        preview = a.post("/api/memory/retrieve-preview",
                         json={"query": "which language for command line tools", "maxTokens": 500}).json()
        assert preview["memories"][0]["content"] == "Prefers Rust for CLIs"
        assert in_unit_interval([item["score"] for item in preview["memories"]])
        first = preview["memories"][0]
        assert first["ranks"]["vector"] == 1 and {"cosine", "coverage", "vector"} <= set(first["legScores"])
        other = b.post("/api/memory/search", json={"query": "where does the user live?"}).json()["hits"]
        assert [hit["memory"]["content"] for hit in other] == ["Lives in Lisbon with his sister"]
        assert in_unit_interval([hit["score"] for hit in other])
        bad = a.post("/api/memory/search", json={"query": "where", "limit": "many"})
        assert bad.status_code == 422 and "limit" in bad.text
    finally:
        a.close()
        b.close()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_mcp_memory_search_scores_are_relevances(memroute_server, anyio_backend) -> None:
    seed(memroute_server.mem)
    results = {}
    for tenant, secret in (("a", memroute_server.tenant_a), ("b", memroute_server.tenant_b)):
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=30) as http, \
                Client(streamable_http_client(memroute_server.base_url + "/mcp", http_client=http)) as client:
            result = await client.call_tool("memory_search", {"query": "where does the user live?"})
            assert not result.is_error and result.structured_content is not None
            results[tenant] = result.structured_content["memories"]
    assert results["a"][0]["content"] == "Lives in Porto since 2024"
    assert [m["content"] for m in results["b"]] == ["Lives in Lisbon with his sister"]
    for found in results.values():
        assert in_unit_interval([m["score"] for m in found])


def test_cli_search_prints_relevances(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with memroute.open({}, data_dir=str(data_dir)) as mem:
        seed(mem)
    config = tmp_path / "memroute.toml"
    config.write_text(f'data_dir = "{data_dir}"\n', encoding="utf-8")
    runner = CliRunner()
    run = runner.invoke(cli, ["--config", str(config), "search", "--api-key", "tenant-a", "--json",
                              "where does the user live?"])
    assert run.exit_code == 0, run.output
    memories = json.loads(run.output)["memories"]
    assert memories[0]["content"] == "Lives in Porto since 2024"
    assert in_unit_interval([m["score"] for m in memories])
    text = runner.invoke(cli, ["--config", str(config), "search", "--api-key", "tenant-b", "where does he live?"])
    assert text.exit_code == 0 and "Lisbon" in text.output and "Porto" not in text.output
    score = float(text.output.splitlines()[1].split()[0])
    assert 0.0 < score <= 1.0
