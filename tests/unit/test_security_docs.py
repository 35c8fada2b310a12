"""docs/security.md runs as written: its ``memroute.toml`` block loads into the settings it describes, its
``memroute keys limits`` commands run against a real deployment, and every ``[server]`` guard it names exists."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import attrs

from memroute.cli import main
from memroute.config.settings import ServerSettings, load_settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_the_toml_block_sets_the_fair_use_defaults(tmp_path):
    (block,) = _blocks("toml")
    path = tmp_path / "memroute.toml"
    path.write_text(block, encoding="utf-8")
    server = load_settings(path, use_env=False).server
    assert (server.requests_per_minute, server.concurrent_requests) == (6000, 16)


def test_the_commands_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MEMORY_EMBEDDING_SOURCE", "none")
    config = tmp_path / "memroute.toml"
    config.write_text(f'data_dir = "{tmp_path / "data"}"\n', encoding="utf-8")

    def run(*args: str) -> str:
        try:
            main(["--config", str(config), *args])
        except SystemExit as exc:
            assert not exc.code, capsys.readouterr()
        return capsys.readouterr().out

    key_id = json.loads(run("keys", "create", "--name", "app", "--json"))["key"]["id"]
    (block,) = _blocks("console")
    # The block creates its key in the shell (`KEY_ID=$(memroute keys create ...)`); here the key made above
    # stands in for it, and each `memroute keys limits` line runs in process.
    outputs = [run(*shlex.split(line.removeprefix("$ memroute ").replace('"$KEY_ID"', key_id)))
               for line in block.splitlines() if line.startswith("$ memroute ")]
    assert len(outputs) == 3
    assert json.loads(outputs[1])["own"] == {"requestsPerMinute": 600, "concurrentRequests": 4}


def test_every_server_guard_named_exists():
    text = DOC.read_text(encoding="utf-8")
    named = set(re.findall(r"`([a-z_]+_(?:s|bytes|depth|minute|requests))`", text))
    fields = {field.name for field in attrs.fields(ServerSettings)}
    assert {"max_json_depth", "header_timeout_s", "body_timeout_s", "requests_per_minute"} <= named
    assert named - {"max_content_chars", "max_metadata_bytes", "max_metadata_depth"} <= fields
