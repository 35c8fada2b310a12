"""The durable outbox: replication work the manager owes to backends, kept in a local SQLite table.

Every entry is one idempotent operation (``put`` of a full memory, or ``delete`` by id) for one target
backend instance. Entries for a target are delivered strictly in id (FIFO) order; an entry is removed only
after its delivery succeeded. A failing entry stays with its attempt count and last error, and is retried
with exponential backoff: nothing is dropped silently.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

import apsw
import attrs

from memroute.db import open_connection
from memroute.errors import BackendError, BackendUnavailableError
from memroute.models import Memory
from memroute.serialization import memory_from_dict, memory_to_dict

__all__ = ["OP_DELETE", "OP_PUT", "Outbox", "OutboxEntry"]

OP_PUT: Final = "put"
OP_DELETE: Final = "delete"
SCHEMA_VERSION: Final = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    target TEXT NOT NULL,
    op TEXT NOT NULL CHECK (op IN ('put', 'delete')),
    payload TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL,
    last_error TEXT,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS outbox_by_target ON outbox (target, id);
"""

_COLUMNS = "id, target, op, payload, attempts, next_attempt_at, last_error, created_at"


@attrs.frozen(kw_only=True)
class OutboxEntry:
    """One pending replication operation."""

    id: int
    target: str
    op: str
    payload: dict[str, Any]
    attempts: int
    next_attempt_at: float
    last_error: str | None
    created_at: float

    def memory(self) -> Memory:
        """The memory a ``put`` entry carries."""
        return memory_from_dict(self.payload)

    @property
    def memory_id(self) -> str:
        return str(self.payload["id"])


def put_payload(memory: Memory) -> dict[str, Any]:
    return memory_to_dict(memory)


def delete_payload(memory_id: str) -> dict[str, Any]:
    return {"id": memory_id}


class Outbox:
    """The outbox table in its own SQLite file (``":memory:"`` for tests). Thread-safe.

    Times (``created_at``, ``next_attempt_at``) are wall-clock seconds from ``clock`` so they stay
    meaningful across a process restart.
    """

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        prepare: Callable[[apsw.Connection], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = str(path)
        self._clock = clock
        self._lock = threading.Lock()
        self._connection = open_connection(self.path, prepare=prepare)
        try:
            with self._connection:
                version = self._connection.pragma("user_version")
                if version > SCHEMA_VERSION:
                    raise BackendUnavailableError(
                        f"outbox {self.path} has schema version {version}, newer than this memroute "
                        f"({SCHEMA_VERSION}); upgrade memroute or point [manager] outbox_path elsewhere"
                    )
                self._connection.execute(_SCHEMA)
                self._connection.pragma("user_version", SCHEMA_VERSION)
        except apsw.Error as exc:
            self._connection.close()
            raise BackendUnavailableError(f"cannot prepare the outbox {self.path}: {exc}") from exc
        self._counts: dict[str, int] = {
            str(target): int(count)
            for target, count in self._connection.execute("SELECT target, count(*) FROM outbox GROUP BY target")
        }
        self._closed = False

    # --- writing --------------------------------------------------------------------------------------
    def add(self, items: Iterable[tuple[str, str, dict[str, Any]]]) -> list[int]:
        """Append ``(target, op, payload)`` entries in one transaction; their ids, in order."""
        rows = list(items)
        if not rows:
            return []
        now = self._clock()
        ids: list[int] = []
        with self._lock:
            self._check_open()
            try:
                with self._connection:
                    for target, op, payload in rows:
                        if op not in (OP_PUT, OP_DELETE):
                            raise ValueError(f"unknown outbox op {op!r}")
                        self._connection.execute(
                            "INSERT INTO outbox (target, op, payload, attempts, next_attempt_at, created_at) "
                            "VALUES (?, ?, ?, 0, ?, ?)",
                            (target, op, json.dumps(payload, ensure_ascii=False, sort_keys=True), now, now),
                        )
                        ids.append(self._connection.last_insert_rowid())
            except apsw.Error as exc:
                raise BackendError(f"cannot write the outbox {self.path}: {exc}") from exc
            for target, _op, _payload in rows:
                self._counts[target] = self._counts.get(target, 0) + 1
        return ids

    def remove(self, entry: OutboxEntry) -> None:
        """Drop an entry after its successful delivery."""
        with self._lock:
            self._check_open()
            with self._connection:
                self._connection.execute("DELETE FROM outbox WHERE id = ?", (entry.id,))
                removed = self._connection.changes()
            if removed:
                remaining = self._counts.get(entry.target, 0) - 1
                if remaining > 0:
                    self._counts[entry.target] = remaining
                else:
                    self._counts.pop(entry.target, None)

    def discard(self, entry_id: int) -> bool:
        """Operator action: drop one entry by id (for example a poisoned head that can never be delivered).
        Never called by memroute itself. True when the entry existed."""
        with self._lock:
            self._check_open()
            row = self._connection.execute("SELECT target FROM outbox WHERE id = ?", (entry_id,)).fetchone()
            if row is None:
                return False
            with self._connection:
                self._connection.execute("DELETE FROM outbox WHERE id = ?", (entry_id,))
            target = str(row[0])
            remaining = self._counts.get(target, 0) - 1
            if remaining > 0:
                self._counts[target] = remaining
            else:
                self._counts.pop(target, None)
            return True

    def record_failure(self, entry: OutboxEntry, error: str, retry_at: float) -> None:
        """Count a failed delivery; the entry is retried at ``retry_at`` (clock seconds)."""
        with self._lock:
            self._check_open()
            with self._connection:
                self._connection.execute(
                    "UPDATE outbox SET attempts = attempts + 1, last_error = ?, next_attempt_at = ? WHERE id = ?",
                    (error[:2000], retry_at, entry.id),
                )

    # --- reading --------------------------------------------------------------------------------------
    def pending(self, target: str) -> int:
        """How many entries wait for ``target`` (from an in-memory count: cheap on every call)."""
        with self._lock:
            return self._counts.get(target, 0)

    def targets(self) -> list[str]:
        with self._lock:
            return sorted(self._counts)

    def head(self, target: str) -> OutboxEntry | None:
        """The oldest entry for ``target``: the only one that may be delivered next."""
        with self._lock:
            self._check_open()
            row = self._connection.execute(
                f"SELECT {_COLUMNS} FROM outbox WHERE target = ? ORDER BY id LIMIT 1", (target,)
            ).fetchone()
        return None if row is None else _entry(row)

    def entries(self, target: str | None = None, limit: int = 1000) -> list[OutboxEntry]:
        """Pending entries in delivery order (all targets, or one)."""
        with self._lock:
            self._check_open()
            if target is None:
                rows = self._connection.execute(f"SELECT {_COLUMNS} FROM outbox ORDER BY id LIMIT ?", (limit,))
            else:
                rows = self._connection.execute(
                    f"SELECT {_COLUMNS} FROM outbox WHERE target = ? ORDER BY id LIMIT ?", (target, limit)
                )
            return [_entry(row) for row in rows]

    def depth(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def stats(self, failing_limit: int = 20) -> dict[str, Any]:
        """``depth``, ``by_target``, ``oldest_age_s`` and the ``failing`` entries (attempted at least once)."""
        now = self._clock()
        with self._lock:
            self._check_open()
            row = self._connection.execute("SELECT min(created_at) FROM outbox").fetchone()
            oldest = None if row is None else row[0]
            failing_rows = list(self._connection.execute(
                f"SELECT {_COLUMNS} FROM outbox WHERE attempts > 0 ORDER BY id LIMIT ?", (failing_limit,)
            ))
            by_target = dict(sorted(self._counts.items()))
        failing = []
        for row in failing_rows:
            entry = _entry(row)
            failing.append({
                "id": entry.id, "target": entry.target, "op": entry.op, "memory_id": entry.payload.get("id"),
                "attempts": entry.attempts, "last_error": entry.last_error,
                "next_attempt_in_s": max(0.0, round(entry.next_attempt_at - now, 3)),
            })
        return {
            "depth": sum(by_target.values()),
            "by_target": by_target,
            "oldest_age_s": None if oldest is None else max(0.0, round(now - float(oldest), 3)),
            "failing": failing,
        }

    # --- lifecycle ------------------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._connection.close()

    def _check_open(self) -> None:
        if self._closed:
            raise BackendUnavailableError(f"the outbox {self.path} is closed")


def _entry(row: Any) -> OutboxEntry:
    entry_id, target, op, payload, attempts, next_attempt_at, last_error, created_at = row
    return OutboxEntry(
        id=int(entry_id), target=str(target), op=str(op), payload=json.loads(payload), attempts=int(attempts),
        next_attempt_at=float(next_attempt_at), last_error=last_error, created_at=float(created_at),
    )
