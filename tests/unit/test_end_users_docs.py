"""The examples in docs/end-users.md run as written: the CLI lines through ``memroute``'s own entry point, the
Python ones against a real server on loopback (and the proxy in front of the fake model server), the MCP
client configuration parsed."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from memroute.cli import main
from tests.servers.memroute_server import MemrouteServer
from tests.servers.proxy_stack import proxy_stack

DOC = Path(__file__).resolve().parents[2] / "docs" / "end-users.md"


def _example(name: str, language: str = "python") -> str:
    match = re.search(rf"<!-- example: {name} -->\n```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert match, f"docs/end-users.md has no '{name}' example"
    return match.group(1)


def _run(name: str, **names: str) -> None:
    exec(compile(_example(name), str(DOC), "exec"), {**names, "__name__": "doc"})


def test_every_code_block_is_an_example_a_test_runs():
    text = DOC.read_text(encoding="utf-8")
    assert text.count("```") == 2 * len(re.findall(r"<!-- example: \w+ -->\n```", text))


def test_the_cli_example_runs(monkeypatch, capsys):
    monkeypatch.setenv("MEMORY_EMBEDDING_SOURCE", "none")
    for line in _example("cli", "console").splitlines():
        assert line.startswith("$ memroute ")
        main(shlex.split(line)[2:])
    out = capsys.readouterr().out
    assert "tenant=shop  end-users" in out and "deleted 0 memories of shop/u1" in out


def test_the_python_example_runs(tmp_path, capsys):
    _run("python", DATA_DIR=str(tmp_path / "d"))
    assert capsys.readouterr().out.splitlines() == ["[\"I'm vegetarian\"]", "['u1', 'u2']", "1 True ['u2']"]


def test_the_agents_example_runs(tmp_path, capsys):
    _run("agents", DATA_DIR=str(tmp_path / "d"))
    assert capsys.readouterr().out.splitlines() == ["['The flight to Lisbon costs 120 euros']", "1"]


def test_the_rest_example_runs(tmp_path, capsys):
    with MemrouteServer(tmp_path, config={"embedding": {"source": "none"}}) as server:
        _key, app_key = server.create_key("shop", tenant="shop", end_users=True)
        _run("rest", BASE_URL=server.base_url, APP_KEY=app_key)
        assert server.mem.list(api_key_id="shop/u1").total == 0
    assert capsys.readouterr().out.splitlines() == ["1", "{'tenant': 'shop', 'data': ['u1']}", "1 True"]


def test_the_proxy_example_runs(tmp_path, capsys):
    with proxy_stack(tmp_path) as stack:
        _key, app_key = stack.server.create_key("shop", tenant="shop", end_users=True)
        stack.mem.add(api_key_id="shop/u2", content="I love steak for dinner", key="diet")
        stack.mem.add(api_key_id="shop/u1", content="I'm vegetarian and never eat dinner meat", key="diet")
        stack.upstream.reply = "Steak."
        _run("proxy", BASE_URL=stack.url, APP_KEY=app_key)
        sent = str(stack.upstream.last["body"])
    assert capsys.readouterr().out.strip() == "Steak."
    assert "steak for dinner" in sent and "vegetarian" not in sent


def test_the_mcp_configuration_names_the_end_user_header():
    config = json.loads(_example("mcp", "json"))
    headers = config["mcpServers"]["memroute"]["headers"]
    assert headers["x-memroute-user"] == "u1" and headers["Authorization"].startswith("Bearer mr_")
    assert config["mcpServers"]["memroute"]["url"].endswith("/mcp")
