"""The durable outbox: replication work the manager owes to backends, kept in a local SQLite table.

Every entry is one idempotent operation (``put`` of a full memory, or ``delete`` by id) for one target
backend instance. Entries for a target are delivered strictly in id (FIFO) order; an entry is removed only
after its delivery succeeded. A failing entry stays with its attempt count and last error, and is retried
with exponential backoff: nothing is dropped silently.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Final, cast

import apsw
import attrs

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no cross-process delivery lock (docs/manager.md)
    fcntl = None  # type: ignore[assignment]

from memroute.config.serialization import memory_from_dict, memory_to_dict
from memroute.deployment.db import open_connection, released_gil_transaction
from memroute.errors import BackendError, BackendUnavailableError
from memroute.models import Memory

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
CREATE TABLE IF NOT EXISTS outbox_dead (
    id INTEGER PRIMARY KEY,
    target TEXT NOT NULL,
    op TEXT NOT NULL,
    payload TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    last_error TEXT,
    created_at REAL NOT NULL,
    dead_at REAL NOT NULL
);
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


def delete_payload(memory_id: str, api_key_id: str | None = None) -> dict[str, Any]:
    """A delete entry: the id, and the tenant when the caller named it (the replay then routes by tenant)."""
    return {"id": memory_id} if api_key_id is None else {"id": memory_id, "api_key_id": api_key_id}


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
            # IMMEDIATE: several processes opening a fresh configuration at once all create the schema. A
            # deferred transaction reads first and then must upgrade its lock, which SQLite refuses at once
            # (SQLITE_BUSY, no busy wait: it would deadlock); taking the write lock up front waits its turn.
            with _immediate(self._connection):
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
        self._counts: dict[str, int] = {}
        self._data_version = -1
        self._refresh_counts()
        self._file_locks: dict[str, int] = {}
        self._closed = False

    def _refresh_counts(self) -> None:
        """Reload the per-target counts when another process committed to the outbox since we last looked
        (``PRAGMA data_version`` changes then, and only then: a cheap check on every read). Several processes
        opening one primary share one outbox; without this, each counted only its own entries, took a
        backend with another process's entries pending for "in sync", and wrote to it directly."""
        version = int(self._connection.pragma("data_version"))
        if version == self._data_version:
            return
        self._data_version = version
        self._counts = {
            str(target): int(count)
            for target, count in self._connection.execute("SELECT target, count(*) FROM outbox GROUP BY target")
        }

    @contextlib.contextmanager
    def delivery_lock(self, target: str, *, wait: bool = True) -> Iterator[bool]:
        """Hold the right to deliver ``target``'s entries across **processes** (an advisory ``flock`` on a
        lock file next to the outbox; the caller serialises its own threads). Yields False when ``wait`` is
        False and another process holds it. Without it two processes replaying one shared outbox could each
        take the same head, and a slow one put an older version over a newer one after the queue emptied.
        A process that dies releases its lock with it. ``":memory:"`` outboxes (one process) need none, and
        neither can platforms without ``fcntl`` (documented in docs/manager.md)."""
        if self.path == ":memory:" or fcntl is None:
            yield True
            return
        with self._lock:
            self._check_open()
            fd = self._file_locks.get(target)
            if fd is None:
                digest = hashlib.sha256(target.encode("utf-8")).hexdigest()[:16]
                fd = os.open(f"{self.path}.{digest}.lock", os.O_RDWR | os.O_CREAT, 0o600)
                self._file_locks[target] = fd
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

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
                with released_gil_transaction(self._connection):
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
            with released_gil_transaction(self._connection):
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
            with released_gil_transaction(self._connection):
                self._connection.execute("DELETE FROM outbox WHERE id = ?", (entry_id,))
            target = str(row[0])
            remaining = self._counts.get(target, 0) - 1
            if remaining > 0:
                self._counts[target] = remaining
            else:
                self._counts.pop(target, None)
            return True

    def dead_letter(self, entry: OutboxEntry, error: str) -> None:
        """Set a poison entry aside (kept in ``outbox_dead``, reported by :meth:`stats`), so the entries
        behind it are delivered. memroute calls this only for entries refused as invalid (see
        ``memroute.routing.replication.POISON_ATTEMPTS``); nothing is dropped without a trace."""
        with self._lock:
            self._check_open()
            with released_gil_transaction(self._connection):
                self._connection.execute(
                    "INSERT OR REPLACE INTO outbox_dead (id, target, op, payload, attempts, last_error, created_at, "
                    "dead_at) SELECT id, target, op, payload, attempts + 1, ?, created_at, ? FROM outbox WHERE id = ?",
                    (error[:2000], self._clock(), entry.id),
                )
                self._connection.execute("DELETE FROM outbox WHERE id = ?", (entry.id,))
                removed = self._connection.changes()
            if removed:
                remaining = self._counts.get(entry.target, 0) - 1
                if remaining > 0:
                    self._counts[entry.target] = remaining
                else:
                    self._counts.pop(entry.target, None)

    def dead_letters(self, limit: int = 20) -> list[dict[str, Any]]:
        """Entries set aside as poison, newest first."""
        with self._lock:
            self._check_open()
            rows = self._connection.execute(
                "SELECT id, target, op, payload, attempts, last_error, dead_at FROM outbox_dead "
                "ORDER BY dead_at DESC LIMIT ?", (limit,)).fetchall()
        out = []
        for row in rows:
            entry_id, target, op, payload, attempts, last_error, dead_at = (cast(Any, value) for value in row)
            try:
                memory_id = json.loads(payload).get("id")
            except (ValueError, AttributeError):
                memory_id = None
            out.append({"id": int(entry_id), "target": str(target), "op": str(op), "memory_id": memory_id,
                        "attempts": int(attempts), "last_error": last_error, "dead_at": float(dead_at)})
        return out

    def record_failure(self, entry: OutboxEntry, error: str, retry_at: float) -> None:
        """Count a failed delivery; the entry is retried at ``retry_at`` (clock seconds)."""
        with self._lock:
            self._check_open()
            with released_gil_transaction(self._connection):
                self._connection.execute(
                    "UPDATE outbox SET attempts = attempts + 1, last_error = ?, next_attempt_at = ? WHERE id = ?",
                    (error[:2000], retry_at, entry.id),
                )

    # --- reading --------------------------------------------------------------------------------------
    def pending(self, target: str) -> int:
        """How many entries wait for ``target``, from every process sharing this outbox (an in-memory count,
        reloaded only when another process committed: cheap on every call)."""
        with self._lock:
            self._check_open()
            self._refresh_counts()
            return self._counts.get(target, 0)

    def targets(self) -> list[str]:
        with self._lock:
            self._check_open()
            self._refresh_counts()
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
            self._check_open()
            self._refresh_counts()
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
            self._refresh_counts()
            by_target = dict(sorted(self._counts.items()))
        failing = []
        for row in failing_rows:
            entry = _entry(row)
            failing.append({
                "id": entry.id, "target": entry.target, "op": entry.op, "memory_id": entry.payload.get("id"),
                "attempts": entry.attempts, "last_error": entry.last_error,
                "next_attempt_in_s": max(0.0, round(entry.next_attempt_at - now, 3)),
            })
        with self._lock:
            dead_row = self._connection.execute("SELECT count(*) FROM outbox_dead").fetchone()
            dead = int(cast(Any, dead_row)[0])
        return {
            "depth": sum(by_target.values()),
            "by_target": by_target,
            "dead_letters": dead,
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
            for fd in self._file_locks.values():
                os.close(fd)
            self._file_locks.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise BackendUnavailableError(f"the outbox {self.path} is closed")


@contextlib.contextmanager
def _immediate(connection: apsw.Connection) -> Iterator[None]:
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def _entry(row: Any) -> OutboxEntry:
    entry_id, target, op, payload, attempts, next_attempt_at, last_error, created_at = row
    return OutboxEntry(
        id=int(entry_id), target=str(target), op=str(op), payload=json.loads(payload), attempts=int(attempts),
        next_attempt_at=float(next_attempt_at), last_error=last_error, created_at=float(created_at),
    )
