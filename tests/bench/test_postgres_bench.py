"""PostgreSQL + pgvector against the embedded default (SQLite + sqlite-vec), in one run on one machine, by the
code behind ``memroute bench --backend postgres`` (:func:`memroute.bench.engine.compare_engines`).

``pytest -m bench tests/bench/test_postgres_bench.py -s``: the full comparison at 10k memories per key
(``MEMROUTE_BENCH_SIZES=10000,100000`` for more): single durable adds, bulk import, keyword / semantic /
hybrid p50 and p95, 8 concurrent writers and hybrid search for one tenant among 1,000, with ratios. The
second test runs the CLI itself at ``--quick`` scale. The figures on the project's machine are in
docs/performance.md. The PostgreSQL server is the tests' embedded one (``fsync = off``: it measures
memroute's path, not the disk).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import memroute
from memroute.bench.engine import compare_engines
from memroute.cli import main
from tests.servers.postgres import PostgresServer

pytestmark = pytest.mark.bench

SIZES = tuple(int(s) for s in os.environ.get("MEMROUTE_BENCH_SIZES", "10000").split(","))


def _engines(server: PostgresServer) -> dict[str, Callable[..., Any]]:
    def sqlite(path: Path, **overrides: Any) -> Any:
        return memroute.open({"embedding": {"source": "static"}, "vectors": {"store": "sqlite-vec"}, **overrides},
                             data_dir=str(path))

    def postgres(path: Path, **overrides: Any) -> Any:
        schema = "bench_" + hashlib.sha1(str(path).encode()).hexdigest()[:10]
        config = {"embedding": {"source": "static"}, "vectors": {"store": "pgvector"},
                  "backends": {"primary": "main", "main": {"type": "postgres", "dsn": server.dsn(), "schema": schema}}}
        return memroute.open({**config, **overrides}, data_dir=str(path))  # (the keyword beats MEMROUTE_DATA_DIR)

    return {"sqlite": sqlite, "postgres": postgres}


@contextmanager
def _quiet() -> Iterator[None]:
    logger = logging.getLogger("psycopg.pool")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@pytest.mark.timeout(7200)
def test_postgres_against_sqlite(postgres_server: PostgresServer) -> None:
    with _quiet():
        report = compare_engines(_engines(postgres_server), baseline="sqlite", sizes=SIZES, single_adds=500,
                                 tenants=1000, per_tenant=20, queries=50, progress=print)
    for name, result in report["engines"].items():
        print(f"\n{name}: {json.dumps(result, indent=1)}")
    ratios = report["ratios"]["postgres"]
    print("\npostgres / sqlite:", json.dumps(ratios, indent=1))
    assert all(value is not None and value > 0 for value in ratios.values()), ratios


@pytest.mark.timeout(1800)
def test_memroute_bench_backend_postgres_quick(postgres_server: PostgresServer, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_EMBEDDING_SOURCE", "static")
    output = tmp_path / "report.json"
    with _quiet():
        try:
            main(["bench", "--backend", "postgres", "--dsn", postgres_server.dsn(), "--quick", "--output",
                  str(output)])
        except SystemExit as exc:
            assert not exc.code, capsys.readouterr().err[-2000:]
    report = json.loads(output.read_text())
    assert set(report["engines"]) == {"sqlite", "postgres"}
    assert report["engines"]["postgres"]["engine"]["vector_store"]["backend"] == "pgvector"
    ratios = report["ratios"]["postgres"]
    assert ratios["single_add_per_s"] > 0 and ratios["hybrid_p50_ms_1000"] > 0
    import psycopg

    with psycopg.connect(postgres_server.dsn()) as raw:  # the bench's schemas are gone
        left = raw.execute("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'memroute_bench_%'").fetchone()[0]
    assert left == 0
