"""The CLI, in process: round trips with --json, upsert keeps the id, tenant isolation, FTS syntax in queries,
import/export, and errors as one line on stderr with a non-zero exit (never a traceback)."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def run(run_cli, monkeypatch):
    monkeypatch.setenv("MEMORY_EMBEDDING_SOURCE", "none")  # keyword-only keeps these tests about the CLI
    return run_cli


def test_add_get_update_delete_round_trip(run):
    code, out, _ = run("add", "--api-key", "alice", "--key", "pref:editor", "--json", "Uses Neovim")
    assert code == 0
    memory = json.loads(out)
    assert memory["key"] == "pref:editor" and memory["api_key_id"] == "alice"

    code, out, _ = run("add", "--api-key", "alice", "--key", "pref:editor", "--json", "--metadata", '{"a": 1}',
                       "Uses Helix")
    again = json.loads(out)
    assert again["id"] == memory["id"] and again["content"] == "Uses Helix" and again["metadata"] == {"a": 1}

    assert run("update", "--api-key", "alice", memory["id"], "--content", "Uses Emacs")[0] == 0
    code, out, _ = run("get", "--api-key", "alice", memory["id"], "--json")
    assert json.loads(out)["content"] == "Uses Emacs"
    assert run("delete", "--api-key", "alice", memory["id"])[0] == 0
    code, _, err = run("get", "--api-key", "alice", memory["id"])
    assert code == 1 and err.strip() == f"memroute: error: no memory with id {memory['id']}"


def test_get_update_delete_of_another_tenants_id_is_not_found(run):
    memory = json.loads(run("add", "--api-key", "alice", "--json", "Uses Neovim")[1])
    missing = f"memroute: error: no memory with id {memory['id']}"
    for args in (("get", memory["id"]), ("update", memory["id"], "--content", "hijacked"), ("delete", memory["id"])):
        code, _, err = run(args[0], "--api-key", "bob", *args[1:])
        assert code == 1 and err.strip() == missing, args
    code, out, _ = run("get", "--api-key", "alice", memory["id"], "--json")
    assert code == 0 and json.loads(out)["content"] == "Uses Neovim"
    code, out, _ = run("update", "--api-key", "alice", memory["id"], "--content", "Uses Vim", "--json")
    assert code == 0 and json.loads(out)["content"] == "Uses Vim"


@pytest.mark.parametrize("command", ["get", "update", "delete"])
def test_by_id_commands_require_the_tenant(run, command):
    code, _, err = run(command, "00000000-0000-4000-8000-000000000001")
    assert code == 2 and "--api-key" in err


def test_clear_and_stats_of_one_tenant(run):
    run("add", "--api-key", "alice", "--type", "episodic", "--session", "s1", "one")
    run("add", "--api-key", "alice", "two two two two")
    run("add", "--api-key", "bob", "three")
    code, out, _ = run("stats", "--api-key", "alice", "--json")
    stats = json.loads(out)
    assert code == 0 and stats["total"] == 2 and stats["tokens_used"] == 1 + 4
    assert stats["by_type"] == {"factual": 1, "episodic": 1, "procedural": 0, "semantic": 0}
    code, out, _ = run("clear", "--api-key", "alice", "--session", "s1", "--dry-run", "--json")
    assert code == 0 and json.loads(out)["matched"] == 1 and json.loads(out)["deleted"] == 0
    code, out, _ = run("clear", "--api-key", "alice")
    assert code == 0 and out.strip() == "deleted 2 memories"
    assert json.loads(run("list", "--api-key", "bob", "--json")[1])["total"] == 1


def test_search_never_returns_another_keys_memory_and_survives_fts_syntax(run):
    run("add", "--api-key", "alice", "Prefers TypeScript for the frontend")
    run("add", "--api-key", "bob", "Prefers TypeScript too")
    for query in ['TypeScript', '"TypeScript', 'Type*', 'NEAR(TypeScript', 'AND OR TypeScript', '-', '()":^']:
        code, out, err = run("search", "--api-key", "alice", "--json", query)
        assert code == 0, (query, err)
        preview = json.loads(out)
        assert preview["api_key_id"] == "alice" and "too" not in str(preview["memories"]), query
    code, out, _ = run("search", "--api-key", "alice", "--json", "TypeScript")
    result = json.loads(out)
    assert [m["content"] for m in result["memories"]] == ["Prefers TypeScript for the frontend"]
    assert result["resolution"]["degraded"] is True and result["resolution"]["legs"] == ["keyword"]
    assert result["total_tokens"] == result["memories"][0]["tokens"] and result["budget_max_tokens"] == 2000


def test_list_json_shape_and_filters(run):
    run("add", "--api-key", "alice", "--type", "episodic", "--session", "s1", "one")
    run("add", "--api-key", "alice", "two")
    run("add", "--api-key", "bob", "three")
    _code, out, _ = run("list", "--api-key", "alice", "--json")
    page = json.loads(out)
    assert page["total"] == 2 and page["by_type"] == {"episodic": 1, "factual": 1}
    _code, out, _ = run("list", "--api-key", "alice", "--session", "s1", "--json")
    assert [m["content"] for m in json.loads(out)["data"]] == ["one"]


def test_export_then_import_into_another_database_keeps_ids(run, tmp_path, monkeypatch):
    run("add", "--api-key", "alice", "--key", "k1", "first")
    run("add", "--api-key", "bob", "--key", "k2", "second")
    code, out, _ = run("export", "--all-tenants")
    lines = out.strip().splitlines()
    assert code == 0 and len(lines) == 2
    dump = tmp_path / "dump.jsonl"
    dump.write_text(out, encoding="utf-8")
    monkeypatch.setenv("MEMROUTE_DB", str(tmp_path / "other.db"))
    code, _, err = run("import", "--all-tenants", str(dump))
    assert code == 0 and "imported 2" in err
    code, out, _ = run("export", "--api-key", "alice")
    assert json.loads(out.strip())["id"] == json.loads(lines[0])["id"]


def test_an_all_tenants_export_imports_without_flags_each_line_to_its_own_tenant(run, tmp_path, monkeypatch):
    run("add", "--api-key", "alice", "--key", "k1", "first")
    run("add", "--api-key", "bob", "--key", "k2", "second")
    dump = tmp_path / "backup.jsonl"
    dump.write_text(run("export", "--all-tenants")[1], encoding="utf-8")
    monkeypatch.setenv("MEMROUTE_DB", str(tmp_path / "restored.db"))
    code, _, err = run("import", str(dump))
    assert code == 0 and "imported 2" in err
    for tenant, content in (("alice", "first"), ("bob", "second")):
        page = json.loads(run("list", "--api-key", tenant, "--json")[1])
        assert [m["content"] for m in page["data"]] == [content]


def test_import_without_a_tenant_refuses_a_line_that_names_none(run, tmp_path):
    file = tmp_path / "mixed.jsonl"
    file.write_text(json.dumps({"api_key_id": "alice", "key": "k", "content": "mine"}) + "\n"
                    + json.dumps({"key": "k", "content": "whose?"}) + "\n", encoding="utf-8")
    code, _, err = run("import", str(file))
    assert code == 2 and "line 2: api_key_id: missing" in err and "--api-key" in err
    assert json.loads(run("list", "--api-key", "alice", "--json")[1])["total"] == 0
    code, _, err = run("import", "--api-key", "alice", "--all-tenants", str(file))
    assert code == 2 and "not both" in err


def test_import_of_hand_written_lines_fills_in_ids_and_times(run, tmp_path):
    file = tmp_path / "notes.jsonl"
    file.write_text(json.dumps({"key": "pref:tea", "content": "Drinks green tea"}) + "\n", encoding="utf-8")
    code, _, err = run("import", "--api-key", "alice", str(file))
    assert code == 0 and "imported 1" in err
    memory = json.loads(run("list", "--api-key", "alice", "--json")[1])["data"][0]
    assert memory["content"] == "Drinks green tea" and memory["created_at"] == memory["updated_at"]
    assert run("get", "--api-key", "alice", memory["id"])[0] == 0
    assert json.loads(run("list", "--api-key", "bob", "--json")[1])["total"] == 0


def test_import_is_all_or_nothing_and_names_the_bad_line(run, tmp_path):
    good = run("add", "--api-key", "alice", "--json", "seed")[1]
    bad = tmp_path / "bad.jsonl"
    memory = json.loads(good)
    other = {**memory, "id": "00000000-0000-4000-8000-000000000001", "key": "other"}
    bad.write_text(json.dumps(other) + "\n" + json.dumps({**memory, "type": "opinion"}) + "\n", encoding="utf-8")
    code, _, err = run("import", "--api-key", "alice", str(bad))
    assert code == 2 and "line 2" in err and "Traceback" not in err
    code, out, _ = run("list", "--api-key", "alice", "--json")
    assert json.loads(out)["total"] == 1  # nothing from the bad file was written


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("add", "--api-key", "", "x"), "api_key_id: must not be empty"),
        (("search", "--api-key", "a", "--limit", "0", "x"), "limit"),
        (("list", "--api-key", "a", "--limit", "0"), "limit"),
        (("add", "--api-key", "a", "--metadata", "[1]", "x"), "--metadata: expected a JSON object"),
        (("add", "--api-key", "a", "--metadata", "{nope", "x"), "--metadata: not valid JSON"),
        (("add", "--api-key", "a", "--expires-at", "soon", "x"), "expires_at"),
        (("update", "--api-key", "a", "00000000-0000-4000-8000-000000000001"), "nothing to change"),
        (("get", "--api-key", "a", "some-id"), "id: not a UUID"),
        (("get", "--api-key", "", "00000000-0000-4000-8000-000000000001"), "api_key_id: must not be empty"),
    ],
)
def test_bad_input_is_one_line_on_stderr(run, args, message):
    code, _, err = run(*args)
    assert code != 0
    assert message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("args", [("export",), ("export", "--api-key", "a", "--all-tenants"), ("prune",),
                                  ("prune", "--api-key", "a", "--all-tenants")])
def test_every_tenant_is_never_a_default(run, args):
    code, _, err = run(*args)
    assert code == 2 and "give --api-key KEY (one tenant) or --all-tenants (every tenant)" in err


def test_invalid_config_file_names_the_field(run, tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text("[memory]\nmax_tokens = 99999\n", encoding="utf-8")
    code, _, err = run("--config", str(config), "list", "--api-key", "a")
    assert code == 2 and "memory.max_tokens: must be in [0, 16000]" in err


def test_health_and_status_json(run):
    code, out, _ = run("health", "--json")
    health = json.loads(out)
    assert code == 0 and health["backends"][0]["ok"] is True and health["backends"][0]["role"] == "primary"
    code, out, _ = run("status", "--json")
    status = json.loads(out)
    assert status["keyword"]["available"] is True and status["vector_store"]["backend"] == "none"


def test_status_without_json_is_one_readable_line_a_part(run, tmp_path):
    config = tmp_path / "memroute.toml"
    config.write_text(f"""
[memory]
enabled = true
[backends]
primary = "main"
fallbacks = ["remote"]
[backends.main]
type = "sqlite"
path = "{tmp_path / 'main.db'}"
[backends.remote]
type = "http"
base_url = "http://127.0.0.1:9"
allow_private = true
timeout = 0.5
""", encoding="utf-8")
    assert run("--config", str(config), "add", "--api-key", "alice", "owed to the fallback")[0] == 0
    code, out, _ = run("--config", str(config), "status")
    assert code == 0 and "{" not in out and '": ' not in out  # no JSON fragments
    lines = dict(line.split(None, 1) if not line.startswith("  ") else ("  " + line.split(None, 1)[0],
                                                                        line.split(None, 1)[1])
                 for line in out.splitlines())
    assert lines["memory"].startswith("enabled, strategy hybrid, max_tokens 2000")
    assert lines["backends"] == "primary main, fallbacks remote"
    assert lines["  main"].startswith("sqlite primary, ok (") and "breaker closed" in lines["  main"]
    assert lines["  remote"].startswith("http fallback, FAILING: ")
    assert lines["keyword"].endswith("available") and lines["vectors"].startswith("none")
    assert lines["outbox"].startswith("depth 1, owed to remote 1, oldest ") and lines["outbox"].endswith(
        "0 dead letters")


def test_unwritable_data_dir_is_a_config_error(run, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory", encoding="utf-8")
    monkeypatch.setenv("MEMROUTE_DATA_DIR", str(blocker / "data"))
    code, _, err = run("list", "--api-key", "a")
    assert code == 2 and "data_dir" in err and "Traceback" not in err
