"""The TypeScript client (clients/typescript, issue 30): its committed OpenAPI document is the server's current
one, its generated types are what openapi-typescript makes of that document, and its own test suite (node:test)
passes against a real ``memroute serve`` on loopback. Node 20 and npm install the client's few dev packages from
the npm registry the first time (``npm ci``, into clients/typescript/node_modules)."""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers.memroute_server import MemrouteServer

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "typescript"


def _export_module():
    spec = importlib.util.spec_from_file_location("export_openapi", ROOT / "scripts" / "export_openapi.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _npm(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    npm = shutil.which("npm")
    assert npm, "npm (Node 20) is needed for the TypeScript client's tests"
    return subprocess.run([npm, *args], cwd=CLIENT, env={**os.environ, **(env or {})}, capture_output=True,
                          text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def node_modules() -> Iterator[Path]:
    """The client's packages, installed once (``.ci/run`` installs them first; a file lock keeps two pytest-xdist
    workers from running ``npm ci`` in the same folder at once)."""
    lock = CLIENT / "package-lock.json"
    installed = CLIENT / "node_modules" / ".package-lock.json"
    with open(CLIENT / ".npm-install.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
            done = _npm("ci", "--no-audit", "--no-fund")
            assert done.returncode == 0, done.stdout + done.stderr
        yield CLIENT / "node_modules"


def test_the_committed_openapi_document_is_the_servers():
    export = _export_module()
    current = export.render(export.openapi_document())
    committed = (CLIENT / "openapi.json").read_text(encoding="utf-8")
    assert json.loads(committed) == json.loads(current), (
        "clients/typescript/openapi.json is out of date: run `python scripts/export_openapi.py`, then "
        "`npm run generate` in clients/typescript")


def test_the_generated_types_match_the_document(node_modules):
    done = _npm("run", "check-generated")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_client_suite_passes_against_a_real_server(node_modules, tmp_path):
    with MemrouteServer(tmp_path, config={"embedding": {"source": "static"}}) as server:
        env = {"MEMROUTE_URL": server.base_url, "MEMROUTE_ADMIN_KEY": server.admin,
               "MEMROUTE_KEY_A": server.tenant_a, "MEMROUTE_KEY_B": server.tenant_b}
        done = _npm("test", env=env)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "# fail 0" in done.stdout and "# pass 5" in done.stdout, done.stdout[-3000:]
