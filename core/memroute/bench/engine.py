"""``memroute bench``: speed and size of the configured engine, with ratios against a baseline measured in the
same run (never absolute thresholds in unit tests).

Measures single durable add/s (embedding included), bulk import/s, keyword / semantic / hybrid search latency
(p50, p95) at N memories for one key, bytes on disk per memory (also with many small tenants), and a numpy
brute-force KNN over the very same vectors as the baseline for the vector legs.
"""

from __future__ import annotations

import json
import os
import platform
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from memroute.config.serialization import memory_to_dict, to_jsonable
from memroute.models import Memory, MemoryType, new_memory_id, utcnow

__all__ = ["compare_engines", "concurrent_adds", "drop_postgres_schemas", "machine_description",
           "one_of_many_tenants", "run_bench", "synthetic_contents"]

_SUBJECTS = ["the billing service", "the search page", "a trail run", "the autumn menu", "the thesis draft",
             "a Postgres migration", "the Kubernetes cluster", "a sourdough starter", "the quarterly report",
             "a trip to Lisbon", "the React dashboard", "a marathon plan", "the garden beds", "a jazz concert",
             "the mobile app", "a team offsite", "the data pipeline", "a birthday dinner", "the CI runners"]
_VERBS = ["prefers", "decided to change", "always reviews", "is worried about", "wants to improve",
          "finished working on", "asked about", "never skips", "scheduled time for", "dislikes"]
_DETAILS = ["on Mondays", "before lunch", "with Sam", "for the next sprint", "after the holidays", "every week",
            "using Python", "with TypeScript", "in the morning", "at the weekend", "for the client demo",
            "with oat milk", "in Berlin", "after the review", "before the deadline"]
_QUERIES = ["what does the user think about the billing service?", "marathon training plan",
            "which language for the dashboard", "trip to Lisbon", "database migration decision",
            "weekend cooking routine", "what happens before the deadline", "code review habits",
            "how is the data pipeline going", "team offsite plans"]


def synthetic_contents(count: int, seed: int = 1) -> Iterator[str]:
    """``count`` varied memory-like sentences (deterministic)."""
    rng = random.Random(seed)
    for index in range(count):
        yield (f"{rng.choice(['User', 'She', 'He', 'They'])} {rng.choice(_VERBS)} {rng.choice(_SUBJECTS)} "
               f"{rng.choice(_DETAILS)} (note {index})")


def machine_description() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
    }


def _jsonl(api_key_id: str, contents: Iterator[str]) -> Iterator[str]:
    now = utcnow()
    for index, content in enumerate(contents):
        memory = Memory(id=new_memory_id(), api_key_id=api_key_id, type=MemoryType.FACTUAL, key=f"bench:{index}",
                        content=content, created_at=now, updated_at=now)
        yield json.dumps(memory_to_dict(memory))


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1000, 3),
    }


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_bench(
    open_service: Callable[..., Any],
    *,
    sizes: tuple[int, ...] = (10_000, 100_000),
    single_adds: int = 2_000,
    tenants: int = 1_000,
    per_tenant: int = 20,
    queries: int = 50,
    progress: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    """Run every measurement with services made by ``open_service(data_dir, **overrides)`` (the configured
    engine, on a fresh data directory each time; ``overrides`` are settings overrides such as
    ``embedding={"source": "none"}``). Only the public service API is used."""
    report: dict[str, Any] = {"machine": machine_description(), "results": {}}
    with tempfile.TemporaryDirectory(prefix="memroute-bench-") as tmp:
        root = Path(tmp)

        progress(f"single durable adds ({single_adds})")
        with open_service(root / "adds") as mem:
            status = to_jsonable(mem.status())
            report["engine"] = {k: status[k] for k in ("keyword", "embedding", "vector_store", "fusion")}
            _warm_up(mem)
            contents = list(synthetic_contents(single_adds, seed=2))
            started = time.perf_counter()
            for content in contents:
                mem.add(api_key_id="bench", content=content)
            mem.flush()
            elapsed = time.perf_counter() - started
        report["results"]["single_add_per_s"] = round(single_adds / elapsed, 1)

        for size in sizes:
            progress(f"bulk import and search at {size} memories for one key")
            report["results"][str(size)] = _measure_size(open_service, root / f"n{size}", size, queries)

        progress(f"{tenants} tenants x {per_tenant} memories")
        path = root / "tenants"
        with open_service(path) as mem:
            lines: list[str] = []
            for tenant in range(tenants):
                lines.extend(_jsonl(f"tenant-{tenant}", synthetic_contents(per_tenant, seed=tenant)))
            mem.import_jsonl(lines)
            mem.flush()
        report["results"]["many_tenants"] = {
            "tenants": tenants, "per_tenant": per_tenant,
            "bytes_per_memory": round(_dir_bytes(path) / (tenants * per_tenant), 1),
        }
    return report


def _warm_up(mem: Any) -> None:
    """Load the embedding model and open every connection before anything is timed."""
    mem.add(api_key_id="warm-up", content="warm up")
    mem.search("warm up", api_key_id="warm-up")
    mem.flush()


def _measure_size(open_service: Callable[..., Any], path: Path, size: int, queries: int) -> dict[str, Any]:
    lines = list(_jsonl("bench", synthetic_contents(size, seed=size)))
    result: dict[str, Any] = {}
    with open_service(path) as mem:
        _warm_up(mem)
        started = time.perf_counter()
        mem.import_jsonl(lines)
        stored = time.perf_counter() - started
        mem.flush()
        total = time.perf_counter() - started
        result["bulk_import_per_s"] = round(size / stored, 1)
        result["bulk_import_with_embedding_per_s"] = round(size / total, 1)
        rng = random.Random(3)
        texts = [rng.choice(_QUERIES) + f" {rng.randint(0, 999)}" for _ in range(queries)]
        for strategy in ("semantic", "hybrid"):
            result[strategy] = _time_searches(mem, texts, strategy)
        result["brute_force_knn"] = _brute_force(mem, texts)
        result["bytes_per_memory"] = round(_dir_bytes(path) / size, 1)
    # The keyword leg alone: the same data opened with embedding off, so hybrid degrades to keyword only.
    with open_service(path, embedding={"source": "none"}) as mem:
        mem.search("warm up", api_key_id="bench", strategy="hybrid", limit=10)
        result["keyword"] = _time_searches(mem, texts, "hybrid")
    for strategy in ("semantic", "hybrid"):
        baseline = result["brute_force_knn"]["p50_ms"]
        if baseline:
            result[f"{strategy}_vs_brute_force_p50"] = round(result[strategy]["p50_ms"] / baseline, 2)
    return result


def _time_searches(mem: Any, texts: list[str], strategy: str) -> dict[str, float]:
    samples = []
    for text in texts:
        began = time.perf_counter()
        mem.search(text, api_key_id="bench", strategy=strategy, limit=10)
        samples.append(time.perf_counter() - began)
    return _percentiles(samples)


def _brute_force(mem: Any, texts: list[str]) -> dict[str, float]:
    """The baseline: embed the query, then exact top-k by a numpy matrix product over the same vectors the
    vector store holds (every memory of the key, re-embedded here into one matrix by a second instance of
    the configured embedding source, built from the same settings)."""
    from memroute.embedding import build_embedding_source

    if mem.settings.embedding.source == "none":
        return {"p50_ms": 0.0, "p95_ms": 0.0}
    embedder, _resolved = build_embedding_source(mem.settings.embedding, mem.plugins, mem.data_dir)
    if embedder is None:
        return {"p50_ms": 0.0, "p95_ms": 0.0}
    try:
        return _knn_samples(embedder, [m.content for m in mem.export("bench")], texts)
    finally:
        embedder.close()


def _knn_samples(embedder: Any, contents: list[str], texts: list[str]) -> dict[str, float]:
    matrix = np.vstack([embedder.embed_batch(contents[i:i + 2048]) for i in range(0, len(contents), 2048)])
    samples = []
    for text in texts:
        began = time.perf_counter()
        query = embedder.embed_query(text)
        scores = matrix @ query
        top = np.argpartition(-scores, 30)[:30]
        top[np.argsort(-scores[top])]
        samples.append(time.perf_counter() - began)
    return _percentiles(samples)


# --- engines compared in one run (``memroute bench --backend postgres``; tests/bench/test_postgres_bench.py) ----

def concurrent_adds(open_service: Callable[..., Any], path: Path, writers: int = 8, each: int = 100) -> float:
    """Adds per second with ``writers`` threads adding through one service at once (embedding included)."""
    with open_service(path) as mem:
        _warm_up(mem)
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


def one_of_many_tenants(open_service: Callable[..., Any], path: Path, tenants: int = 1000, per_tenant: int = 20,
                        searches: int = 100) -> dict[str, Any]:
    """Hybrid search p50 / p95 for one random tenant among ``tenants`` of ``per_tenant`` memories each."""
    lines = [line for tenant in range(tenants)
             for line in _jsonl(f"tenant-{tenant}", synthetic_contents(per_tenant, seed=tenant))]
    with open_service(path) as mem:
        mem.import_jsonl(lines)
        mem.flush()
        rng = random.Random(5)
        samples = []
        for _ in range(searches):
            tenant = f"tenant-{rng.randrange(tenants)}"
            began = time.perf_counter()
            mem.search(rng.choice(_QUERIES), api_key_id=tenant, strategy="hybrid", limit=10)
            samples.append(time.perf_counter() - began)
    return {"tenants": tenants, "per_tenant": per_tenant, "hybrid": _percentiles(samples)}


def _ratios(engine: dict[str, Any], baseline: dict[str, Any], sizes: tuple[int, ...]) -> dict[str, float | None]:
    def ratio(a: Any, b: Any) -> float | None:
        return round(a / b, 2) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None

    out = {"single_add_per_s": ratio(engine["single_add_per_s"], baseline["single_add_per_s"]),
           "concurrent_writers_add_per_s": ratio(engine["concurrent_writers_add_per_s"],
                                                 baseline["concurrent_writers_add_per_s"])}
    for size in sizes:
        ours, theirs = engine[str(size)], baseline[str(size)]
        for rate in ("bulk_import_per_s", "bulk_import_with_embedding_per_s"):
            out[f"{rate}_{size}"] = ratio(ours[rate], theirs[rate])
        for leg in ("keyword", "semantic", "hybrid"):
            for stat in ("p50_ms", "p95_ms"):
                out[f"{leg}_{stat}_{size}"] = ratio(ours[leg][stat], theirs[leg][stat])
    for stat in ("p50_ms", "p95_ms"):
        out[f"hybrid_{stat}_one_of_{engine['one_of_many_tenants']['tenants']}_tenants"] = ratio(
            engine["one_of_many_tenants"]["hybrid"][stat], baseline["one_of_many_tenants"]["hybrid"][stat])
    return out


def _prefixed(progress: Callable[[str], None], name: str) -> Callable[[str], None]:
    return lambda message: progress(f"{name}: {message}")


def compare_engines(engines: dict[str, Callable[..., Any]], *, baseline: str, sizes: tuple[int, ...] = (10_000,),
                    single_adds: int = 500, tenants: int = 1_000, per_tenant: int = 20, queries: int = 50,
                    writers: int = 8, progress: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """:func:`run_bench` for every engine in one run, plus ``writers`` concurrent writers and hybrid search for
    one tenant among ``tenants``; ``ratios`` divides each engine's figures by ``baseline``'s (rates: above 1
    is faster; latencies ``*_ms``: below 1 is faster)."""
    report: dict[str, Any] = {"machine": machine_description(), "baseline": baseline, "engines": {}, "ratios": {}}
    with tempfile.TemporaryDirectory(prefix="memroute-compare-") as tmp:
        for name, open_service in engines.items():
            started = time.perf_counter()
            progress(f"{name}: the single-engine measurements")
            bench = run_bench(open_service, sizes=sizes, single_adds=single_adds, tenants=tenants,
                              per_tenant=per_tenant, queries=queries, progress=_prefixed(progress, name))
            result = bench["results"]
            progress(f"{name}: {writers} concurrent writers")
            result["concurrent_writers"] = writers
            result["concurrent_writers_add_per_s"] = concurrent_adds(open_service, Path(tmp) / f"{name}-writers",
                                                                     writers=writers)
            progress(f"{name}: one tenant of {tenants}")
            result["one_of_many_tenants"] = one_of_many_tenants(open_service, Path(tmp) / f"{name}-tenants",
                                                                tenants=tenants, per_tenant=per_tenant)
            result["engine"] = bench.get("engine")
            result["seconds"] = round(time.perf_counter() - started, 1)
            report["engines"][name] = result
    base = report["engines"][baseline]
    report["ratios"] = {name: _ratios(result, base, sizes) for name, result in report["engines"].items()
                        if name != baseline}
    return report


def drop_postgres_schemas(dsn: str, schemas: list[str]) -> None:
    """Drop the schemas a PostgreSQL bench created (psycopg comes with ``memroute[postgres]``)."""
    if not schemas:
        return
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
