"""The HTTP server against in-process calls, in one run (``memroute bench --http``): ratios, not timings."""

from __future__ import annotations

import json

import pytest

from memroute.server.bench import run_http_bench

pytestmark = pytest.mark.bench


def test_http_search_and_add_against_in_process():
    report = run_http_bench(memories=2000, searches=60, adds=200)
    print(json.dumps(report, indent=2))
    search, add = report["search"], report["add"]
    assert search["target_met"], f"HTTP search p50 {search['http']['p50_ms']} ms > budget {search['budget_ms']} ms"
    assert add["target_met"], f"8 writers reach only {add['ratio_concurrent_vs_one']}x one writer's rate"
