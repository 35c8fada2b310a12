"""``memroute bench --async``: the async API's throughput against the sync API from threads, in one run, as
ratios; and how late the event loop wakes while memroute calls run (a loop-lag probe).

For searches and for durable adds, on one service with ``memories`` stored for two tenants:

* ``sync_1``: one thread calling the sync service in turn (the baseline);
* ``sync_N``: N threads sharing the sync service;
* ``async_1``: one task awaiting :class:`~memroute.aio.AsyncMemroute` calls in turn;
* ``async_N``: N tasks on one event loop.

Every phase gets its own query texts and contents, so no phase is served by another's embedding cache. The
probe sleeps 1 ms in a loop on the event loop during the async phases and records how late each wake-up
was: that is the time the loop could not run (it waited for the GIL held by the worker threads, or for
its own work).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from memroute.aio import DEFAULT_MAX_WORKERS, AsyncMemroute
from memroute.bench import _QUERIES, machine_description, synthetic_contents
from memroute.models import Memory, MemoryType, new_memory_id, utcnow
from memroute.serialization import memory_to_dict

__all__ = ["LagProbe", "run_async_bench"]

TENANTS = ("bench-a", "bench-b")


class LagProbe:
    """How late the event loop wakes from a ``tick`` sleep, sampled until :meth:`stop`."""

    def __init__(self, tick: float = 0.001) -> None:
        self.tick = tick
        self.samples: list[float] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> LagProbe:
        self._task = asyncio.ensure_future(self._run())
        return self

    async def _run(self) -> None:
        while not self._stop.is_set():
            before = time.perf_counter()
            await asyncio.sleep(self.tick)
            self.samples.append(max(0.0, time.perf_counter() - before - self.tick))

    async def stop(self) -> dict[str, float]:
        self._stop.set()
        if self._task is not None:
            await self._task
        ordered = sorted(self.samples) or [0.0]
        return {"max_ms": round(ordered[-1] * 1000, 2),
                "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 2),
                "p50_ms": round(statistics.median(ordered) * 1000, 2), "samples": len(self.samples)}


def _phase_texts(phase: str, count: int) -> list[str]:
    """Texts of the same kind for every phase (the phase's name stays out of them: as a keyword it would
    change what a search finds), distinct across phases (no embedding-cache hits)."""
    rng = random.Random(phase)
    return [f"{rng.choice(_QUERIES)} {rng.randint(10**5, 10**6)}" for _ in range(count)]


def _sync_rate(calls: list[Callable[[], Any]], threads: int) -> float:
    started = time.perf_counter()
    if threads == 1:
        for call in calls:
            call()
    else:
        with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as pool:
            for future in [pool.submit(call) for call in calls]:
                future.result()
    return len(calls) / (time.perf_counter() - started)


async def _async_rate(calls: list[Callable[[], Awaitable[Any]]], tasks: int) -> tuple[float, dict[str, float]]:
    queue = list(reversed(calls))

    async def worker() -> None:
        while queue:
            await queue.pop()()

    probe = LagProbe().start()
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(tasks)))
    rate = len(calls) / (time.perf_counter() - started)
    return rate, await probe.stop()


def _seed_lines(memories: int) -> list[str]:
    now = utcnow()
    lines = []
    for index, content in enumerate(synthetic_contents(memories, seed=7)):
        memory = Memory(id=new_memory_id(), api_key_id=TENANTS[index % 2], type=MemoryType.FACTUAL,
                        key=f"seed:{index}", content=content, created_at=now, updated_at=now)
        lines.append(json.dumps(memory_to_dict(memory)))
    return lines


def run_async_bench(
    open_service: Callable[..., Any],
    *,
    memories: int = 2000,
    operations: int = 320,
    concurrency: int = 16,
    max_workers: int = DEFAULT_MAX_WORKERS,
    strategy: str = "hybrid",
    rounds: int = 2,
    lag_workers: tuple[int, ...] = (1, 2, DEFAULT_MAX_WORKERS),
    progress: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    """Measure search and add throughput, sync from threads against async from tasks (1 and
    ``concurrency`` of each), with a service made by ``open_service(data_dir)``; ``max_workers`` sizes the
    async API's pool. The four phases of each kind run interleaved, ``rounds`` times (alternating which
    mode goes first), and the best rate of each is kept (a shared machine's noise only slows a phase
    down). Ratios are ``async_N / sync_N``, ``async_1 / sync_1`` and ``async_N / async_1``; the loop lag
    is the worst seen in the async phases.

    ``loop_lag_50_searches`` is the issue's scenario, for each pool size in ``lag_workers``: 50 concurrent
    searches from one loop, three trials, the median of each trial's worst and 99th-percentile lag; and
    ``idle``, the probe on a loop with nothing else to do for a second (the machine's own share)."""
    n = concurrency
    report: dict[str, Any] = {
        "machine": machine_description(),
        "settings": {"memories": memories, "operations": operations, "concurrency": n,
                     "max_workers": max_workers, "strategy": strategy, "rounds": rounds},
    }
    with tempfile.TemporaryDirectory(prefix="memroute-bench-async-") as tmp:
        mem = open_service(Path(tmp) / "data")
        try:
            progress(f"seeding {memories} memories for two tenants")
            mem.import_jsonl(_seed_lines(memories))
            mem.flush()
            # Models, connections and the vector index's backfill, before anything is timed.
            for text in _phase_texts("warm-up", 32):
                mem.search(text, api_key_id=TENANTS[0], strategy=strategy, limit=10)
                mem.add(api_key_id=TENANTS[1], content=text, key=f"warm:{text}")
            mem.flush()
            for kind in ("search", "add"):
                report[kind] = _measure(mem, kind, operations, n, max_workers, strategy, rounds, progress)
                mem.flush()
            # The baseline: the same probe on an idle loop (what the machine's own scheduling costs).
            report["loop_lag_50_searches"] = {"idle": asyncio.run(_idle_lag(1.0))}
            for workers in lag_workers:
                progress(f"loop lag: 50 concurrent searches, max_workers={workers}")
                trials = [asyncio.run(_lag_trial(mem, workers, strategy, f"lag-{workers}-{trial}"))
                          for trial in range(3)]
                report["loop_lag_50_searches"][f"max_workers_{workers}"] = {
                    "max_ms": round(statistics.median(t["max_ms"] for t in trials), 2),
                    "p99_ms": round(statistics.median(t["p99_ms"] for t in trials), 2),
                    "searches_per_s": round(statistics.median(t["per_s"] for t in trials), 1),
                }
        finally:
            mem.close()
    return report


def _calls(mem: Any, kind: str, texts: list[str], strategy: str) -> list[Callable[[], Any]]:
    if kind == "search":
        return [functools.partial(mem.search, t, api_key_id=TENANTS[i % 2], strategy=strategy, limit=10)
                for i, t in enumerate(texts)]
    return [functools.partial(mem.add, api_key_id=TENANTS[i % 2], content=t, key=f"bench:{t}")
            for i, t in enumerate(texts)]


def _measure(mem: Any, kind: str, operations: int, n: int, max_workers: int, strategy: str, rounds: int,
             progress: Callable[[str], None]) -> dict[str, Any]:
    rates: dict[str, float] = {}
    lags: dict[str, dict[str, float]] = {}
    for round_ in range(rounds):
        # Odd rounds run async first: a shared machine's load drifts, and no mode should always go first.
        modes = ("sync", "async") if round_ % 2 == 0 else ("async", "sync")
        for workers in (1, n):
            for mode in modes:
                name = f"{mode}_{workers}"
                progress(f"{kind}: {name} (round {round_ + 1})")
                texts = _phase_texts(f"{kind}-{name}-{round_}", operations)
                if mode == "sync":
                    rate = _sync_rate(_calls(mem, kind, texts, strategy), workers)
                else:
                    rate, lag = asyncio.run(_async_phase(mem, kind, texts, strategy, workers, max_workers))
                    if lag["max_ms"] >= lags.get(name, {}).get("max_ms", -1.0):
                        lags[name] = lag
                rates[name] = max(rates.get(name, 0.0), rate)
    figures: dict[str, Any] = {f"{name}_per_s": round(rate, 1) for name, rate in rates.items()}
    figures[f"async_{n}_vs_sync_{n}"] = round(rates[f"async_{n}"] / rates[f"sync_{n}"], 2)
    figures["async_1_vs_sync_1"] = round(rates["async_1"] / rates["sync_1"], 2)
    figures[f"async_{n}_vs_async_1"] = round(rates[f"async_{n}"] / rates["async_1"], 2)
    figures["loop_lag"] = {name: lag for name, lag in lags.items()}
    return figures


async def _async_phase(mem: Any, kind: str, texts: list[str], strategy: str, tasks: int,
                       max_workers: int) -> tuple[float, dict[str, float]]:
    async with AsyncMemroute(mem, max_workers=max_workers, close_service=False) as amem:
        calls = _calls(amem, kind, texts, strategy)
        return await _async_rate(calls, tasks)


async def _lag_trial(mem: Any, workers: int, strategy: str, phase: str) -> dict[str, float]:
    async with AsyncMemroute(mem, max_workers=workers, close_service=False) as amem:
        texts = _phase_texts(phase, 50)
        probe = LagProbe().start()
        started = time.perf_counter()
        await asyncio.gather(*(amem.search(t, api_key_id=TENANTS[i % 2], strategy=strategy, limit=10)
                               for i, t in enumerate(texts)))
        per_s = len(texts) / (time.perf_counter() - started)
        return {**await probe.stop(), "per_s": per_s}


async def _idle_lag(seconds: float) -> dict[str, float]:
    probe = LagProbe().start()
    await asyncio.sleep(seconds)
    return await probe.stop()
