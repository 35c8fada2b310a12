"""Shared test configuration: every test runs with its own data directory and no config from the host."""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.servers.memroute_server"]  # the `memroute_server` fixture (real server) everywhere


@pytest.fixture(autouse=True)
def _isolated_environment(tmp_path, monkeypatch):
    """Keep tests off the user's real data dir and config, and off any MEMORY_* the host has set."""
    import os

    for var in list(os.environ):
        if var.startswith(("MEMORY_", "MEMROUTE_")) or var in ("VECTOR_STORE_DISABLE_VEC",):
            monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MEMROUTE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    from memroute.plugins import reset_plugin_manager

    reset_plugin_manager()
    yield
    reset_plugin_manager()


@pytest.fixture
def run_cli(capsys, monkeypatch):
    """``memroute`` in process: ``run_cli(*args, stdin=None)`` -> ``(exit code, stdout, stderr)``."""
    from memroute.cli import main

    def invoke(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
        if stdin is not None:
            import io

            monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


# A session fixture (one server per worker), and a fresh schema on it dropped after each test that asks for one.
from tests.servers.postgres import postgres_server, schema  # noqa: E402,F401
