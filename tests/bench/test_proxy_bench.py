"""Memory proxy benchmark (``pytest -m bench tests/bench/test_proxy_bench.py -s``).

What memroute adds to a chat request, measured in one run against its own baseline: the same requests sent
straight to the same loopback fake upstream, interleaved with the ones sent through memroute, on the embedded
default (SQLite + FTS5, the static embedding, sqlite-vec, hybrid retrieval) with a tenant holding memories that
match every query. Reported: per-request latency p50 / p95 (non-streamed) and time to the first streamed byte,
direct and through memroute, for requests that get memories injected and for opted-out ones (proxy overhead
alone). Results on the project's machine are in docs/performance.md.
"""

from __future__ import annotations

import json
import statistics
import time

import httpx
import pytest

from memroute.bench import synthetic_contents
from tests.servers.proxy_stack import proxy_stack

pytestmark = pytest.mark.bench

TENANT_SIZES = (50, 500)
ROUNDS = 200
QUERIES = ["what does the user think about the billing service?", "marathon training plan",
           "which language for the dashboard", "trip to Lisbon", "database migration decision",
           "code review habits", "how is the data pipeline going", "team offsite plans"]


def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered) * 1000, 3),
            "p95_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1000, 3)}


def _timed(client: httpx.Client, url: str, body: dict, headers: dict, *, first_byte: bool) -> float:
    start = time.perf_counter()
    with client.stream("POST", url, json=body, headers=headers) as response:
        iterator = response.iter_raw()
        next(iterator)
        elapsed = time.perf_counter() - start
        for _ in iterator:
            pass
        total = time.perf_counter() - start
    assert response.status_code == 200
    return elapsed if first_byte else total


def _measure(stack, rounds: int) -> dict[str, list[float]]:
    auth = {"authorization": f"Bearer {stack.keys['alice']}"}
    direct_url = stack.upstream.base_url + "/v1/chat/completions"
    proxy_url = stack.openai_url + "/chat/completions"
    cases = {"memory": auth, "opted_out": {**auth, "x-memroute-no-memory": "1"}}
    samples: dict[str, list[float]] = {}
    with httpx.Client(timeout=30) as client:
        for round_number in range(-20, rounds):  # 20 warm-up rounds
            query = f"{QUERIES[round_number % len(QUERIES)]} (request {round_number})"  # never a cached embedding
            for stream in (False, True):
                body = {"model": "gpt-4o", "stream": stream, "messages": [{"role": "user", "content": query}]}
                measured = {"direct": _timed(client, direct_url, body, {}, first_byte=stream)}
                for case, headers in cases.items():
                    measured[case] = _timed(client, proxy_url, body, headers, first_byte=stream)
                if round_number >= 0:
                    for name, value in measured.items():
                        samples.setdefault(f"{'ttfb' if stream else 'request'}.{name}", []).append(value)
    return samples


def _summary(samples: dict[str, list[float]]) -> dict[str, object]:
    report: dict[str, object] = {}
    for kind in ("request", "ttfb"):
        direct = _ms(samples[f"{kind}.direct"])
        section: dict[str, object] = {"direct": direct}
        for case in ("memory", "opted_out"):
            through = _ms(samples[f"{kind}.{case}"])
            section[case] = {**through, "added_p50_ms": round(through["p50_ms"] - direct["p50_ms"], 3),
                             "added_p95_ms": round(through["p95_ms"] - direct["p95_ms"], 3)}
        report[kind] = section
    return report


def test_proxy_added_latency_and_time_to_first_byte(tmp_path):
    with proxy_stack(tmp_path, embedding="auto") as stack:
        tenant = stack.tenants["alice"]
        stack.upstream.reply = "Here is a short answer of about a dozen words for the benchmark run."
        contents = list(synthetic_contents(max(TENANT_SIZES)))
        report: dict[str, object] = {"rounds": ROUNDS, "embedding": "static (auto)", "strategy": "hybrid"}
        stored = 0
        for size in TENANT_SIZES:
            for content in contents[stored:size]:
                stack.mem.add(api_key_id=tenant, content=content)
            stored = size
            stack.mem.flush()
            before = (stack.proxy.stats.injected, stack.proxy.stats.memories_injected)
            samples = _measure(stack, ROUNDS)
            injected = stack.proxy.stats.injected - before[0]
            assert injected >= 2 * ROUNDS  # the memory case really injected on every request
            per_request = (stack.proxy.stats.memories_injected - before[1]) / injected
            report[f"{size}_memories"] = {"memories_injected_per_request": round(per_request, 1), **_summary(samples)}
        print("\nmemory proxy bench:", json.dumps(report, indent=2))
