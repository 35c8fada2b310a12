"""``ThreadConnections.transaction()``: commit, rollback and nesting, and that the outermost transaction is an
explicit ``BEGIN`` / ``COMMIT`` (apsw's ``with connection:`` commits holding the GIL, which stalled the async
API's event loop for 20-40 ms a commit; docs/python-api.md, "The event loop and the GIL")."""

from __future__ import annotations

import pytest

from memroute.db import ThreadConnections, released_gil_transaction


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
