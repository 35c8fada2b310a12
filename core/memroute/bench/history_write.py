"""Single durable adds with their history entry written in the add's own transaction (``create_many_recorded`` of
SQLite or PostgreSQL), against the same adds with the entry written in a second step after the write (what
memroute did before, and still does on backends without :class:`~memroute.interfaces.RecordedWrites`): two
fresh stores, the adds alternated in rounds so load on the machine hits both alike, in one run
(``pytest -m bench tests/bench/test_history_write_bench.py -s``).

The second-step contender is the same code with ``MemoryManager.records_in_write`` answering ``False`` for the
duration of its adds: the service then reads what each add replaces, writes, and appends the entry.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

from memroute.routing.manager import MemoryManager

__all__ = ["run_history_write_bench"]


def _second_step() -> Any:
    return mock.patch.object(MemoryManager, "records_in_write", new=property(lambda self: False))


def run_history_write_bench(open_service: Callable[[Path], Any], root: Path, *, adds: int = 2000,
                            round_size: int = 50) -> dict[str, Any]:
    """p50 / p95 of one ``add`` (µs) each way and their ratio; ``recorded`` says each store's last add has its
    ``created`` entry (the two ways record the same history)."""
    samples: dict[str, list[float]] = {"in_transaction": [], "second_step": []}
    with open_service(root / "in-transaction") as joined, open_service(root / "second-step") as apart:
        if not joined._manager.records_in_write:
            raise ValueError("the primary backend does not record history in its writes (SQLite and PostgreSQL do)")
        for warm in range(20):
            joined.add(api_key_id="bench", content=f"warm up {warm}")
            with _second_step():
                apart.add(api_key_id="bench", content=f"warm up {warm}")
        last: dict[str, Any] = {}
        for start in range(0, adds, round_size):
            for name, mem in (("in_transaction", joined), ("second_step", apart)):
                with _second_step() if name == "second_step" else contextlib.nullcontext():
                    for i in range(start, min(adds, start + round_size)):
                        began = time.perf_counter()
                        last[name] = mem.add(api_key_id="bench",
                                             content=f"note {i}: the user said something worth keeping")
                        samples[name].append(time.perf_counter() - began)
        recorded = {name: [e.event.value for e in mem.history(last[name].id, api_key_id="bench").entries]
                    == ["created"] for name, mem in (("in_transaction", joined), ("second_step", apart))}
    report: dict[str, Any] = {"adds": adds, "recorded": recorded}
    for name, values in samples.items():
        ordered = sorted(values)
        report[name] = {"p50_us": round(statistics.median(ordered) * 1e6, 1),
                        "p95_us": round(ordered[int(0.95 * (len(ordered) - 1))] * 1e6, 1)}
    report["in_transaction_vs_second_step_p50"] = round(
        report["in_transaction"]["p50_us"] / report["second_step"]["p50_us"], 2)
    return report
