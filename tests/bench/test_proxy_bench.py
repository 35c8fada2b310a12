"""Memory proxy benchmark (``pytest -m bench tests/bench/test_proxy_bench.py -s``; ``memroute bench --proxy``).

What memroute adds to a chat request, measured in one run against its own baseline: the same requests sent
straight to the same loopback fake upstream, interleaved with the ones sent through the real ``memroute serve``
(its own process) on the embedded default (SQLite + FTS5, the static embedding, sqlite-vec, hybrid retrieval),
with a tenant holding hundreds to thousands of memories that match every query and about 55-65 of them
injected per request. Reported: latency p50 / p95 (non-streamed) and time to the first streamed byte, direct and
through memroute, with memories (a new message, and the same one repeated as a tool loop does) and opted out (the
proxy's own cost), as milliseconds added and p50 ratios, plus
memroute's CPU time per request, its own timing of the memory step (``Server-Timing``) and the machine's cold-call
factor. Results on the project's machine are in docs/performance.md.
"""

from __future__ import annotations

import json

import pytest

from memroute.bench.proxy import run_proxy_bench

pytestmark = pytest.mark.bench


def test_proxy_added_latency_and_time_to_first_byte():
    report = run_proxy_bench(sizes=(500, 2000), rounds=200)
    print("\nmemory proxy bench:", json.dumps(report, indent=2))
    for size in (500, 2000):
        section = report[f"{size}_memories"]
        assert section["memories_injected_per_request"]["min"] >= 10  # every request really got memories
        for kind in ("request", "ttfb"):
            for case in ("memory", "repeated", "opted_out"):
                assert section[kind][case]["ratio_p50"] >= 1.0 or section[kind][case]["added_p50_ms"] < 1.0
                # memroute's own timing of its memory step (Server-Timing) and what the request added beside it
                assert section[kind][case]["memory_step"]["p50_ms"] >= 0
                assert "added_beside_memory_step_p50_ms" in section[kind][case]
    assert report["cold_call_factor"]["factor"] > 0
    assert all(isinstance(report[f"{size}_memories"]["target_met_beside_memory_step"], bool) for size in (500, 2000))
