"""The drift check finds and repairs a fallback that differs from the primary (issue 16, item 2)."""

from __future__ import annotations

import json

import attrs

import memroute
from memroute.cli import main
from memroute.models import NewMemory


def _config(tmp_path):
    return {"data_dir": str(tmp_path / "data"), "embedding": {"source": "none"}, "vectors": {"store": "none"},
            "manager": {"health_interval_s": 0},
            "backends": {"primary": "main", "fallbacks": ["spare"],
                         "main": {"type": "sqlite", "path": str(tmp_path / "main.db")},
                         "spare": {"type": "sqlite", "path": str(tmp_path / "spare.db")}}}


def _drift(mem):
    """Tamper with the fallback behind memroute's back: one memory gone, one stale, one extra."""
    a, b, _ = (mem.add(api_key_id="t", key=f"k{i}", content=f"fact {i}") for i in range(3))
    assert mem.flush(10)
    spare = mem._manager.fallbacks[0]  # internals: the test edits the fallback directly
    spare.delete(a.id)
    spare.put(attrs.evolve(b, content="an old version"))
    spare.create(NewMemory(api_key_id="t", key="ghost", content="deleted on the primary long ago"))


def test_verify_finds_and_repairs_drift(tmp_path):
    with memroute.open(_config(tmp_path), use_env=False) as mem:
        assert mem.verify().ok
        _drift(mem)
        report = mem.verify()
        [spare] = report.replicas
        assert (spare.missing, spare.stale, spare.extra, spare.repaired) == (1, 1, 1, 0) and not report.ok
        repaired = mem.verify(repair=True)
        assert repaired.replicas[0].repaired == 3 and repaired.flushed is True
        again = mem.verify()
        assert again.ok and again.memories == 3


def test_verify_cli_exit_status_and_json(tmp_path, capsys):
    config = tmp_path / "memroute.toml"
    conf = _config(tmp_path)
    config.write_text(
        f'data_dir = "{conf["data_dir"]}"\n[embedding]\nsource = "none"\n[vectors]\nstore = "none"\n'
        '[backends]\nprimary = "main"\nfallbacks = ["spare"]\n'
        f'[backends.main]\ntype = "sqlite"\npath = "{tmp_path / "main.db"}"\n'
        f'[backends.spare]\ntype = "sqlite"\npath = "{tmp_path / "spare.db"}"\n', encoding="utf-8")
    with memroute.open(str(config), use_env=False) as mem:
        _drift(mem)

    def run(*args: str) -> int:
        try:
            return int(main(["--config", str(config), *args]) or 0)  # ctx.exit(n) returns n here
        except SystemExit as exc:
            return int(exc.code or 0)

    assert run("verify", "--json") == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["replicas"][0]["missing"] == 1
    assert run("verify", "--repair") == 0
    assert "3 repair entries journaled" in capsys.readouterr().out
    assert run("verify") == 0 and "in step" in capsys.readouterr().out
