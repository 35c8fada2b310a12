"""The HTTP server against in-process calls, in one run (``memroute bench --http``): ratios, not timings."""

from __future__ import annotations

import json

import pytest

from memroute.bench.http import run_http_bench

pytestmark = pytest.mark.bench


def test_http_search_and_add_against_in_process():
    report = run_http_bench(memories=2000, searches=300, adds=200)
    print(json.dumps(report, indent=2))
    search, add = report["search"], report["add"]
    # Judged on the interleaved run (in-process, httpx, raw in turn: the same calls under one machine state);
    # the back-to-back loops are reported beside it (docs/performance.md, "The machine": the cold-call factor).
    paced = search["interleaved"]
    assert search["target_met"], (
        f"HTTP search p50 {paced['http']['p50_ms']} ms (httpx) > budget {paced['budget_ms']} ms "
        f"(in-process {paced['in_process']['p50_ms']} ms); raw client {paced['raw_client']['p50_ms']} ms; "
        f"back to back: {search['http']['p50_ms']} ms against {search['budget_ms']} ms")
    # The writers run twice, with httpx and with a raw keep-alive socket client (docs/performance.md). 3x needs
    # the machine to allow it: from CPU per add in the server and the client, the run computes the highest ratio
    # any concurrency could reach (ceiling); where that is below 3x, the httpx writers must come within 75 % of
    # theirs. The raw writers are reported, not asserted: they show the concurrent path's open problem (8 raw
    # writers complete fewer adds a second than one).
    ceiling = add["ceiling"]["ratio_if_one_writer_never_waited"]
    light = add["raw_client"]
    assert add["target_met"] or (not add["target_possible_here"]
                                 and add["ratio_concurrent_vs_one"] >= 0.75 * ceiling), (
        f"8 writers reach {add['ratio_concurrent_vs_one']}x (httpx) / {light['ratio_concurrent_vs_one']}x (raw) "
        f"one writer's rate; this machine allows {ceiling}x")
