"""The durable outbox table: FIFO per target, failure bookkeeping, stats, persistence across re-opens."""

from __future__ import annotations

import pytest

from memroute.errors import BackendUnavailableError
from memroute.models import Memory, NewMemory
from memroute.routing.outbox import OP_DELETE, OP_PUT, Outbox, delete_payload, put_payload
from memroute.testing.faults import ManualClock


def memory(key: str = "k", content: str = "content") -> Memory:
    return NewMemory(api_key_id="tenant", key=key, content=content, metadata={"n": 1}).as_memory()


def test_entries_are_fifo_per_target_and_removed_only_explicitly():
    outbox = Outbox(":memory:", clock=ManualClock())
    first, second = memory("a"), memory("b")
    outbox.add([("main", OP_PUT, put_payload(first)), ("vault", OP_PUT, put_payload(first))])
    outbox.add([("main", OP_DELETE, delete_payload(second.id))])
    assert outbox.pending("main") == 2 and outbox.pending("vault") == 1 and outbox.depth() == 3
    head = outbox.head("main")
    assert head.op == OP_PUT and head.memory().same_as(first)
    outbox.remove(head)
    head = outbox.head("main")
    assert head.op == OP_DELETE and head.memory_id == second.id
    outbox.remove(head)
    outbox.remove(head)  # removing twice is harmless and keeps the count right
    assert outbox.head("main") is None and outbox.pending("main") == 0 and outbox.targets() == ["vault"]
    outbox.close()


def test_failure_is_recorded_with_attempts_error_and_retry_time():
    clock = ManualClock()
    outbox = Outbox(":memory:", clock=clock)
    outbox.add([("main", OP_PUT, put_payload(memory()))])
    entry = outbox.head("main")
    outbox.record_failure(entry, "connection refused", clock() + 4)
    clock.advance(1)
    failed = outbox.head("main")
    assert failed.attempts == 1 and failed.last_error == "connection refused"
    assert failed.next_attempt_at == entry.created_at + 4
    stats = outbox.stats()
    assert stats["depth"] == 1 and stats["by_target"] == {"main": 1} and stats["oldest_age_s"] == 1
    assert stats["failing"] == [{
        "id": entry.id, "target": "main", "op": "put", "memory_id": entry.memory_id, "attempts": 1,
        "last_error": "connection refused", "next_attempt_in_s": 3.0,
    }]


def test_empty_stats():
    stats = Outbox(":memory:").stats()
    assert stats == {"depth": 0, "by_target": {}, "dead_letters": 0, "oldest_age_s": None, "failing": []}


def test_entries_survive_a_reopen(tmp_path):
    path = tmp_path / "outbox.db"
    outbox = Outbox(path)
    payload = put_payload(memory(content="unicode ✓ ü 日本"))
    outbox.add([("main", OP_PUT, payload), ("main", OP_DELETE, delete_payload("x"))])
    outbox.close()
    reopened = Outbox(path)
    assert reopened.pending("main") == 2
    assert [e.op for e in reopened.entries("main")] == [OP_PUT, OP_DELETE]
    assert reopened.head("main").payload == payload
    reopened.close()


def test_unknown_op_is_rejected_and_nothing_is_written():
    outbox = Outbox(":memory:")
    with pytest.raises(ValueError, match="unknown outbox op"):
        outbox.add([("main", OP_PUT, {"id": "a"}), ("main", "truncate", {})])
    assert outbox.depth() == 0 and outbox.entries() == []


def test_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "outbox.db"
    Outbox(path).close()
    import apsw

    connection = apsw.Connection(str(path))
    connection.pragma("user_version", 99)
    connection.close()
    with pytest.raises(BackendUnavailableError, match="newer"):
        Outbox(path)


def test_closed_outbox_raises_a_memroute_error():
    outbox = Outbox(":memory:")
    outbox.close()
    outbox.close()
    with pytest.raises(BackendUnavailableError, match="closed"):
        outbox.add([("main", OP_PUT, {"id": "a"})])


def test_unwritable_path_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(BackendUnavailableError):
        Outbox(blocker / "outbox.db")
