"""PostgreSQL + pgvector against the embedded default (SQLite + sqlite-vec), in one run on one machine
(``pytest -m bench tests/bench/test_postgres_bench.py -s``; ``MEMROUTE_BENCH_SIZES=10000,100000`` for more).

Both engines go through the public service with the same static embeddings and the same synthetic data
(:func:`memroute.bench.run_bench`: single durable adds, bulk import, keyword / semantic / hybrid p50 and p95 at
N memories for one key, against a numpy brute-force KNN measured in the same run), plus 8 concurrent writers
and hybrid search for one tenant among 1,000. The figures on the project's machine are in docs/performance.md.
The PostgreSQL server is the tests' embedded one (``fsync = off``: it measures memroute's path, not the disk).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import memroute
from memroute.bench import run_bench, synthetic_contents
from tests.servers.postgres import PostgresServer

pytestmark = pytest.mark.bench

SIZES = tuple(int(s) for s in os.environ.get("MEMROUTE_BENCH_SIZES", "10000").split(","))
QUERIES = ["what does the user think about the billing service?", "marathon training plan",
           "which language for the dashboard", "trip to Lisbon", "database migration decision"]


def _engines(server: PostgresServer) -> dict[str, Callable[..., Any]]:
    def sqlite(path: Path, **overrides: Any) -> Any:
        return memroute.open({"data_dir": str(path), "embedding": {"source": "static"},
                              "vectors": {"store": "sqlite-vec"}, **overrides})

    def postgres(path: Path, **overrides: Any) -> Any:
        schema = "bench_" + hashlib.sha1(str(path).encode()).hexdigest()[:10]
        config = {"data_dir": str(path), "embedding": {"source": "static"}, "vectors": {"store": "pgvector"},
                  "backends": {"primary": "main", "main": {"type": "postgres", "dsn": server.dsn(), "schema": schema}}}
        return memroute.open({**config, **overrides})

    return {"sqlite": sqlite, "postgres": postgres}


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered) * 1000, 2),
            "p95_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1000, 2)}


def _concurrent_adds(open_service: Callable[..., Any], path: Path, writers: int = 8, each: int = 100) -> float:
    with open_service(path) as mem:
        mem.add(api_key_id="warm-up", content="warm up")
        barrier = threading.Barrier(writers + 1)

        def work(worker: int) -> None:
            barrier.wait()
            for content in synthetic_contents(each, seed=100 + worker):
                mem.add(api_key_id=f"writer-{worker}", content=content)

        threads = [threading.Thread(target=work, args=(w,)) for w in range(writers)]
        for thread in threads:
            thread.start()
        barrier.wait()
        started = time.perf_counter()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
        mem.flush()
    return round(writers * each / elapsed, 1)


def _many_tenants_search(open_service: Callable[..., Any], path: Path, tenants: int = 1000,
                         per_tenant: int = 20) -> dict[str, Any]:
    from memroute.models import Memory, new_memory_id, utcnow
    from memroute.serialization import memory_to_dict

    now = utcnow()
    lines = [json.dumps(memory_to_dict(Memory(id=new_memory_id(), api_key_id=f"tenant-{t}", key=f"k{i}",
                                              content=content, created_at=now, updated_at=now)))
             for t in range(tenants) for i, content in enumerate(synthetic_contents(per_tenant, seed=t))]
    with open_service(path) as mem:
        mem.import_jsonl(lines)
        mem.flush()
        rng = random.Random(5)
        samples = []
        for _ in range(100):
            tenant = f"tenant-{rng.randrange(tenants)}"
            began = time.perf_counter()
            mem.search(rng.choice(QUERIES), api_key_id=tenant, strategy="hybrid", limit=10)
            samples.append(time.perf_counter() - began)
    return {"tenants": tenants, "per_tenant": per_tenant, "hybrid": _percentiles(samples)}


@contextmanager
def _quiet() -> Iterator[None]:
    import logging

    logger = logging.getLogger("psycopg.pool")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def test_postgres_against_sqlite(postgres_server: PostgresServer, tmp_path: Path) -> None:
    report: dict[str, Any] = {}
    with _quiet():
        for name, open_service in _engines(postgres_server).items():
            started = time.perf_counter()
            result = run_bench(open_service, sizes=SIZES, single_adds=500, tenants=1000, per_tenant=20,
                               queries=50)["results"]
            result["concurrent_8_writers_add_per_s"] = _concurrent_adds(open_service, tmp_path / f"{name}-conc")
            result["one_of_1000_tenants"] = _many_tenants_search(open_service, tmp_path / f"{name}-tenants")
            result["seconds"] = round(time.perf_counter() - started, 1)
            report[name] = result
            print(f"\n{name}: {json.dumps(result, indent=1)}")
    sqlite, postgres = report["sqlite"], report["postgres"]
    ratios = {"single_add": round(postgres["single_add_per_s"] / sqlite["single_add_per_s"], 2),
              "concurrent_add": round(postgres["concurrent_8_writers_add_per_s"]
                                      / sqlite["concurrent_8_writers_add_per_s"], 2)}
    for size in SIZES:
        for leg in ("keyword", "semantic", "hybrid"):
            ratios[f"{leg}_p50_{size}"] = round(postgres[str(size)][leg]["p50_ms"]
                                                / sqlite[str(size)][leg]["p50_ms"], 2)
    ratios["hybrid_p50_1000_tenants"] = round(postgres["one_of_1000_tenants"]["hybrid"]["p50_ms"]
                                              / sqlite["one_of_1000_tenants"]["hybrid"]["p50_ms"], 2)
    print("\npostgres / sqlite:", json.dumps(ratios, indent=1))
    assert all(value > 0 for value in ratios.values())
