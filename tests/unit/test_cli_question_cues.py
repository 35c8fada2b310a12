"""``memroute search`` shows when each memory was said, and a question naming a person prefers what they said;
two tenants, in process."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def run(run_cli, monkeypatch):
    monkeypatch.setenv("MEMORY_EMBEDDING_SOURCE", "none")  # keyword-only keeps these tests about the CLI
    return run_cli


def test_search_prints_when_a_memory_was_said_and_stays_in_its_tenant(run):
    said = {"said_at": "2025-06-01T10:00:00Z", "speaker": "Maria"}
    assert run("add", "--api-key", "alice", "--metadata", json.dumps(said), "Maria started learning Japanese")[0] == 0
    tom = json.dumps({"speaker": "Tom"})
    assert run("add", "--api-key", "alice", "--metadata", tom, "Tom finds Japanese hard")[0] == 0
    assert run("add", "--api-key", "bob", "--metadata", json.dumps(said), "Bob's Japanese lessons")[0] == 0
    code, out, err = run("search", "--api-key", "alice", "when did Maria start learning Japanese")
    assert code == 0, err
    lines = out.splitlines()
    assert "(said 2025-06-01)" in lines[1] and lines[2].strip() == "Maria started learning Japanese"
    assert "Bob" not in out
    code, out, _ = run("search", "--api-key", "alice", "--json", "what does Tom think of Japanese")
    memories = json.loads(out)["memories"]
    assert memories[0]["content"] == "Tom finds Japanese hard" and memories[0]["said_at"] is None
    assert memories[0]["leg_scores"]["person"] == 1.0
    code, out, _ = run("search", "--api-key", "bob", "--json", "when did I start Japanese")
    assert [m["said_at"] for m in json.loads(out)["memories"]] == ["2025-06-01T10:00:00Z"]
