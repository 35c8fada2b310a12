"""Every code block of docs/omniroute-compatibility.md runs as written: ``$ memroute ...`` lines through the CLI,
``curl`` lines against a real ``memroute serve``, Python blocks as they are, TOML and JSON blocks parsed."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from memroute.cli import main
from tests.servers.omniroute_db import build_reference_db

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DOC = Path(__file__).resolve().parents[2] / "docs" / "omniroute-compatibility.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def commands(block: str) -> list[str]:
    """The ``$ `` commands of a console block, continuation lines joined."""
    text = block.replace("\\\n", " ")
    return [line[2:].strip() for line in text.splitlines() if line.startswith("$ ")]


@pytest.fixture
def reference_db(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMORY_EMBEDDING_SOURCE", "none")
    return build_reference_db(tmp_path / "storage.sqlite", per_tenant=100)  # the tests run in tmp_path


def run_cli(command: str) -> None:
    try:
        main(shlex.split(command)[1:])
    except SystemExit as exc:
        assert not exc.code, f"{command!r} exited with {exc.code}"


def test_the_memroute_commands_run(reference_db):
    ran = 0
    for block in blocks("console"):
        for command in commands(block):
            if command.startswith("memroute "):
                run_cli(command)
                ran += 1
    assert ran >= 2


def test_the_curl_commands_run_against_the_server(reference_db, memroute_server):
    ran = 0
    for block in blocks("console"):
        for command in commands(block):
            if not command.startswith("curl "):
                continue
            command = command.replace("http://127.0.0.1:8765", memroute_server.base_url)
            done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60, check=True,
                                  env={**os.environ, "MEMROUTE_ADMIN_KEY": memroute_server.admin})
            body = json.loads(done.stdout)
            assert "error" not in body, body
            ran += 1
    assert ran >= 1


def test_the_python_examples_run(reference_db, capsys):
    for block in blocks("python"):
        exec(compile(block, str(DOC), "exec"), {})
    assert "rows would be carried" in capsys.readouterr().out


def test_the_toml_and_json_examples_parse():
    for block in blocks("toml"):
        tomllib.loads(block)
    for block in blocks("json"):
        json.loads(block)
