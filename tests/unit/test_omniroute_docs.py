"""Every code block of docs/omniroute-compatibility.md runs as written: ``$ memroute ...`` lines through the CLI,
``curl`` lines against a real ``memroute serve``, Python blocks as they are, TOML and JSON blocks parsed."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memroute.cli import main
from tests.servers.omniroute_db import build_reference_db

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DOC = Path(__file__).resolve().parents[2] / "docs" / "omniroute-compatibility.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def commands(block: str) -> list[str]:
    """The ``$ `` commands of a console block, continuation lines joined."""
    text = block.replace("\\\n", " ")
    return [line[2:].strip() for line in text.splitlines() if line.startswith("$ ")]


@pytest.fixture
def reference_db(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMORY_EMBEDDING_SOURCE", "none")
    # The tests run in tmp_path: the files the commands name are there (settings.json: the doc's own example).
    (tmp_path / "settings.json").write_text(blocks("json")[-1])
    return build_reference_db(tmp_path / "storage.sqlite", per_tenant=100)


def run_cli(command: str) -> None:
    try:
        main(shlex.split(command)[1:])
    except SystemExit as exc:
        assert not exc.code, f"{command!r} exited with {exc.code}"


def test_the_memroute_commands_run(reference_db):
    ran = 0
    for block in blocks("console"):
        for command in commands(block):
            if command.startswith("memroute "):
                run_cli(command)
                ran += 1
    assert ran >= 2


def test_the_curl_commands_run_against_the_server(reference_db, memroute_server):
    ran = 0
    for block in blocks("console"):
        for command in commands(block):
            if not command.startswith("curl "):
                continue
            command = command.replace("http://127.0.0.1:8765", memroute_server.base_url)
            done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60, check=True,
                                  env={**os.environ, "MEMROUTE_ADMIN_KEY": memroute_server.admin})
            body = json.loads(done.stdout)
            assert "error" not in body, body
            ran += 1
    assert ran >= 1


def test_the_python_examples_run(reference_db, capsys):
    for block in blocks("python"):
        exec(compile(block, str(DOC), "exec"), {})
    assert "rows would be carried" in capsys.readouterr().out


def test_the_toml_and_json_examples_parse():
    from memroute.config.settings import load_settings

    for block in blocks("toml"):
        load_settings(tomllib.loads(block), use_env=False)
    for block in blocks("json"):
        json.loads(block)


def test_the_settings_example_converts_to_the_documented_toml(tmp_path, capsys):
    part = DOC.read_text(encoding="utf-8").split("## Settings JSON", 1)[1].split("\n## ", 1)[0]
    source = re.search(r"```json\n(.*?)```", part, re.S).group(1)
    documented = re.search(r"```toml\n(.*?)```", part, re.S).group(1)
    (tmp_path / "in.json").write_text(source)
    run_cli(f"memroute config import --from omniroute {tmp_path / 'in.json'}")
    assert capsys.readouterr().out == documented


def alias_sections() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    part = DOC.read_text(encoding="utf-8").split("## MCP tool aliases", 1)[1].split("\n## ", 1)[0]
    sections = []
    for chunk in re.split(r"^### ", part, flags=re.M)[1:]:
        name = re.match(r"`(\w+)\(", chunk)
        assert name, chunk[:80]
        call, result = re.findall(r"```json\n(.*?)```", chunk, flags=re.S)
        sections.append((name.group(1), json.loads(call), json.loads(result)))
    return sections


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_each_alias_section_replays_with_the_documented_shape(tmp_path, anyio_backend):
    from mcp import Client

    import memroute
    from memroute.server.mcp import build_mcp_server
    from memroute.server.mcp.tools import Caller
    from tests.unit.test_mcp_docs import _same_shape

    sections = alias_sections()
    with memroute.open({"embedding": {"source": "none"}, "vectors": {"store": "none"}}, use_env=False,
                       data_dir=str(tmp_path / "data")) as mem:
        server = build_mcp_server(mem, lambda: Caller(tenant="shop", scopes=frozenset({"read", "write"})))
        async with Client(server) as client:
            aliases = {t.name for t in (await client.list_tools()).tools if t.name.startswith("omniroute_")}
            assert {name for name, _, _ in sections} == aliases
            for name, arguments, documented in sections:
                result = await client.call_tool(name, arguments)
                assert not result.is_error, (name, result.content)
                _same_shape(documented, result.structured_content, name)
                if name == "omniroute_memory_clear":
                    assert result.structured_content == documented
