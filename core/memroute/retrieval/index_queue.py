"""The durable index queue: memory ids whose vector must be written or removed, for primaries without reindex
markers, and for deletes (a small SQLite file next to the vector store). See :mod:`memroute.retrieval.indexer`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import apsw

from memroute.deployment.db import open_connection, released_gil_transaction

__all__ = ["IndexQueue"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS index_queue (
    memory_id   TEXT PRIMARY KEY,
    api_key_id  TEXT NOT NULL,
    op          TEXT NOT NULL CHECK (op IN ('upsert', 'delete')),
    attempts    INTEGER NOT NULL DEFAULT 0,
    last_error  TEXT,
    seq         INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_index_queue_seq ON index_queue(seq);
CREATE INDEX IF NOT EXISTS idx_index_queue_tenant ON index_queue(api_key_id, seq);
CREATE TABLE IF NOT EXISTS index_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS index_dead (
    memory_id   TEXT PRIMARY KEY,
    api_key_id  TEXT NOT NULL,
    error       TEXT,
    dead_at     REAL NOT NULL
);
"""

class IndexQueue:
    """The durable queue of memory ids whose vector must be written or removed. Re-enqueueing an id replaces
    its pending op (the newest op wins; the worker always reads the memory's current state)."""

    def __init__(self, path: str | Path, *, prepare: Callable[[apsw.Connection], None] | None = None) -> None:
        self._conn = open_connection(path, prepare=prepare)
        self._lock = threading.Lock()
        with self._lock, released_gil_transaction(self._conn):
            self._conn.execute(_SCHEMA)
        row = self._conn.execute("SELECT COALESCE(MAX(seq), 0) FROM index_queue").fetchone()
        self._seq = int(row[0]) if row else 0

    def put(self, entries: Iterable[tuple[str, str, str]]) -> int:
        """Enqueue ``(memory_id, api_key_id, op)`` entries in one transaction."""
        count = 0
        with self._lock, released_gil_transaction(self._conn):
            for memory_id, api_key_id, op in entries:
                self._seq += 1
                self._conn.execute(
                    "INSERT INTO index_queue(memory_id, api_key_id, op, seq) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT(memory_id) DO UPDATE SET op = excluded.op, api_key_id = excluded.api_key_id, "
                    "attempts = 0, last_error = NULL, seq = excluded.seq",
                    (memory_id, api_key_id, op, self._seq),
                )
                self._conn.execute("DELETE FROM index_dead WHERE memory_id = ?", (memory_id,))
                count += 1
        return count

    def take(self, limit: int, api_key_id: str | None = None) -> list[tuple[str, str, str, int]]:
        """The oldest entries ``(memory_id, api_key_id, op, seq)`` (of one tenant, or all)."""
        with self._lock:
            if api_key_id is None:
                rows = self._conn.execute(
                    "SELECT memory_id, api_key_id, op, seq FROM index_queue ORDER BY seq LIMIT ?", (limit,)
                ).fetchall()
            else:
                rows = self._conn.execute(
                    "SELECT memory_id, api_key_id, op, seq FROM index_queue WHERE api_key_id = ? ORDER BY seq "
                    "LIMIT ?", (api_key_id, limit),
                ).fetchall()
        return [(str(r[0]), str(r[1]), str(r[2]), int(r[3] or 0)) for r in rows]

    def done(self, entries: Sequence[tuple[str, int]]) -> None:
        """Remove entries ``(memory_id, seq)`` — only if not re-enqueued meanwhile (same seq)."""
        with self._lock, released_gil_transaction(self._conn):
            for memory_id, seq in entries:
                self._conn.execute("DELETE FROM index_queue WHERE memory_id = ? AND seq = ?", (memory_id, seq))

    def failed(self, memory_ids: Sequence[str], error: str) -> None:
        with self._lock, released_gil_transaction(self._conn):
            for memory_id in memory_ids:
                self._conn.execute(
                    "UPDATE index_queue SET attempts = attempts + 1, last_error = ? WHERE memory_id = ?",
                    (error[:500], memory_id),
                )

    def attempts(self, memory_id: str) -> int:
        with self._lock:
            row = self._conn.execute("SELECT attempts FROM index_queue WHERE memory_id = ?", (memory_id,)).fetchone()
        return int(row[0]) if row else 0

    def dead_letter(self, memory_id: str, api_key_id: str, error: str) -> None:
        """Set a poison item aside: out of the queue (so it blocks nothing), kept in ``index_dead`` and
        reported by ``status``. Enqueueing the id again (a new write) gives it another chance."""
        with self._lock, released_gil_transaction(self._conn):
            self._conn.execute("DELETE FROM index_queue WHERE memory_id = ?", (memory_id,))
            self._conn.execute(
                "INSERT INTO index_dead(memory_id, api_key_id, error, dead_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(memory_id) DO UPDATE SET error = excluded.error, dead_at = excluded.dead_at",
                (memory_id, api_key_id, error[:500], time.time()),
            )

    def dead_letters(self, limit: int = 5) -> tuple[int, list[dict[str, Any]]]:
        """How many items are dead-lettered, and the newest ``limit`` of them."""
        with self._lock:
            total = self._conn.execute("SELECT COUNT(*) FROM index_dead").fetchone()
            rows = self._conn.execute(
                "SELECT memory_id, api_key_id, error FROM index_dead ORDER BY dead_at DESC LIMIT ?", (limit,)
            ).fetchall()
        return int(total[0]) if total else 0, [{"memory_id": r[0], "api_key_id": r[1], "error": r[2]} for r in rows]

    def depth(self, api_key_id: str | None = None) -> int:
        with self._lock:
            if api_key_id is None:
                row = self._conn.execute("SELECT COUNT(*) FROM index_queue").fetchone()
            else:
                row = self._conn.execute(
                    "SELECT COUNT(*) FROM index_queue WHERE api_key_id = ?", (api_key_id,)
                ).fetchone()
        return int(row[0]) if row else 0

    def failing(self, limit: int = 5) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT memory_id, op, attempts, last_error FROM index_queue WHERE attempts > 0 "
                "ORDER BY attempts DESC LIMIT ?", (limit,),
            ).fetchall()
        return [{"memory_id": r[0], "op": r[1], "attempts": r[2], "last_error": r[3]} for r in rows]

    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._conn.execute("SELECT value FROM index_meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str | None) -> None:
        with self._lock, released_gil_transaction(self._conn):
            if value is None:
                self._conn.execute("DELETE FROM index_meta WHERE key = ?", (key,))
            else:
                self._conn.execute(
                    "INSERT INTO index_meta(key, value) VALUES (?, ?) "
                    "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    (key, value),
                )

    def clear(self) -> None:
        with self._lock, released_gil_transaction(self._conn):
            self._conn.execute("DELETE FROM index_queue")

    def close(self) -> None:
        with self._lock:
            self._conn.close()
