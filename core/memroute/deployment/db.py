"""apsw connections the way memroute opens them: WAL, a busy timeout, foreign keys, no double-quoted string
literals, ``memroute_prepare_connection`` hooks run, and one connection per thread."""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw
import apsw.bestpractice

from memroute.errors import BackendUnavailableError

__all__ = ["ThreadConnections", "open_connection", "released_gil_transaction"]

PrepareHook = Callable[[apsw.Connection], None]


def _create_private(path: str) -> None:
    """Create a new database file readable by its owner only (0600; SQLite gives its -wal and -shm files the
    same mode). Memories, key hashes and leases are nobody else's business on a shared machine; a file that
    exists keeps the mode its operator gave it."""
    if path.startswith("file:"):
        return
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        pass


def open_connection(
    path: str | Path,
    *,
    prepare: PrepareHook | None = None,
    busy_timeout_ms: int = 5000,
    synchronous: str = "NORMAL",
) -> apsw.Connection:
    """A configured connection to ``path`` (``":memory:"`` works too).

    ``synchronous=NORMAL`` in WAL mode keeps every committed transaction across an application crash; only
    an OS crash or power loss can lose the last transactions (use ``FULL`` for that guarantee).
    """
    target = str(path)
    if target != ":memory:":
        try:
            Path(target).parent.mkdir(parents=True, exist_ok=True)
            _create_private(target)
        except OSError as exc:
            raise BackendUnavailableError(f"cannot create the directory for {target}: {exc}") from exc
    try:
        connection = apsw.Connection(target)
        connection.set_busy_timeout(busy_timeout_ms)
        connection.pragma("foreign_keys", True)
        apsw.bestpractice.connection_dqs(connection)
        if target != ":memory:":
            _switch_to_wal(connection, busy_timeout_ms)
        connection.pragma("synchronous", synchronous)
        if prepare is not None:
            prepare(connection)
    except apsw.Error as exc:
        raise BackendUnavailableError(
            f"cannot open SQLite database {target}: {exc}. Check that the path is writable and not corrupt."
        ) from exc
    return connection


def _switch_to_wal(connection: apsw.Connection, busy_timeout_ms: int) -> None:
    """``PRAGMA journal_mode=wal``, waiting up to ``busy_timeout_ms`` for other connections. SQLite answers the
    switch with SQLITE_BUSY at once, without its busy handler, while another connection holds a write lock on
    a file not yet in WAL mode (it would deadlock waiting): several processes opening a fresh deployment at once
    met that (``tests/faults/test_processes.py``), so the switch is retried here until the timeout."""
    deadline = time.monotonic() + busy_timeout_ms / 1000
    while True:
        try:
            connection.pragma("journal_mode", "wal")
            return
        except apsw.BusyError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.005)


@contextmanager
def released_gil_transaction(connection: apsw.Connection, begin: str = "BEGIN") -> Iterator[apsw.Connection]:
    """One transaction with an explicit ``BEGIN`` / ``COMMIT`` (``ROLLBACK`` when the block raises or the
    commit fails).

    Why not ``with connection:``: apsw's context manager commits in its ``__exit__`` **holding the GIL**, and a
    commit is where SQLite writes the WAL and, every ~1,000 pages, checkpoints it into the database (an fsync):
    measured 20-40 ms on the development VM, during which no other Python thread runs — an asyncio loop
    included (the async API's loop-lag probe saw exactly those stalls while the indexer stored vectors).
    ``connection.execute("COMMIT")`` releases the GIL around the same work, like every other statement.
    """
    connection.execute(begin)
    try:
        yield connection
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    try:
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise


class ThreadConnections:
    """One apsw connection per thread to the same database file, closed together.

    A connection belongs to its thread for as long as the thread lives. Servers run on pools whose threads come
    and go (anyio retires an idle worker after 10 s), so a connection is closed when its thread ends: the
    thread's local storage holds the only strong reference, and apsw closes a connection it frees. Open handles
    stay bounded by the live threads instead of growing with every burst of requests (one server held ~150
    handles on each database after four bursts of 120). One kept alive past its thread by a reference cycle
    is closed the next time a thread opens a connection."""

    def __init__(self, path: str | Path, *, prepare: PrepareHook | None = None, busy_timeout_ms: int = 5000,
                 synchronous: str = "NORMAL", on_open: Callable[[apsw.Connection], Any] | None = None) -> None:
        self.path = str(path)
        self._prepare = prepare
        self._busy_timeout_ms = busy_timeout_ms
        self._synchronous = synchronous
        self._on_open = on_open
        self._local = threading.local()
        self._owners: weakref.WeakKeyDictionary[apsw.Connection, threading.Thread] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._closed = False

    def get(self) -> apsw.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            if self._closed:
                raise BackendUnavailableError(f"database {self.path} is closed")
            self._close_orphans()
            connection = open_connection(self.path, prepare=self._prepare, busy_timeout_ms=self._busy_timeout_ms,
                                         synchronous=self._synchronous)
            if self._on_open is not None:
                self._on_open(connection)
            self._local.connection = connection
            with self._lock:
                self._owners[connection] = threading.current_thread()
        return connection

    def open_count(self) -> int:
        """Connections open now (live threads', and any an ended thread left in a reference cycle)."""
        with self._lock:
            return len(self._owners)

    def _close_orphans(self) -> None:
        with self._lock:
            orphans = [c for c, thread in self._owners.items() if not thread.is_alive()]
            for connection in orphans:
                del self._owners[connection]
        for connection in orphans:  # its thread has ended: nothing else can be using it
            _close_quietly(connection)

    @contextmanager
    def transaction(self) -> Iterator[apsw.Connection]:
        """``with pool.transaction() as conn:`` — one transaction on this thread's connection (committed when
        the block ends, rolled back when it raises); inside another one, a savepoint of it."""
        connection = self.get()
        if connection.in_transaction:
            with connection:  # nested: apsw's savepoint (its release commits nothing, so it is cheap)
                yield connection
            return
        with released_gil_transaction(connection):
            yield connection

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections, self._owners = list(self._owners), weakref.WeakKeyDictionary()
        for connection in connections:
            _close_quietly(connection)
        self._local = threading.local()


def _close_quietly(connection: apsw.Connection) -> None:
    try:
        connection.close()
    except apsw.Error:
        pass
