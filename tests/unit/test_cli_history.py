"""``memroute history`` and ``memroute add --consolidate``, in process, on the embedded default (SQLite, the
static embedding model, sqlite-vec): two tenants, text and ``--json`` output, and errors as one line."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def run(run_cli):
    return run_cli


def _add(run, tenant: str, *args: str) -> dict:
    code, out, err = run("add", "--api-key", tenant, "--json", *args)
    assert code == 0, err
    return json.loads(out)


def test_history_shows_supersede_and_restate_for_its_tenant_only(run):
    lisbon = _add(run, "alice", "--key", "profile:location", "Lives in Lisbon")
    porto = _add(run, "bob", "--key", "profile:location", "Lives in Porto")
    berlin = _add(run, "alice", "--key", "profile:location", "--consolidate", "Lives in Berlin")
    assert berlin["id"] == lisbon["id"] and berlin["content"] == "Lives in Berlin"
    engineer = _add(run, "alice", "Works as a data engineer at Acme")
    restated = _add(run, "alice", "--consolidate", "Works at Acme as a data engineer")
    assert restated["id"] == engineer["id"]

    code, out, _ = run("history", lisbon["id"], "--api-key", "alice")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith(lisbon["id"]) and "profile:location" in lines[0]
    assert "created" in lines[2] and "by cli" in lines[2]
    assert any("superseded" in line and "by cli" in line for line in lines)
    assert "      was:  Lives in Lisbon" in lines and "      now:  Lives in Berlin" in lines

    code, out, _ = run("history", engineer["id"], "--api-key", "alice", "--json")
    report = json.loads(out)
    assert report["recorded"] is True and report["current"]["content"] == "Works at Acme as a data engineer"
    assert [(e["event"], e["actor"]) for e in report["entries"]] == [("created", "cli"), ("updated", "cli")]
    assert report["entries"][1]["old_content"] == "Works as a data engineer at Acme"

    code, _, err = run("history", lisbon["id"], "--api-key", "bob")
    assert code == 1 and err.strip() == f"memroute: error: no memory with id {lisbon['id']}"
    code, out, _ = run("history", porto["id"], "--api-key", "bob", "--json")
    assert [e["new_content"] for e in json.loads(out)["entries"]] == ["Lives in Porto"]


def test_a_deleted_memorys_history_stays_readable(run):
    memory = _add(run, "alice", "Allergic to peanuts")
    assert run("delete", memory["id"], "--api-key", "alice")[0] == 0
    code, out, _ = run("history", memory["id"], "--api-key", "alice")
    assert code == 0 and out.splitlines()[0] == f"{memory['id']}  (deleted)"
    assert "deleted" in out and "was:  Allergic to peanuts" in out
    assert run("history", memory["id"], "--api-key", "bob")[0] == 1


@pytest.mark.parametrize("args", [("history", "not-a-uuid", "--api-key", "alice"), ("history", "--api-key", "alice")])
def test_bad_input_is_one_line_and_a_non_zero_exit(run, args):
    code, _, err = run(*args)
    assert code in (1, 2) and "Traceback" not in err  # click's usage error, or memroute's one-line error
    assert "not a UUID" in err or "Missing argument 'MEMORY_ID'" in err
