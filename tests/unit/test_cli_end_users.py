"""``memroute keys create --end-users``, ``memroute users`` and ``memroute forget`` (issue 30): an app key's end
users listed and one erased with a report; bad input is one line on stderr with a non-zero exit."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def run(run_cli, monkeypatch):
    monkeypatch.setenv("MEMORY_EMBEDDING_SOURCE", "none")  # keyword-only keeps these tests about the CLI
    return run_cli


def test_app_key_users_and_forget(run):
    code, out, _ = run("keys", "create", "--name", "shop", "--tenant", "shop", "--end-users", "--json")
    assert code == 0 and json.loads(out)["key"]["endUsers"] is True and json.loads(out)["key"]["tenant"] == "shop"
    assert "end-users" in run("keys", "list")[1]
    for owner in ("shop/u1", "shop/u1", "shop/u2", "cafe/u1", "shop"):
        assert run("add", "--api-key", owner, f"{owner} likes tea {len(owner)}")[0] == 0
    run("add", "--api-key", "shop/u1", "a second fact of u1")
    code, out, _ = run("users", "--tenant", "shop", "--json")
    assert code == 0 and json.loads(out) == {"tenant": "shop", "data": ["u1", "u2"]}
    code, out, _ = run("forget", "--tenant", "shop", "--user", "u1", "--dry-run")
    assert code == 0 and "2 memories of shop/u1 would be deleted" in out
    code, out, _ = run("forget", "--tenant", "shop", "--user", "u1", "--json")
    report = json.loads(out)
    assert code == 0 and report["deleted"] == 2 and report["complete"] is True and report["api_key_id"] == "shop/u1"
    assert run("users", "--tenant", "shop")[1].split() == ["u2"]
    for owner, total in (("shop/u1", 0), ("shop/u2", 1), ("cafe/u1", 1), ("shop", 1)):
        assert json.loads(run("stats", "--api-key", owner, "--json")[1])["total"] == total


@pytest.mark.parametrize("args, field", [
    (("forget", "--tenant", "shop", "--user", "a/b"), "endUser"),
    (("forget", "--tenant", "a/b", "--user", "u1"), "tenant"),
    (("keys", "create", "--name", "x", "--tenant", "shop/u1"), "tenant"),
    (("keys", "create", "--name", "x", "--tenant", "shop", "--end-users", "--admin"), "scopes"),
])
def test_bad_input_is_one_line(run, args, field):
    code, _, err = run(*args)
    assert code != 0 and err.startswith(f"memroute: error: {field}") and len(err.strip().splitlines()) == 1, err
