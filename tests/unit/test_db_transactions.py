"""``ThreadConnections.transaction()``: commit, rollback and nesting, and that the outermost transaction is an
explicit ``BEGIN`` / ``COMMIT`` (apsw's ``with connection:`` commits holding the GIL, which stalled the async
API's event loop for 20-40 ms a commit; docs/python-api.md, "The event loop and the GIL")."""

from __future__ import annotations

import pytest

from memroute.deployment.db import ThreadConnections, released_gil_transaction


@pytest.fixture
def pool(tmp_path):
    connections = ThreadConnections(tmp_path / "t.db")
    with connections.transaction() as conn:
        conn.execute("CREATE TABLE t (v INTEGER PRIMARY KEY)")
    yield connections
    connections.close()


def _values(pool: ThreadConnections) -> list[int]:
    return [row[0] for row in pool.get().execute("SELECT v FROM t ORDER BY v")]


def _traced(pool: ThreadConnections) -> list[str]:
    statements: list[str] = []

    def trace(_cursor, sql, _bindings):
        statements.append(sql.split()[0].upper())
        return True

    pool.get().exec_trace = trace
    return statements


def test_the_outermost_transaction_is_begin_and_commit_and_commits(pool):
    statements = _traced(pool)
    with pool.transaction() as conn:
        conn.execute("INSERT INTO t VALUES (1)")
    assert statements == ["BEGIN", "INSERT", "COMMIT"]
    assert _values(pool) == [1] and not pool.get().in_transaction


def test_an_exception_rolls_the_whole_transaction_back(pool):
    with pytest.raises(RuntimeError), pool.transaction() as conn:
        conn.execute("INSERT INTO t VALUES (1)")
        raise RuntimeError("boom")
    assert _values(pool) == [] and not pool.get().in_transaction


def test_a_nested_transaction_is_a_savepoint_of_the_outer_one(pool):
    with pool.transaction() as conn:
        conn.execute("INSERT INTO t VALUES (1)")
        with pytest.raises(RuntimeError), pool.transaction() as inner:
            inner.execute("INSERT INTO t VALUES (2)")
            raise RuntimeError("only the inner block is undone")
        assert conn.in_transaction
        with pool.transaction() as inner:
            inner.execute("INSERT INTO t VALUES (3)")
    assert _values(pool) == [1, 3] and not pool.get().in_transaction


def test_a_failing_commit_rolls_back_and_raises(pool):
    conn = pool.get()
    conn.execute("CREATE TABLE child (v INTEGER REFERENCES t(v) DEFERRABLE INITIALLY DEFERRED)")
    with pytest.raises(Exception, match="FOREIGN KEY"), released_gil_transaction(conn):
        conn.execute("INSERT INTO child VALUES (99)")  # checked at COMMIT: it fails there
    assert not conn.in_transaction
    assert conn.execute("SELECT count(*) FROM child").fetchone()[0] == 0


def test_opening_waits_for_a_writer_holding_a_file_not_yet_in_wal_mode(tmp_path):
    """SQLite refuses the switch to WAL at once (no busy wait) while another connection holds a write lock on a
    rollback-journal file; ``open_connection`` retries it within its busy timeout (several processes opening a
    fresh deployment at once met this), and still gives up, typed, after it."""
    import threading
    import time

    import apsw
    import pytest

    from memroute.deployment.db import open_connection
    from memroute.errors import BackendUnavailableError

    def locked(name: str) -> apsw.Connection:
        writer = apsw.Connection(str(tmp_path / name))  # a rollback-journal file, as SQLite creates it
        writer.execute("CREATE TABLE seed(x)")
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("INSERT INTO seed VALUES (1)")
        return writer

    writer = locked("released.db")
    release = threading.Timer(0.3, lambda: writer.execute("COMMIT"))
    release.start()
    started = time.monotonic()
    opened = open_connection(tmp_path / "released.db")
    assert opened.pragma("journal_mode") == "wal" and time.monotonic() - started >= 0.25
    opened.close()
    release.join()
    writer.close()
    held = locked("held.db")
    try:
        with pytest.raises(BackendUnavailableError, match="locked"):
            open_connection(tmp_path / "held.db", busy_timeout_ms=100)
    finally:
        held.execute("COMMIT")
        held.close()
