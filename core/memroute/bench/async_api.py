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
import gc
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from memroute.aio import DEFAULT_MAX_WORKERS, AsyncMemroute, auto_workers, default_handoff
from memroute.bench.engine import _QUERIES, machine_description, synthetic_contents
from memroute.config.serialization import memory_to_dict
from memroute.models import Memory, MemoryType, new_memory_id, utcnow
from memroute.retrieval import gil

__all__ = ["LAG_TARGET_MS", "LagProbe", "lag_summary", "loop_lag_report", "run_async_bench"]

TENANTS = ("bench-a", "bench-b")


class LagProbe:
    """How late the event loop wakes from a ``tick`` sleep, sampled until :meth:`stop`.

    Two attributions go with the lag (both measured, not inferred): for each sample, how long the loop's own
    thread waited for a CPU in that time (Linux ``/proc/thread-self/schedstat``: other processes' load on a
    shared machine, not memroute), and every garbage collection that ran meanwhile, on any thread
    (``gc.callbacks``; a collection holds the GIL)."""

    def __init__(self, tick: float = 0.001) -> None:
        self.tick = tick
        self.samples: list[float] = []
        self.cpu_waits: list[float] = []
        """Per sample: seconds the loop's thread spent runnable but not running (``[]`` off Linux)."""
        self.gc_pauses: list[tuple[int, float]] = []
        """``(generation, seconds)`` of each collection while the probe ran."""
        self._gc_started = 0.0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> LagProbe:
        gc.callbacks.append(self._on_gc)
        self._task = asyncio.ensure_future(self._run())
        return self

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.gc_pauses.append((int(info.get("generation", -1)), time.perf_counter() - self._gc_started))

    async def _run(self) -> None:
        schedstat = _open_schedstat()
        try:
            while not self._stop.is_set():
                waited = _runqueue_seconds(schedstat)
                before = time.perf_counter()
                await asyncio.sleep(self.tick)
                self.samples.append(max(0.0, time.perf_counter() - before - self.tick))
                if schedstat is not None:
                    self.cpu_waits.append(max(0.0, _runqueue_seconds(schedstat) - waited))
        finally:
            if schedstat is not None:
                os.close(schedstat)

    async def stop(self) -> dict[str, Any]:
        self._stop.set()
        if self._task is not None:
            await self._task
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        return self.summary()

    def summary(self) -> dict[str, Any]:
        return lag_summary(self.samples, self.cpu_waits, self.gc_pauses)


def _open_schedstat() -> int | None:
    """The loop thread's scheduler statistics, opened on the loop's thread (``None`` where there are none)."""
    try:
        return os.open("/proc/thread-self/schedstat", os.O_RDONLY)
    except OSError:
        return None


def _runqueue_seconds(fd: int | None) -> float:
    """Seconds this thread has been runnable but waiting for a CPU, in total (the schedstat's second field)."""
    if fd is None:
        return 0.0
    try:
        return int(os.pread(fd, 128, 0).split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def lag_summary(samples: list[float], cpu_waits: list[float] | None = None,
                gc_pauses: list[tuple[int, float]] | None = None) -> dict[str, Any]:
    """Worst, 99th-percentile and median lag (ms) of probe samples (seconds), and how many there were.

    With ``cpu_waits`` (one per sample): ``cpu_wait_max_ms`` (the longest the loop's thread waited for a CPU
    within one sample) and ``beyond_cpu_wait_*`` (each sample's lag minus that wait: what is left when the
    machine's other load is taken out, i.e. the GIL held by another thread or the loop's own work). With
    ``gc_pauses``: how many collections ran and the longest (``gc_max_ms``)."""
    summary: dict[str, Any] = _percentiles(samples)
    summary["samples"] = len(samples)
    if cpu_waits and len(cpu_waits) == len(samples):
        summary["cpu_wait_max_ms"] = round(max(cpu_waits) * 1000, 2)
        beyond = _percentiles([max(0.0, lag - wait) for lag, wait in zip(samples, cpu_waits, strict=True)])
        summary.update({f"beyond_cpu_wait_{key}": value for key, value in beyond.items()})
    if gc_pauses is not None:
        summary["gc_collections"] = len(gc_pauses)
        summary["gc_max_ms"] = round(max((seconds for _, seconds in gc_pauses), default=0.0) * 1000, 2)
    return summary


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples) or [0.0]
    return {"max_ms": round(ordered[-1] * 1000, 2),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 2),
            "p50_ms": round(statistics.median(ordered) * 1000, 2)}


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
    max_workers: int | None = None,
    strategy: str = "hybrid",
    rounds: int = 2,
    lag_workers: tuple[int | None, ...] = (None, 1, 2, 4, DEFAULT_MAX_WORKERS),
    add_calls: int = 100,
    first_call: bool = True,
    progress: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    """Measure search and add throughput, sync from threads against async from tasks (1 and
    ``concurrency`` of each), with a service made by ``open_service(data_dir)``; ``max_workers`` sizes the
    async API's pool. The four phases of each kind run interleaved, ``rounds`` times (alternating which
    mode goes first), and the best rate of each is kept (a shared machine's noise only slows a phase
    down). Ratios are ``async_N / sync_N``, ``async_1 / sync_1`` and ``async_N / async_1``; the loop lag
    is the worst seen in the async phases.

    ``loop_lag_50_searches`` is the issue's scenario: see :func:`loop_lag_report`."""
    n = concurrency
    report: dict[str, Any] = {
        "machine": machine_description(),
        "settings": {"memories": memories, "operations": operations, "concurrency": n,
                     "max_workers": max_workers, "strategy": strategy, "rounds": rounds},
        "load_average": {"start": _load_average()},
    }
    with tempfile.TemporaryDirectory(prefix="memroute-bench-async-") as tmp:
        mem = open_service(Path(tmp) / "data")
        report["settings"]["pool"] = max_workers or auto_workers(mem)
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
            report["loop_lag_50_searches"] = loop_lag_report(mem, lag_workers, strategy, progress)
            report["loop_lag_adds"] = loop_lag_report(mem, lag_workers, strategy, progress, kind="add",
                                                      calls=add_calls)
            mem.flush()
        finally:
            mem.close()
        if first_call:
            progress("first calls, in a fresh process")
            report["first_call"] = first_call_report(open_service, Path(tmp) / "first", memories, strategy)
    report["load_average"]["end"] = _load_average()
    return report


def _load_average() -> list[float] | None:
    """The machine's 1, 5 and 15 minute load averages (other processes' share of the CPUs), where known."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None


def _calls(mem: Any, kind: str, texts: list[str], strategy: str) -> list[Callable[[], Any]]:
    if kind == "search":
        return [functools.partial(mem.search, t, api_key_id=TENANTS[i % 2], strategy=strategy, limit=10)
                for i, t in enumerate(texts)]
    return [functools.partial(mem.add, api_key_id=TENANTS[i % 2], content=t, key=f"bench:{t}")
            for i, t in enumerate(texts)]


def _measure(mem: Any, kind: str, operations: int, n: int, max_workers: int | None, strategy: str,
             rounds: int, progress: Callable[[str], None]) -> dict[str, Any]:
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
                       max_workers: int | None) -> tuple[float, dict[str, float]]:
    async with AsyncMemroute(mem, max_workers=max_workers, close_service=False) as amem:
        calls = _calls(amem, kind, texts, strategy)
        _collect_set_up_garbage()
        return await _async_rate(calls, tasks)


def _collect_set_up_garbage() -> None:
    """A full collection before a measured phase: each phase builds a new event loop and pool, and without
    this the collection their garbage sets off lands inside the measurement (memroute's calls themselves
    rarely trigger one: docs/python-api.md). A collection the calls do set off is still measured."""
    gc.collect()


LAG_TARGET_MS = 5.0
"""The issue's target: the event loop is never blocked longer than this by a memroute call."""


def loop_lag_report(mem: Any, lag_workers: tuple[int | None, ...], strategy: str,
                    progress: Callable[[str], None] = lambda message: None, *, trials: int = 3,
                    idle_seconds: float = 0.3, kind: str = "search", calls: int = 50,
                    gil_handoffs: tuple[float, ...] = (gil.DEFAULT_PAUSE, 0.0)) -> dict[str, Any]:
    """The loop-lag probe while memroute calls run, for each pool size in ``lag_workers`` (``None``: the size
    :func:`~memroute.aio.auto_workers` picks for ``mem``) and each ``gil_handoff`` in ``gil_handoffs``
    (entry ``max_workers_<n>_handoff_<ms>ms``, ``0ms`` being no handoff; ``default`` says whether it is
    what ``gil_handoff=None`` picks for that pool, :func:`~memroute.aio.default_handoff`), ``trials`` times
    each.

    ``kind="search"``: ``calls`` concurrent hybrid searches from one loop (the issue's scenario);
    ``kind="add"``: ``calls`` durable adds awaited one after the other by one task (each wakes the indexer,
    whose thread embeds and stores vectors meanwhile).

    Each trial first runs the same probe on the idle loop for ``idle_seconds`` (the machine's own share
    right then: other processes' load delays the loop's wake-ups as well), then during the calls; the
    samples of all trials are pooled. Per entry: the worst, p99 and median lag during the calls, with its
    attributions (:func:`lag_summary`: the loop thread's CPU wait, garbage collections), the same for the
    idle loop (``idle_*``), ``over_idle_*`` (the busy figure minus the idle one), the calls per second (median
    trial), the handoff used, and whether the worst and the p99 lag stay within :data:`LAG_TARGET_MS`: as
    measured, over idle, and beyond the CPU wait."""
    report: dict[str, Any] = {"target_ms": LAG_TARGET_MS, "trials": trials, "kind": kind, "calls": calls}
    for workers, handoff in itertools.product(lag_workers, gil_handoffs):
        name = ("auto" if workers is None else str(workers)) + f"_handoff_{handoff * 1000:g}ms"
        progress(f"loop lag: {calls} {kind}s, max_workers={name}")
        busy, idle = LagProbe(), LagProbe()
        rates: list[float] = []
        pool = 0
        for trial in range(trials):
            result = asyncio.run(_lag_trial(mem, workers, handoff, strategy, f"lag-{kind}-{name}-{trial}",
                                            idle_seconds, kind, calls))
            for probe, measured in ((busy, result["busy"]), (idle, result["idle"])):
                probe.samples += measured.samples
                probe.cpu_waits += measured.cpu_waits
                probe.gc_pauses += measured.gc_pauses
            rates.append(result["per_s"])
            pool = result["max_workers"]
        during, baseline = busy.summary(), idle.summary()
        over_max = round(max(0.0, during["max_ms"] - baseline["max_ms"]), 2)
        over_p99 = round(max(0.0, during["p99_ms"] - baseline["p99_ms"]), 2)
        within = {"max": during["max_ms"] <= LAG_TARGET_MS, "p99": during["p99_ms"] <= LAG_TARGET_MS,
                  "max_over_idle": over_max <= LAG_TARGET_MS, "p99_over_idle": over_p99 <= LAG_TARGET_MS}
        if "beyond_cpu_wait_max_ms" in during:
            within["max_beyond_cpu_wait"] = during["beyond_cpu_wait_max_ms"] <= LAG_TARGET_MS
            within["p99_beyond_cpu_wait"] = during["beyond_cpu_wait_p99_ms"] <= LAG_TARGET_MS
        report[f"max_workers_{name}"] = {
            **during, **{f"idle_{key}": value for key, value in baseline.items()},
            "over_idle_max_ms": over_max, "over_idle_p99_ms": over_p99,
            "pool": pool, "gil_handoff_ms": handoff * 1000, "default": default_handoff(pool) == handoff,
            ("searches_per_s" if kind == "search" else "adds_per_s"): round(statistics.median(rates), 1),
            "within_target": within,
        }
    return report


async def _lag_trial(mem: Any, workers: int | None, handoff: float, strategy: str, phase: str,
                     idle_seconds: float, kind: str, calls: int) -> dict[str, Any]:
    idle = LagProbe().start()
    await asyncio.sleep(idle_seconds)
    await idle.stop()
    async with AsyncMemroute(mem, max_workers=workers, close_service=False, gil_handoff=handoff) as amem:
        texts = _phase_texts(phase, calls)
        _collect_set_up_garbage()
        probe = LagProbe().start()
        started = time.perf_counter()
        if kind == "search":
            await asyncio.gather(*(amem.search(t, api_key_id=TENANTS[i % 2], strategy=strategy, limit=10)
                                   for i, t in enumerate(texts)))
        else:
            for i, t in enumerate(texts):
                await amem.add(api_key_id=TENANTS[i % 2], content=t, key=f"lag:{t}")
        per_s = len(texts) / (time.perf_counter() - started)
        await probe.stop()
        return {"busy": probe, "idle": idle, "per_s": per_s, "max_workers": amem.max_workers}


def first_call_report(open_service: Callable[..., Any], data_dir: Path, memories: int, strategy: str,
                      *, timeout: float = 120.0) -> dict[str, Any]:
    """The loop lag of a **fresh process's** first calls, which the rest of this benchmark (one warm process)
    never sees: ``await memroute.open_async(...)`` on a store of ``memories`` (seeded here first, in this
    process), then the first add (and its indexing: the probe runs until ``flush`` returns), the first
    search, then ten more of each (steady state, for comparison). Each stage reports :func:`lag_summary`
    and its wall time (``ms``); ``gc`` what a full garbage collection costs that process, and after
    ``gc.freeze()``."""
    mem = open_service(data_dir)
    try:
        mem.import_jsonl(_seed_lines(memories))
        mem.flush()
    finally:
        mem.close()
    code = f"from memroute.bench.async_api import _first_call_main; _first_call_main({str(data_dir)!r}, {strategy!r})"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"the fresh process did not finish within {timeout:g} s"}
    if done.returncode != 0:
        return {"error": (done.stderr or done.stdout).strip()[-2000:]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _full_collection_figures() -> dict[str, Any]:
    """What a full (generation 2) collection costs this fresh process once memroute is open: it holds the GIL
    for all of it. Then the same after ``gc.freeze()`` (what an application may choose to do after opening;
    this process ends right after, so freezing here changes no other figure)."""
    def timed() -> float:
        started = time.perf_counter()
        gc.collect()
        return round((time.perf_counter() - started) * 1000, 2)

    figures: dict[str, Any] = {"tracked_objects": len(gc.get_objects()), "full_collection_ms": timed()}
    gc.freeze()
    figures["full_collection_after_freeze_ms"] = timed()
    return figures


def _first_call_main(data_dir: str, strategy: str) -> None:
    """The fresh process of :func:`first_call_report`: prints one JSON line."""
    import memroute

    async def stage(report: dict[str, Any], name: str, call: Callable[[], Awaitable[Any]]) -> Any:
        probe = LagProbe().start()
        started = time.perf_counter()
        result = await call()
        report[name] = {**await probe.stop(), "ms": round((time.perf_counter() - started) * 1000, 1)}
        return result

    async def main() -> dict[str, Any]:
        report: dict[str, Any] = {}
        backends = {"primary": "main", "fallbacks": [], "instances": {"main": {"type": "sqlite", "options": {}}}}
        mem = await stage(report, "open", lambda: memroute.open_async(data_dir=data_dir, backends=backends))
        try:
            async def add_and_index(text: str) -> None:
                await mem.add(api_key_id=TENANTS[0], content=text, key=f"first:{text}")
                await mem.flush(30)

            texts = _phase_texts("first-call", 22)
            await stage(report, "first_add", lambda: add_and_index(texts[0]))
            await stage(report, "first_search", lambda: mem.search(texts[1], api_key_id=TENANTS[0],
                                                                   strategy=strategy, limit=10))

            async def adds() -> None:
                for text in texts[2:12]:
                    await mem.add(api_key_id=TENANTS[1], content=text, key=f"first:{text}")
                await mem.flush(30)

            async def searches() -> None:
                for text in texts[12:]:
                    await mem.search(text, api_key_id=TENANTS[1], strategy=strategy, limit=10)

            await stage(report, "next_10_adds", adds)
            await stage(report, "next_10_searches", searches)
            report["gc"] = _full_collection_figures()
        finally:
            await mem.aclose()
        return report

    print(json.dumps(asyncio.run(main())))
