"""The pipeline CLI in process: extract, augment, summarize, compact, prune and the demo."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from memroute.cli import main
from memroute.config.serialization import memory_to_dict
from memroute.models import Memory, new_memory_id, utcnow

SEED = "I prefer TypeScript. I'll use Postgres for this project. I always commit before pushing. I hate Python."


@pytest.fixture
def run(run_cli, monkeypatch):
    monkeypatch.setenv("MEMORY_EMBEDDING_SOURCE", "none")  # keyword-only keeps these tests about the CLI

    def invoke(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
        return run_cli(*args, stdin=stdin or "")  # always a stdin: an empty one unless given

    return invoke


def export(run, key: str) -> list[dict]:
    code, out, _ = run("export", "--api-key", key)
    assert code == 0
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def import_old(run, tmp_path, rows: list[tuple[str, str, int]]) -> list[str]:
    """Import memories (key, content, age in days); returns their ids."""
    memories = []
    for api_key, content, days in rows:
        moment = utcnow() - timedelta(days=days)
        memories.append(Memory(id=new_memory_id(), api_key_id=api_key, key=f"k:{content}", content=content,
                               created_at=moment, updated_at=moment))
    path = tmp_path / "old.jsonl"
    path.write_text("\n".join(json.dumps(memory_to_dict(m)) for m in memories) + "\n", encoding="utf-8")
    assert run("import", "--all-tenants", str(path))[0] == 0
    return [m.id for m in memories]


# --- extract -------------------------------------------------------------------------------------------

def test_extract_json_prints_facts_and_stores_nothing(run):
    code, out, _ = run("extract", "--json", stdin=SEED)
    assert code == 0
    facts = json.loads(out)
    assert [(f["category"], f["type"], f["content"]) for f in facts] == [  # the default `everyday` extractor
        ("likes", "factual", "Prefers TypeScript"),
        ("decision", "episodic", "Will use Postgres for this project"),
        ("routines", "factual", "Always commits before pushing"),
        ("likes", "factual", "Hates Python"),
    ]
    assert all(set(f) >= {"key", "content", "type", "category"} for f in facts)
    assert export(run, "alice") == []
    code, out, _ = run("export", stdin="")
    assert out.strip() == ""


def test_extract_text_output_and_source(run):
    code, out, _ = run("extract", "--source", "assistant", "--json", stdin="I always recommend tests")
    assert json.loads(out)[0]["source"] == "assistant"
    code, out, _ = run("extract", stdin="nothing to see here")
    assert code == 0 and "no facts found" in out


def test_extract_store_writes_for_one_key(run):
    code, out, _ = run("extract", "--store", "--api-key", "alice", "--session", "s1", stdin=SEED)
    assert code == 0 and "stored 4 fact(s) for alice" in out
    stored = export(run, "alice")
    assert {m["key"] for m in stored} == {"likes:typescript", "decision:postgres_for_this_project",
                                          "routine:commit_before_pushing", "likes:python"}
    assert all(m["session_id"] == "s1" and m["metadata"]["source"] == "user" for m in stored)
    assert export(run, "bob") == []


@pytest.mark.parametrize("args", [("extract", "--store"), ("extract", "--api-key", "alice")])
def test_extract_option_misuse(run, args):
    code, _, err = run(*args, stdin=SEED)
    assert code == 2 and "Error" in err


# --- augment -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("stdin", ["{bad json", "", "   "])
def test_augment_invalid_json_is_one_line_error(run, stdin):
    code, out, err = run("augment", "--api-key", "alice", stdin=stdin)
    assert code == 2 and out == ""
    assert err.startswith("memroute: error: stdin:") and err.count("\n") == 1


def test_augment_injects_when_enabled(run, monkeypatch):
    run("extract", "--store", "--api-key", "alice", stdin=SEED)
    request = {"model": "m", "messages": [{"role": "system", "content": "sys"},
                                          {"role": "user", "content": "Which database for this project?"}]}
    code, out, err = run("augment", "--api-key", "alice", stdin=json.dumps(request))
    assert code == 0 and json.loads(out) == request  # memory is off by default, like the reference
    assert "memory disabled" in err

    monkeypatch.setenv("MEMORY_ENABLED", "true")
    code, out, err = run("augment", "--api-key", "alice", "--explain", stdin=json.dumps(request))
    assert code == 0
    augmented = json.loads(out)
    assert [m["role"] for m in augmented["messages"]] == ["system", "system", "user"]
    assert "Postgres for this project" in augmented["messages"][1]["content"]
    assert "query: Which database for this project?" in err
    # the injected memory counted as an access (written when the command closed the service)
    code, out, _ = run("list", "--api-key", "alice", "--order-by", "last_accessed_at", "--json")
    first = json.loads(out)["data"][0]
    assert code == 0 and first["access_count"] == 1 and first["last_accessed_at"].endswith("Z")
    assert "Postgres" in first["content"]

    code, out, _ = run("augment", "--api-key", "bob", stdin=json.dumps(request))
    assert json.loads(out) == request  # bob has no memories

    code, out, err = run("augment", "--api-key", "alice", "--header", "x-memroute-no-memory: 1",
                         stdin=json.dumps(request))
    assert json.loads(out) == request and "opted out" in err

    code, out, _ = run("augment", "--api-key", "alice", "--provider", "o1", stdin=json.dumps(
        {"messages": [{"role": "user", "content": "database for this project?"}]}))
    assert [m["role"] for m in json.loads(out)["messages"]] == ["user", "user"]


def test_augment_bad_header_is_usage_error(run):
    code, _, err = run("augment", "--api-key", "a", "--header", "nocolon", stdin="{}")
    assert code == 2 and "NAME:VALUE" in err


# --- summarize, compact, prune -------------------------------------------------------------------------

def test_summarize_dry_run_then_apply(run, tmp_path):
    old = import_old(run, tmp_path, [("alice", "alice fact one", 40), ("alice", "alice fact two", 50),
                                     ("alice", "alice recent", 2), ("bob", "bob old", 40)])
    code, out, _ = run("summarize", "--api-key", "alice", "--older-than-days", "30")
    assert code == 0 and out.startswith("dry run: 2 memories") and "nothing changed" in out
    assert "Summary of 2 memories older than 30 days" in out
    assert {m["id"] for m in export(run, "alice")} == set(old[:3])

    code, out, _ = run("summarize", "--api-key", "alice", "--older-than-days", "30", "--apply", "--json")
    report = json.loads(out)
    assert report["deleted"] == 2 and not report["dry_run"] and len(report["summary_ids"]) == 1
    alice = {m["id"]: m for m in export(run, "alice")}
    assert set(alice) == {old[2], report["summary_ids"][0]}
    assert sorted(alice[report["summary_ids"][0]]["metadata"]["replaces"]) == sorted(old[:2])
    assert [m["id"] for m in export(run, "bob")] == [old[3]]


def test_compact_dry_run_by_default(run, tmp_path):
    import_old(run, tmp_path, [("alice", f"memory {i} " + "x" * 40, 10 - i) for i in range(4)])
    code, out, _ = run("compact", "--api-key", "alice", "--max-tokens", "20", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["dry_run"] and report["candidate_count"] == 3
    assert len(export(run, "alice")) == 4


def test_prune_with_default_settings_deletes_nothing_however_old(run, tmp_path):
    ids = import_old(run, tmp_path, [("alice", "allergic to peanuts", 800), ("bob", "bob ancient", 3000)])
    code, out, _ = run("prune", "--all-tenants", "--apply")
    assert code == 0 and out.startswith("0 memories deleted") and "deletion by age is off" in out
    assert [m["id"] for m in export(run, "alice")] == [ids[0]] and [m["id"] for m in export(run, "bob")] == [ids[1]]


def test_prune_shows_a_dry_run_unless_applied(run, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMROUTE_DELETE_AFTER_DAYS", "30")  # deletion configured by the operator
    ids = import_old(run, tmp_path, [("alice", "ancient", 40), ("alice", "fresh", 1), ("bob", "bob ancient", 40)])
    code, out, _ = run("prune", "--api-key", "alice")
    assert code == 0 and out.startswith("dry run: 1 memory") and "1 tenant; retention: 1" in out
    assert "--apply" in out and len(export(run, "alice")) == 2
    code, out, _ = run("prune", "--api-key", "alice", "--dry-run")
    assert code == 0 and out.startswith("dry run: 1 memory") and len(export(run, "alice")) == 2
    code, out, _ = run("prune", "--api-key", "alice", "--apply", "--json")
    assert json.loads(out)["deleted"] == 1 and json.loads(out)["tenants"] == 1
    assert [m["id"] for m in export(run, "alice")] == [ids[1]]
    assert [m["id"] for m in export(run, "bob")] == [ids[2]]
    code, out, _ = run("prune", "--all-tenants", "--yes")
    assert out.startswith("1 memory deleted") and export(run, "bob") == []
    code, _, err = run("prune", "--all-tenants", "--yes", "--dry-run")
    assert code == 2 and "contradict" in err


@pytest.mark.parametrize("args", [("summarize",), ("summarize", "--api-key", "a", "--older-than-days", "-1"),
                                  ("compact", "--api-key", "a", "--max-tokens", "x")])
def test_maintenance_usage_errors(run, args):
    assert run(*args)[0] == 2


# --- demo ----------------------------------------------------------------------------------------------

def test_demo_runs_and_leaves_a_searchable_database(run, tmp_path, monkeypatch):
    db = tmp_path / "demo" / "demo.db"
    code, out, err = run("demo", "--db", str(db))
    assert code == 0, err
    assert f"The demo database is {db}" in out
    assert "extracted: [decision/episodic] decision:postgres_for_this_project" in out
    assert "extracted: [likes/factual] likes:python_packaging" in out
    assert "kept: [conversation/episodic] turn:" in out  # the messages themselves
    assert "recommend" not in "".join(line for line in out.splitlines() if "extracted:" in line)
    request = json.loads(out.split("The request that would be sent to the model")[1].split("Explore")[0]
                         .split("\n", 2)[2])
    assert [m["role"] for m in request["messages"]] == ["system", "system", "user"]
    assert "<memroute_memories>" in request["messages"][1]["content"]
    assert "Fly.io for hosting" in request["messages"][1]["content"]
    assert "dark roast coffee" not in request["messages"][1]["content"]  # irrelevant to the question

    monkeypatch.setenv("MEMROUTE_DB", str(db))
    code, out, _ = run("search", "hosting", "--api-key", "demo-user", "--json")
    assert code == 0
    hits = json.loads(out)["memories"]
    assert hits and "Fly.io for hosting" in hits[0]["content"]
    first = {m["key"] for m in export(run, "demo-user")}

    monkeypatch.delenv("MEMROUTE_DB")
    code, out, _ = run("demo", "--db", str(db))  # re-runnable: replaces its own memories
    assert code == 0 and "cleared 11 memories of a previous demo run" in out
    monkeypatch.setenv("MEMROUTE_DB", str(db))
    assert {m["key"] for m in export(run, "demo-user")} == first


def test_demo_default_path_is_in_the_data_dir(run, tmp_path):
    code, out, _ = run("demo")
    assert code == 0
    assert f"database: {(tmp_path / 'data' / 'demo.db').resolve()}" in out


def test_demo_on_the_embedded_default_uses_keyword_and_vector(capsys, monkeypatch, tmp_path):
    # No MEMORY_EMBEDDING_SOURCE override: the shipped static embedding and sqlite-vec, as on a fresh machine.
    try:
        main(["demo", "--db", str(tmp_path / "fresh.db")])
    except SystemExit as exc:
        assert not exc.code
    out = capsys.readouterr().out
    assert "retrieval: strategy hybrid -> hybrid via keyword+vector" in out
    assert "Fly.io for hosting" in out.split("The request that would be sent to the model")[1]
