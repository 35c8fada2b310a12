"""Helpers of the fault suite: real processes on real SQLite files, killed with SIGKILL, then checked.

Every check is the same: nothing acknowledged is lost, nothing is duplicated, the primary and its fallback
hold the same memories once the outbox is flushed, the FTS index agrees with the table and the vector index
holds one vector per memory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import memroute
from memroute.models import ListFilter

ROOT = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(pytest.mark.faults)


def store_config(tmp_path: Path, *, vectors: bool = False) -> dict[str, Any]:
    return {
        "data_dir": str(tmp_path / "data"),
        "embedding": {"source": "static" if vectors else "none"},
        "vectors": {"store": "sqlite-vec" if vectors else "none"},
        "manager": {"health_interval_s": 0, "retry_base_s": 0.01, "retry_max_s": 0.2},
        "backends": {
            "primary": "main", "fallbacks": ["spare"],
            "main": {"type": "sqlite", "path": str(tmp_path / "main.db")},
            "spare": {"type": "sqlite", "path": str(tmp_path / "spare.db")},
        },
    }


def spawn(mode: str, config: dict[str, Any], *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-m", "tests.faults.workers", mode, json.dumps(config), *args],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_until(proc: subprocess.Popen[str], *, acks: int, timeout: float = 60.0) -> dict[str, str]:
    """Read ``ack`` lines until ``acks`` were seen (or the process ended); returns ``{id: key}``."""
    acked: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while len(acked) < acks and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("ack "):
            _, memory_id, key = line.split()
            acked[memory_id] = key
    return acked


def kill(proc: subprocess.Popen[str]) -> dict[str, str]:
    """SIGKILL, then every ack the process had already written (the pipe keeps them)."""
    proc.send_signal(signal.SIGKILL)
    assert proc.stdout is not None and proc.stderr is not None
    # Read through the file object: lines it already buffered (read_until uses readline) would be missed by
    # communicate(), which reads the raw descriptor.
    out = proc.stdout.read()
    proc.stderr.read()
    proc.wait(timeout=30)
    proc.stdout.close()
    proc.stderr.close()
    return {line.split()[1]: line.split()[2] for line in out.splitlines() if line.startswith("ack ")}


def finish(proc: subprocess.Popen[str], timeout: float = 120.0) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"worker failed ({proc.returncode}): {err[-2000:]}"
    return out


def check_store(config: dict[str, Any], acked: dict[str, str] | None = None, *,
                vectors: bool = False, killed: bool = False, in_flight: int = 1) -> dict[str, Any]:
    """Open the store the workers used and assert the invariants; returns the primary's memories by id.

    ``killed``: a worker was SIGKILLed mid-write, so the one write in flight may have committed on the
    primary without its outbox entry (never acknowledged: the documented gap). It must be that write alone
    (``in_flight`` memories: one for an add, the whole file for an import, which is one backend write), and
    ``verify(repair=True)`` must bring the fallback in step."""
    with memroute.open(config, use_env=False) as mem:
        assert mem.flush(60), "the outbox (or the vector queue) did not drain"
        manager = mem._manager  # internals: every backend is inspected on its own
        assert manager.outbox.depth() == 0
        primary, spare = manager.primary, manager.fallbacks[0]
        main_rows = {m.id: m for m in primary.list(ListFilter(limit=10_000)).data}
        spare_rows = {m.id: m for m in spare.list(ListFilter(limit=10_000)).data}
        if killed and main_rows.keys() != spare_rows.keys():
            only_primary = main_rows.keys() - spare_rows.keys()
            assert len(only_primary) <= in_flight and not only_primary & (acked or {}).keys(), (
                f"more than the one in-flight write missing on the fallback: {sorted(only_primary)[:5]}")
            assert mem.verify(repair=True).flushed
            spare_rows = {m.id: m for m in spare.list(ListFilter(limit=10_000)).data}
        for memory_id, key in (acked or {}).items():
            assert memory_id in main_rows, f"acknowledged write {key} ({memory_id}) lost on the primary"
        keys = [(m.api_key_id, m.key) for m in main_rows.values()]
        assert len(keys) == len(set(keys)), "a key is stored twice"
        assert main_rows.keys() == spare_rows.keys(), (
            f"primary and fallback differ: {len(main_rows.keys() - spare_rows.keys())} only on the primary, "
            f"{len(spare_rows.keys() - main_rows.keys())} only on the fallback")
        stale = [i for i, m in main_rows.items() if not m.same_as(spare_rows[i])]
        assert not stale, (f"{len(stale)} memories differ between primary and fallback, e.g. primary "
                           f"{main_rows[stale[0]]!r} vs fallback {spare_rows[stale[0]]!r}")
        for backend in (primary, spare):
            connection = backend._connection()  # type: ignore[attr-defined]
            docs = connection.execute("SELECT count(*) FROM memory_fts_docsize").fetchone()[0]
            rows = connection.execute("SELECT count(*) FROM memories").fetchone()[0]
            assert docs == rows, f"{backend.name}: FTS holds {docs} documents for {rows} memories"
            connection.execute("INSERT INTO memory_fts(memory_fts, rank) VALUES ('integrity-check', 1)")
        if vectors:
            store = mem._retrieval.vector_store
            assert store is not None and store.ids() == set(main_rows), "vector index out of step with the rows"
        return main_rows
