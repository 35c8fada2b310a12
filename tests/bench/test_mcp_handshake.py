"""How fast an MCP client gets an answer to ``initialize`` from memroute (the target: under a second).

Run: ``pytest -m bench tests/bench/test_mcp_handshake.py -s``. Each number is printed next to a baseline
measured in the same run: a bare SDK server with one trivial tool, started the same way.

- **stdio cold start**: spawn ``memroute mcp`` (default configuration: static embeddings, sqlite-vec) and
  complete ``initialize``, against spawning the bare server. This is what a client waits for at launch.
- **handshake on a running server**: ``initialize`` alone, in process (memory streams), memroute's server
  against the bare one.
- **first search**: the embedding model loads lazily, on the first search that needs it, not at initialize.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.server import MCPServer

import memroute
from memroute.server.mcp import build_mcp_server
from memroute.server.mcp.tools import Caller

pytestmark = [pytest.mark.bench, pytest.mark.anyio]

BARE_SERVER = """
from mcp.server import MCPServer
server = MCPServer("bare", log_level="WARNING")
@server.tool()
def echo(text: str) -> str:
    \"\"\"Echo.\"\"\"
    return text
server.run("stdio")
"""
RUNS = 3


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMROUTE_", "MEMORY_"))}
    env["MEMROUTE_DATA_DIR"] = str(data_dir)
    return env


async def _connect_seconds(params: StdioServerParameters) -> float:
    started = time.perf_counter()
    async with Client(params):
        elapsed = time.perf_counter() - started
    return elapsed


async def test_stdio_cold_start_to_initialized(tmp_path):
    bare = tmp_path / "bare_server.py"
    bare.write_text(BARE_SERVER, encoding="utf-8")
    env = _env(tmp_path / "data")
    memroute_params = StdioServerParameters(command=sys.executable, args=["-m", "memroute.cli", "mcp", "--tenant",
                                                                          "bench"], env=env)
    bare_params = StdioServerParameters(command=sys.executable, args=[str(bare)], env=env)
    await _connect_seconds(memroute_params)  # first open creates the database and state directory
    ours = [await _connect_seconds(memroute_params) for _ in range(RUNS)]
    baseline = [await _connect_seconds(bare_params) for _ in range(RUNS)]
    mine, base = statistics.median(ours), statistics.median(baseline)
    print(f"\nstdio spawn -> initialized: memroute {mine * 1000:.0f} ms, bare SDK server {base * 1000:.0f} ms "
          f"(x{mine / base:.2f}); load avg {os.getloadavg()[0]:.1f}")


async def test_handshake_on_a_running_server_and_lazy_first_search(tmp_path):
    bare = MCPServer("bare", log_level="WARNING")
    bare.add_tool(lambda text: text, name="echo", description="Echo.")
    with memroute.open(data_dir=str(tmp_path / "data")) as mem:
        mem.add(api_key_id="bench", content="Prefers TypeScript for frontend code")
        mem.flush(timeout=30)
        server = build_mcp_server(mem, lambda: Caller(tenant="bench", scopes=frozenset({"read", "write"})))
        ours, baseline = [], []
        for _ in range(5):
            for target, samples in ((server, ours), (bare, baseline)):
                started = time.perf_counter()
                async with Client(target):
                    samples.append(time.perf_counter() - started)
        async with Client(server) as client:
            started = time.perf_counter()
            first = await client.call_tool("memory_search", {"query": "frontend language"})
            first_s = time.perf_counter() - started
            started = time.perf_counter()
            await client.call_tool("memory_search", {"query": "frontend language"})
            second_s = time.perf_counter() - started
        assert not first.is_error
    mine, base = statistics.median(ours), statistics.median(baseline)
    print(f"\ninitialize (in process): memroute {mine * 1000:.1f} ms, bare SDK server {base * 1000:.1f} ms "
          f"(x{mine / base:.2f}); first memory_search {first_s * 1000:.0f} ms (model loads lazily), "
          f"second {second_s * 1000:.1f} ms")
    assert mine < 1.0


async def test_http_initialize_on_a_running_server(tmp_path):
    """``initialize`` over ``/mcp`` of the real server (bearer key checked against the key store), against a
    plain authenticated REST request to the same server as the baseline."""
    import httpx
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from tests.servers.memroute_server import MemrouteServer

    with MemrouteServer(tmp_path) as server:
        headers = {"Authorization": f"Bearer {server.tenant_a}"}
        ours, baseline = [], []
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            for _ in range(5):
                started = time.perf_counter()
                async with Client(streamable_http_client(server.base_url + "/mcp", http_client=http)):
                    ours.append(time.perf_counter() - started)
        with httpx.Client(base_url=server.base_url, headers=headers, timeout=30) as rest:
            for _ in range(5):
                started = time.perf_counter()
                rest.get("/readyz").raise_for_status()
                baseline.append(time.perf_counter() - started)
    mine, base = statistics.median(ours), statistics.median(baseline)
    print(f"\nHTTP initialize (session open): {mine * 1000:.1f} ms; one authenticated REST request "
          f"{base * 1000:.1f} ms (x{mine / base:.1f})")
    assert mine < 1.0
