"""The examples in docs/python-api.md run as written."""

from __future__ import annotations

import re
from pathlib import Path

from tests.servers.fake_llm import fake_llm_server

DOC = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"


def _example(name: str) -> str:
    match = re.search(rf"<!-- example: {name} -->\n```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert match, f"docs/python-api.md has no '{name}' example"
    return match.group(1)


def test_the_async_example_runs(tmp_path, capsys):
    exec(compile(_example("async"), str(DOC), "exec"), {"DATA_DIR": str(tmp_path / "d"), "__name__": "doc"})
    out = capsys.readouterr().out
    assert "lang I prefer TypeScript" in out and "rejected:" in out


def test_the_wrappers_example_runs_against_a_loopback_model(tmp_path, capsys):
    with fake_llm_server() as server:  # stands in for the paid APIs
        server.reply = "Postgres it is."
        namespace = {"DATA_DIR": str(tmp_path / "d"), "BASE_URL": server.base_url, "__name__": "doc"}
        exec(compile(_example("wrappers"), str(DOC), "exec"), namespace)
        bodies = [request["body"] for request in server.requests if request["method"] == "POST"]
    out = capsys.readouterr().out
    assert out.count("Postgres it is.") == 3
    assert len(bodies) == 3 and all("<memroute_memories>" in str(body) for body in bodies)
    assert "Postgres for this project" in str(bodies[0])
    assert "Ubuntu servers" in out  # the observed user turn, listed after flush


def test_the_structured_outputs_example_runs_against_a_loopback_model(tmp_path, capsys):
    with fake_llm_server() as server:  # stands in for the paid API
        server.reply = '{"database": "Postgres"}'
        namespace = {"DATA_DIR": str(tmp_path / "d"), "BASE_URL": server.base_url, "__name__": "doc"}
        exec(compile(_example("structured"), str(DOC), "exec"), namespace)
        bodies = [request["body"] for request in server.requests if request["method"] == "POST"]
    assert capsys.readouterr().out.splitlines() == ["Postgres", 'req_fake {"database": "Postgres"}']
    assert len(bodies) == 2 and all("Postgres for this project" in str(body) for body in bodies)
    assert bodies[0]["response_format"]["type"] == "json_schema"
