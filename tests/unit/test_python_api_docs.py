"""The examples in docs/python-api.md do what the page says: the sync and JSONL examples (also run by
tests/docs with every other block) print what they claim, and the SDK examples, which need a model, run
against a loopback server speaking the OpenAI and Anthropic wire formats (set through the SDKs' own
environment variables, as the page tells a user to)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.servers.fake_llm import fake_llm_server

DOC = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"


def _example(name: str) -> str:
    match = re.search(rf"<!-- example: {name} -->\n(?:<!--[^\n]*-->\n)*```python\n(.*?)```",
                      DOC.read_text(encoding="utf-8"), re.S)
    assert match, f"docs/python-api.md has no '{name}' example"
    return match.group(1)


def _run(name: str) -> None:
    exec(compile(_example(name), str(DOC), "exec"), {"__name__": "doc"})


@pytest.fixture
def model(monkeypatch):
    with fake_llm_server() as server:  # stands in for the paid APIs
        monkeypatch.setenv("OPENAI_BASE_URL", f"{server.base_url}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
        yield server


def test_the_sync_example_finds_scopes_and_rejects(capsys):
    _run("sync")
    out = capsys.readouterr().out.splitlines()
    assert "preference:language: I prefer TypeScript" in out[0]  # the best hit first
    rest = out[out.index("['decision:db']") + 1:]  # the session's search: that session's memory only
    assert rest[0].startswith("rejected: ") and "content" in rest[0]
    assert rest[1].startswith("<memroute_memories>")


def test_the_async_example_runs(capsys):
    _run("async")
    out = capsys.readouterr().out
    assert "lang I prefer TypeScript" in out and "rejected:" in out


def test_the_jsonl_example_fills_in_and_restores(capsys):
    _run("jsonl")
    assert capsys.readouterr().out.splitlines() == ["2 imported for user-3"]


def test_the_wrappers_example_runs_against_a_loopback_model(model, capsys):
    model.reply = "Postgres it is."
    _run("wrappers")
    bodies = [request["body"] for request in model.requests if request["method"] == "POST"]
    out = capsys.readouterr().out
    assert out.count("Postgres it is.") == 3
    assert len(bodies) == 3 and all("<memroute_memories>" in str(body) for body in bodies)
    assert "Postgres for this project" in str(bodies[0])
    assert "Ubuntu servers" in out  # the observed user turn, listed after flush


def test_the_structured_outputs_example_runs_against_a_loopback_model(model, capsys):
    model.reply = '{"database": "Postgres"}'
    _run("structured")
    bodies = [request["body"] for request in model.requests if request["method"] == "POST"]
    assert capsys.readouterr().out.splitlines() == ["Postgres", 'req_fake {"database": "Postgres"}']
    assert len(bodies) == 2 and all("Postgres for this project" in str(body) for body in bodies)
    assert bodies[0]["response_format"]["type"] == "json_schema"
