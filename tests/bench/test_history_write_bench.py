"""A single durable add with its history entry in the add's own transaction against the same add with the entry
written in a second step, in one run, on SQLite and on PostgreSQL (``pytest -m bench
tests/bench/test_history_write_bench.py -s``; figures in docs/performance.md). Printed, not asserted: timings on a
shared machine are noisy."""

from __future__ import annotations

import json

import pytest

import memroute
from memroute.bench.history_write import run_history_write_bench
from tests.servers.postgres import PostgresServer, fresh_schema

pytestmark = pytest.mark.bench


def test_single_adds_with_history_in_the_write_against_a_second_step(tmp_path):
    def open_service(path):
        return memroute.open({}, data_dir=str(path), embedding={"source": "none"}, manager={"health_interval_s": 0})

    report = run_history_write_bench(open_service, tmp_path, adds=2000)
    print(json.dumps(report, indent=2))
    assert report["recorded"] == {"in_transaction": True, "second_step": True}
    assert report["in_transaction_vs_second_step_p50"] > 0


def test_single_adds_on_postgres_with_history_in_the_write_against_a_second_step(
        tmp_path, postgres_server: PostgresServer):
    """The tests' embedded server runs with ``fsync = off``: this measures memroute's statements and round trips,
    not the disk (a real disk makes the second step's extra commit dearer)."""
    schemas = []

    def open_service(path):
        schemas.append(fresh_schema(postgres_server))
        return memroute.open({"backends": {"primary": "main", "main": {
            "type": "postgres", "dsn": postgres_server.dsn(), "schema": schemas[-1]}}}, data_dir=str(path),
            embedding={"source": "none"}, manager={"health_interval_s": 0})

    try:
        report = run_history_write_bench(open_service, tmp_path, adds=1000)
    finally:
        for schema in schemas:
            postgres_server.admin(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE', "memroute")
    print(json.dumps(report, indent=2))
    assert report["recorded"] == {"in_transaction": True, "second_step": True}
    assert report["in_transaction_vs_second_step_p50"] > 0
