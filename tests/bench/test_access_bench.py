"""What access tracking costs ``augment``: the same augments with and without recording, interleaved in one
run on the real SQLite backend (the background writer running every 50 ms, harsher than the 1 s default).
A ratio of medians, never a timing: recording is a dict update under a lock on the request path."""

from __future__ import annotations

import json
import statistics
import time

import pytest

from memroute.service import Memroute
from memroute.testing.fakes import HashingEmbeddingSource
from memroute.testing.numpy_store import NumpyVectorStore

pytestmark = pytest.mark.bench

ROUNDS = 300
MAX_RATIO = 1.25


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 3)


def test_augment_with_access_recording_against_without(tmp_path):
    config = {"memory": {"enabled": True}, "data_dir": str(tmp_path),
              "backends": {"primary": "main", "main": {"type": "sqlite", "path": str(tmp_path / "m.db")}},
              "manager": {"health_interval_s": 0, "access_flush_interval_s": 0.05}}
    with Memroute.open(config, embedder=HashingEmbeddingSource(64), vector_store=NumpyVectorStore()) as mem:
        for i in range(200):
            mem.add(api_key_id="bench", content=f"fact number {i} about project {i % 17} and tool {i % 5}",
                    key=f"k{i}")
        mem.flush()
        request = {"messages": [{"role": "user", "content": "Which tool for project 3?"}]}
        recorded: list[float] = []
        plain: list[float] = []
        for round_ in range(ROUNDS):
            for record in ((True, False) if round_ % 2 else (False, True)):
                started = time.perf_counter()
                mem.explain_augment(request, api_key_id="bench", record_access=record)
                (recorded if record else plain).append(time.perf_counter() - started)
        mem.flush()
        counts = mem._manager.access_stats()
        top = mem.list(api_key_id="bench", order_by="last_accessed_at", limit=1).data[0]
    ratio = statistics.median(recorded) / statistics.median(plain)
    report = {"rounds": ROUNDS, "with_recording_p50_ms": _median_ms(recorded),
              "without_recording_p50_ms": _median_ms(plain), "ratio": round(ratio, 3), "max_ratio": MAX_RATIO,
              "access_stats": counts, "most_recent_access_count": top.access_count}
    print(json.dumps(report, indent=2))
    assert top.access_count == ROUNDS, "every recorded augment must be counted once"
    assert counts["failed_batches"] == 0 and counts["dropped"] == 0
    assert ratio <= MAX_RATIO, f"recording access made augment {ratio:.2f}x slower (budget {MAX_RATIO}x)"
