"""The SQLite backend merges its keyword index into one segment once writes pause
(:mod:`memroute_builtins.backends.sqlite.upkeep`). Only speed may depend on it: every search gives the same hits,
order and score bits before and after a merge, and a merge moves neither change counts nor data versions."""

from __future__ import annotations

import random
import time
from contextlib import closing
from pathlib import Path

import pytest

from memroute.config.settings import structure_options
from memroute.errors import ConfigError
from memroute.interfaces import MemoryAccess
from memroute.models import ListFilter, Memory, MemoryPatch, NewMemory, SearchQuery, utcnow
from memroute_builtins.backends.sqlite import upkeep as upkeep_module
from memroute_builtins.backends.sqlite.backend import SqliteBackend, SqliteSettings
from memroute_builtins.backends.sqlite.upkeep import segments
from tests.unit.test_sqlite_tenant_memories import QUERIES, WORDS, hits, open_backend


def fill(backend: SqliteBackend, tenant: str, count: int, seed: int) -> list[Memory]:
    """``count`` new memories of random words in one transaction (a segment), with many equal ranks."""
    rng = random.Random(seed)
    return backend.create_many([NewMemory(
        api_key_id=tenant, key=f"{tenant}:{seed}:{n}",
        content="lisbon trip" if n % 5 == 0 else " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9))))
        for n in range(count)])


def index_segments(backend: SqliteBackend) -> int:
    return segments(backend._connection())[0]


def written_in_pieces(path: Path) -> list[str]:
    """A file written the way a chat writes it (a transaction at a time: a segment each), with updates and
    deletes, by a backend that does not merge; the ids of its memories."""
    with closing(open_backend(path, fts_merge_max_pages=0)) as writer:
        ids = []
        for piece in range(40):
            ids += [memory.id for memory in fill(writer, "alice" if piece % 3 else "bob", 8, seed=piece)]
        for memory_id in ids[::9]:
            writer.update(memory_id, MemoryPatch(content="postgres billing migration plan"))
        for memory_id in ids[5::13]:
            writer.delete(memory_id)
        assert index_segments(writer) > 1
        assert writer.describe()["keyword_index"]["enabled"] is False
        assert writer.list(ListFilter(limit=1)).total == len(ids) - len(ids[5::13])
        return ids


def every_search(backend: SqliteBackend) -> list[list[tuple[str, float]]]:
    return [hits(backend, SearchQuery(api_key_id=tenant, text=text, limit=limit))
            for tenant in ("alice", "bob") for text in QUERIES for limit in (1, 5, 20, 200)]


def test_opening_merges_a_file_in_pieces_and_searches_stay_bit_identical(tmp_path):
    path = tmp_path / "pieces.db"
    written_in_pieces(path)
    with closing(open_backend(path, fts_merge_max_pages=0)) as unmerged:
        before = every_search(unmerged)
        changes = [unmerged._changes(t) for t in ("alice", "bob")]
        versions = unmerged._connection().execute("SELECT * FROM memory_versions ORDER BY 1").fetchall()
    with closing(open_backend(path)) as backend:
        assert backend._upkeep.wait_idle(30)
        assert index_segments(backend) == 1
        stats = backend.describe()["keyword_index"]
        assert stats["segments"] == 1 and stats["merges"] == 1 and stats["last_error"] is None
        assert every_search(backend) == before  # ids, order and the float score of every hit
        assert [backend._changes(t) for t in ("alice", "bob")] == changes
        assert backend._connection().execute("SELECT * FROM memory_versions ORDER BY 1").fetchall() == versions
        backend._connection().execute("INSERT INTO memory_fts(memory_fts, rank) VALUES ('integrity-check', 1)")


def test_own_writes_are_merged_once_they_pause(tmp_path):
    with closing(open_backend(tmp_path / "own.db")) as backend:
        upkeep = backend._upkeep
        upkeep.quiet_s = 60.0  # writes never pause that long here
        for piece in range(12):
            fill(backend, "alice", 3, seed=piece)
        assert index_segments(backend) > 1 and upkeep.steps == 0
        upkeep.quiet_s = 0.2
        upkeep.written()
        assert upkeep.wait_idle(30)
        assert index_segments(backend) == 1
        search = every_search(backend)
        fill(backend, "alice", 3, seed=99)  # one more write: merged again after the pause
        assert upkeep.wait_idle(30) and index_segments(backend) == 1
        assert backend.describe()["keyword_index"]["merges"] == 2
        assert every_search(backend) != search  # the new memories are found


def test_a_write_during_a_merge_sends_the_rest_to_the_next_pause(tmp_path, monkeypatch):
    monkeypatch.setattr(upkeep_module, "MERGE_PAGES", 1)  # a step a page: a merge of many steps
    path = tmp_path / "steps.db"
    written_in_pieces(path)
    with closing(open_backend(path)) as backend:
        upkeep = backend._upkeep
        upkeep.quiet_s = 0.3
        step, steps = upkeep._write, []

        def counted():
            steps.append(time.monotonic())
            if len(steps) == 1:
                upkeep.written()  # a write lands while the first step runs
            return step()

        upkeep._write = counted
        assert upkeep.wait_idle(30)
        assert index_segments(backend) == 1 and len(steps) > 2
        assert steps[1] - steps[0] >= 0.25  # the second step waited for the next pause


def test_access_records_do_not_wake_it(tmp_path):
    path = tmp_path / "access.db"
    ids = written_in_pieces(path)
    with closing(open_backend(path)) as backend:
        assert backend._upkeep.wait_idle(30)
        woken = []
        backend._upkeep.written = lambda: woken.append(True)  # type: ignore[method-assign]
        backend.record_access("alice", {ids[1]: MemoryAccess(count=2, at=utcnow())})
        assert woken == []
        backend.update(ids[2], MemoryPatch(content="a new text for the index"))
        assert woken == [True]


def test_an_index_over_the_bound_is_left_to_fts5(tmp_path):
    path = tmp_path / "big.db"
    written_in_pieces(path)
    with closing(open_backend(path, fts_merge_max_pages=1)) as backend:
        assert backend._upkeep.wait_idle(30)
        assert index_segments(backend) > 1
        assert backend._upkeep.steps == 0


def test_0_turns_it_off_and_close_stops_the_thread(tmp_path):
    path = tmp_path / "off.db"
    written_in_pieces(path)
    with closing(open_backend(path, fts_merge_max_pages=0)) as backend:
        fill(backend, "alice", 3, seed=7)
        assert backend._upkeep._thread is None and index_segments(backend) > 1
    backend = open_backend(path)
    thread = backend._upkeep._thread
    assert thread is not None and thread.is_alive()
    backend.close()
    assert not thread.is_alive()
    assert backend.describe()["keyword_index"]["segments"] == -1  # closed: said, not raised


def test_a_busy_file_is_retried_at_the_next_write(tmp_path):
    path = tmp_path / "busy.db"
    written_in_pieces(path)
    with closing(open_backend(path, busy_timeout_ms=0)) as backend:
        backend._upkeep.quiet_s = 0.1
        blocker = open_backend(path, fts_merge_max_pages=0)
        blocker._connection().execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:
            assert backend._upkeep.wait_idle(30)
            assert index_segments(backend) > 1
            assert backend.describe()["keyword_index"]["last_error"]
        finally:
            blocker._connection().execute("ROLLBACK")
            blocker.close()
        fill(backend, "alice", 2, seed=3)
        assert backend._upkeep.wait_idle(30) and index_segments(backend) == 1


@pytest.mark.parametrize("bad", [-1, "many", True])
def test_a_bad_bound_is_a_config_error_naming_it(bad):
    with pytest.raises(ConfigError, match="fts_merge_max_pages"):
        structure_options({"fts_merge_max_pages": bad}, SqliteSettings, "backends.main")


def test_memory_databases_do_not_start_it():
    backend = SqliteBackend("test", ":memory:")
    backend.initialize()
    try:
        backend.create_many([])
        assert backend._upkeep.enabled is False
    finally:
        backend.close()
