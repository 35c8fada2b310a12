"""The async API against the sync API from threads, in one run (``memroute bench --async``): ratios, not
timings; and the event loop's lag with small and large pools."""

from __future__ import annotations

import json

import pytest

from memroute.aio import IN_PROCESS_WORKERS
from memroute.bench_async import run_async_bench
from memroute.service import Memroute

pytestmark = pytest.mark.bench


def test_async_throughput_against_sync_threads_and_the_loop_lag(tmp_path):
    report = run_async_bench(lambda path: Memroute.open(data_dir=str(path)), memories=1000, operations=160,
                             rounds=2, lag_workers=(None, 8))
    print(json.dumps(report, indent=2))
    for kind in ("search", "add"):
        figures = report[kind]
        # The async layer is a hop into a pool: it must cost little against threads doing the same calls.
        assert figures["async_1_vs_sync_1"] >= 0.6, figures
        assert figures["async_16_vs_sync_16"] >= 0.6, figures
    lag = report["loop_lag_50_searches"]
    assert report["settings"]["pool"] == lag["max_workers_auto"]["pool"] == IN_PROCESS_WORKERS  # the SQLite stack
    for name in ("auto", "auto_handoff_0ms", "8", "8_handoff_0ms"):
        figures = lag[f"max_workers_{name}"]
        assert figures["samples"] > 0 and figures["idle_samples"] > 0, figures
        assert figures["over_idle_p99_ms"] == round(max(0.0, figures["p99_ms"] - figures["idle_p99_ms"]), 2)
    # Fewer threads competing for the GIL: the sized pool never lags (much) worse than eight workers.
    assert lag["max_workers_auto"]["p99_ms"] <= lag["max_workers_8"]["p99_ms"] + 10, lag


def test_the_cli_runs_the_async_bench(tmp_path):
    from click.testing import CliRunner

    from memroute.cli import cli

    result = CliRunner().invoke(cli, ["bench", "--quick", "--async", "--async-workers", "2",
                                      "--output", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["async"]["settings"]["max_workers"] == 2
    assert {"async_16_vs_sync_16", "async_1_vs_sync_1"} <= set(report["async"]["search"])
