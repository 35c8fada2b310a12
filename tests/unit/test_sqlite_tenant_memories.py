"""The SQLite backend keeps the memories its searches read, per tenant, at the tenant's change count
(``memory_changes``, :mod:`memroute_builtins.backends.sqlite.tenants`), and trusts them without reading their rows
while the count stands. Only speed may depend on that: the keyword leg gives the same hits, in the same order,
with the same scores as the statement that joins every row; any change to a row a memory shows, by this process
or another, is seen by the next read; and a write landing during a search never mixes a rank with an older
memory."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from datetime import timedelta
from pathlib import Path

import apsw
import attrs
import pytest

from memroute.interfaces import MemoryAccess
from memroute.models import Memory, MemoryPatch, MemoryType, NewMemory, SearchQuery, utcnow
from memroute_builtins.backends.sqlite.backend import SqliteBackend
from memroute_builtins.backends.sqlite.schema import fts_query
from memroute_builtins.backends.sqlite.tenants import TenantMemories
from tests.unit.test_sqlite_backend import open_backend as open_sqlite

WORDS = ["postgres", "billing", "marathon", "lisbon", "dashboard", "review", "pipeline", "offsite", "editor", "neovim",
         "coffee", "tea", "budget", "deadline", "migration", "training", "plan", "trip", "language", "code"]
QUERIES = ("postgres billing", "marathon training plan", "trip to lisbon", "code review", "tea or coffee",
           "data pipeline migration", "neovim editor", "budget deadline", "lisbon")


def open_backend(path: Path, **options: object) -> SqliteBackend:
    """Without the get-by-id cache: every read here is a search's (kept memories, or the file)."""
    return open_sqlite(path, cache_size=0, **options)


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[SqliteBackend]:
    with closing(open_backend(tmp_path / "kept.db")) as opened:
        yield opened


@pytest.fixture
def db_path(backend: SqliteBackend) -> Path:
    return Path(backend.path)


def fill(backend: SqliteBackend, tenant: str, count: int, seed: int) -> list[Memory]:
    rng = random.Random(seed)
    now = utcnow()
    news = []
    for n in range(count):
        content = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9)))
        if n % 7 == 0:
            content = "lisbon trip"  # many identical rows: equal ranks, ordered newest first, then by id
        news.append(NewMemory(
            api_key_id=tenant, key=f"{tenant}:{n}", content=content,
            session_id=("s1" if n % 3 == 0 else "s2" if n % 3 == 1 else None),
            type=(MemoryType.EPISODIC if n % 2 else MemoryType.FACTUAL),
            expires_at=(now - timedelta(minutes=1) if n % 11 == 0 else now + timedelta(days=1) if n % 5 == 0
                        else None)))
    return backend.create_many(news)


def hits(backend: SqliteBackend, query: SearchQuery) -> list[tuple[str, float]]:
    return [(hit.memory.id, hit.score) for hit in backend.keyword(query)]


def joined(backend: SqliteBackend, query: SearchQuery) -> list[tuple[str, float]]:
    """The keyword leg as one statement joining every row (what the kept memories must reproduce)."""
    owner = query.api_key_id.encode("utf-8").hex().upper()
    match = f'owner : "{owner}" AND {{content key}} : ({fts_query(query.text)})'
    return [(hit.memory.id, hit.score) for hit in backend._keyword_joined(query, match)]


def test_kept_memories_give_the_joined_statements_hits_order_and_scores(backend):
    fill(backend, "alice", 300, seed=1)
    fill(backend, "bob", 200, seed=2)
    now = utcnow()
    for text in QUERIES:
        for limit in (1, 5, 40, 100):
            for scope in ({}, {"session_id": "s1"}, {"retention_days": 1}, {"now": now + timedelta(hours=30)}):
                for tenant in ("alice", "bob"):
                    query = SearchQuery(api_key_id=tenant, text=text, limit=limit, **scope)  # type: ignore[arg-type]
                    expected = joined(backend, query)
                    assert hits(backend, query) == expected, (text, limit, scope, tenant)  # rows read, then kept
                    assert hits(backend, query) == expected, (text, limit, scope, tenant)  # from the kept ones
    assert backend._tenants.stats()["tenants"] == 2


def test_kept_memories_0_reads_every_row_every_search(db_path, monkeypatch):
    backend = open_backend(db_path, kept_memories=0)
    try:
        fill(backend, "a", 40, seed=4)
        query = SearchQuery(api_key_id="a", text="lisbon trip", limit=10)
        first = hits(backend, query)
        assert first == joined(backend, query) and len(first) == 10
        reads: list[str] = []
        original = backend._read
        monkeypatch.setattr(backend, "_read", lambda sql, *a, **kw: reads.append(sql) or original(sql, *a, **kw))
        assert hits(backend, query) == first
        ids = [memory_id for memory_id, _ in first]
        assert set(backend.get_many_owned("a", ids)) == set(ids) and backend.get_many_owned("b", ids) == {}
        assert len(reads) == 3 and "JOIN memories" in reads[0] and backend._tenants.stats()["kept"] == 0
    finally:
        backend.close()


def test_equal_ranks_come_newest_first_then_by_id(backend):
    twins = [backend.create(NewMemory(api_key_id="a", key=f"k{n}", content="same words here")) for n in range(12)]
    query = SearchQuery(api_key_id="a", text="same words", limit=12)
    assert len({score for _, score in hits(backend, query)}) == 1
    expected = sorted(twins, key=lambda m: m.id)
    expected.sort(key=lambda m: m.created_at, reverse=True)
    assert [memory_id for memory_id, _ in hits(backend, query)] == [m.id for m in expected] == [
        memory_id for memory_id, _ in joined(backend, query)]


@pytest.mark.parametrize("limit", [1, 3, 5, 11, 12, 13, 20])
def test_a_limit_that_cuts_a_run_of_equal_ranks_takes_its_newest(backend, limit):
    """The leg stops looking at the shortlist once it holds ``limit`` memories and the run of equal ranks the last
    one is in has ended: a limit inside the run still gets the run's newest (then smallest ids), as the joined
    statement does, and one past it the best of the next rank."""
    best = backend.create(NewMemory(api_key_id="a", key="best", content="same words same words"))
    twins = [backend.create(NewMemory(api_key_id="a", key=f"k{n}", content="same words here")) for n in range(12)]
    backend.create_many([NewMemory(api_key_id="a", key=f"far{n}", content=f"same {n} words here and then some more")
                         for n in range(6)])
    query = SearchQuery(api_key_id="a", text="same words", limit=limit)
    expected = sorted(twins, key=lambda m: m.id)
    expected.sort(key=lambda m: m.created_at, reverse=True)
    got = hits(backend, query)
    assert got == joined(backend, query) and len(got) == min(limit, 19)
    assert [memory_id for memory_id, _ in got[:13]] == [best.id, *[m.id for m in expected]][:limit]
    assert hits(backend, query) == got  # again from the kept memories


def test_a_warm_search_reads_no_rows_and_a_changed_count_reads_them_again(backend, monkeypatch):
    fill(backend, "a", 80, seed=3)
    query = SearchQuery(api_key_id="a", text="postgres billing", limit=20)
    first = backend.keyword(query)
    reads: list[str] = []
    original = backend._read
    monkeypatch.setattr(backend, "_read", lambda sql, *args, **kw: reads.append(sql) or original(sql, *args, **kw))
    assert backend.keyword(query) == first
    assert not [sql for sql in reads if "FROM memories" in sql], reads
    assert backend.get_many_owned("a", [hit.memory.id for hit in first]) == {h.memory.id: h.memory for h in first}
    assert not [sql for sql in reads if "FROM memories" in sql], reads
    other = open_backend(Path(backend.path))  # another process: its write moves the count, unseen until read
    try:
        other.update(first[-1].memory.id, MemoryPatch(metadata={"moved": True}))
    finally:
        other.close()
    reads.clear()
    again = backend.keyword(query)
    assert len([sql for sql in reads if "FROM memories" in sql]) == 1  # everything was read again, in one query
    assert again[-1].memory.metadata == {"moved": True} and again[0].memory == first[0].memory


def test_own_writes_keep_what_they_did_not_touch(backend, monkeypatch):
    """This process's writes move the count too; the entry follows them (TenantMemories.advance) instead of
    being thrown away, so the search after a chat turn's writes (its facts, the injected memories' accesses)
    reads only what the turn changed. What it reads is what a fresh read of the file gives."""
    fill(backend, "a", 80, seed=5)
    fill(backend, "b", 20, seed=6)
    query = SearchQuery(api_key_id="a", text="lisbon trip", limit=30)
    first = backend.keyword(query)
    ids = [hit.memory.id for hit in first]
    read: list[int] = []
    original = backend._read_rowids

    def counting(tenant: str, entry: object, stamp: int, rowids: list[int]) -> dict[int, Memory]:
        read.extend(rowids)
        return original(tenant, entry, stamp, rowids)  # type: ignore[arg-type]

    monkeypatch.setattr(backend, "_read_rowids", counting)

    def rows_read() -> int:
        count = len(read)
        read.clear()
        return count

    at = utcnow()
    backend.record_access("a", {ids[0]: MemoryAccess(count=2, at=at), ids[1]: MemoryAccess(count=1, at=at)})
    added = backend.create(NewMemory(api_key_id="a", key="new", content="lisbon trip again"))
    backend.create_many([NewMemory(api_key_id="a", key="new2", content="another lisbon trip")])
    backend.update(ids[2], MemoryPatch(content="lisbon trip, updated"))
    assert backend.delete(ids[3])
    backend.create(NewMemory(api_key_id="b", key="theirs", content="lisbon trip of b"))
    found = backend.keyword(query)
    assert rows_read() == 3  # the two new rows and the updated one; nothing else
    fresh = open_backend(Path(backend.path))
    try:
        assert [(h.memory, h.score) for h in found] == [(h.memory, h.score) for h in fresh.keyword(query)]
        assert {h.memory.id for h in found} >= {added.id, ids[0], ids[2]} and ids[3] not in {h.memory.id for h in found}
        accessed = {h.memory.id: h.memory for h in found}[ids[0]]
        assert (accessed.access_count, accessed.last_accessed_at) == (2, fresh.get(ids[0]).last_accessed_at)
        assert backend.get_many_owned("a", ids[:3]) == fresh.get_many_owned("a", ids[:3])
    finally:
        fresh.close()
    assert rows_read() == 0


def test_an_own_write_after_another_processes_leaves_the_entry_to_be_replaced(db_path):
    backend, other = open_backend(db_path), open_backend(db_path)
    try:
        mine = fill(backend, "a", 30, seed=9)
        query = SearchQuery(api_key_id="a", text="lisbon trip", limit=30)
        first = backend.keyword(query)
        other.update(first[0].memory.id, MemoryPatch(content="lisbon trip, changed elsewhere"))
        backend.update(mine[1].id, MemoryPatch(content="lisbon trip, changed here"))  # its entry was behind
        contents = {hit.memory.id: hit.memory.content for hit in backend.keyword(query)}
        assert contents[first[0].memory.id] == "lisbon trip, changed elsewhere"
        assert contents[mine[1].id] == "lisbon trip, changed here"
    finally:
        backend.close()
        other.close()


def test_a_read_that_an_own_write_overtook_is_not_kept(backend, monkeypatch):
    """get_many_owned reads the count, then the rows it lacks; when this process's write of one of those rows
    commits in between (and brings the entry to the new count), what the reader read is not kept."""
    stored = backend.create(NewMemory(api_key_id="a", key="k", content="before"))
    backend.keyword(SearchQuery(api_key_id="a", text="before", limit=5))  # the tenant has an entry now
    original = backend._read

    def overtaken(sql: str, *args: object, **kw: object) -> list[tuple[object, ...]]:
        rows = original(sql, *args, **kw)  # type: ignore[arg-type]
        if "json_each(?1)" in sql:  # the missing rows were read: now the write lands
            monkeypatch.setattr(backend, "_read", original)
            backend.update(stored.id, MemoryPatch(content="after"))
        return rows

    entry = backend._tenants.entry("a", backend._changes("a"))
    entry.by_id.clear()  # so the reader has to read the row (the rest of the entry is as the count says)
    entry.by_rowid.clear()
    entry.rowid_of.clear()
    monkeypatch.setattr(backend, "_read", overtaken)
    assert backend.get_many_owned("a", [stored.id])[stored.id].content == "before"  # read before the write
    assert backend.get_many_owned("a", [stored.id])[stored.id].content == "after"


def test_a_put_that_moves_a_memory_to_another_tenant_leaves_both_right(backend):
    mine = backend.create(NewMemory(api_key_id="a", key="k", content="lisbon trip"))
    query_a = SearchQuery(api_key_id="a", text="lisbon", limit=5)
    query_b = SearchQuery(api_key_id="b", text="lisbon", limit=5)
    backend.create(NewMemory(api_key_id="b", key="other", content="a trip"))
    assert [h.memory.id for h in backend.keyword(query_a)] == [mine.id] and backend.keyword(query_b) == []
    backend.put(attrs.evolve(mine, api_key_id="b"))
    assert backend.keyword(query_a) == [] and backend.get_many_owned("a", [mine.id]) == {}
    assert [h.memory.api_key_id for h in backend.keyword(query_b)] == ["b"]
    assert backend.get_many_owned("b", [mine.id])[mine.id].api_key_id == "b"


@pytest.mark.parametrize("change", ["metadata", "access", "content", "expiry", "delete", "session"])
def test_another_process_changing_any_shown_column_is_seen_by_the_next_read(db_path, change):
    backend, other = open_backend(db_path), open_backend(db_path)  # other: another process, seen only through the file
    try:
        stored = backend.create(NewMemory(api_key_id="a", key="tea", content="likes green tea"))
        query = SearchQuery(api_key_id="a", text="green tea", limit=5)
        assert backend.keyword(query)[0].memory == stored
        assert backend.get_many_owned("a", [stored.id])[stored.id] == stored
        if change == "metadata":
            other.update(stored.id, MemoryPatch(metadata={"category": "drink"}))
        elif change == "access":
            other.record_access("a", {stored.id: MemoryAccess(count=4, at=utcnow())})
        elif change == "content":
            other.update(stored.id, MemoryPatch(content="likes green tea with mint"))
        elif change == "expiry":
            other.update(stored.id, MemoryPatch(expires_at=utcnow() - timedelta(seconds=1)))
        elif change == "session":
            other.update(stored.id, MemoryPatch(session_id="s9"))
        else:
            other.delete(stored.id)
        now = other.get(stored.id)
        found = backend.keyword(query)
        owned = backend.get_many_owned("a", [stored.id])
        if now is None:
            assert found == [] and owned == {}
        else:
            assert owned[stored.id] == now
            assert [hit.memory for hit in found] == ([] if change == "expiry" else [now])
    finally:
        backend.close()
        other.close()


@pytest.mark.parametrize(("column", "value"), [
    ("memory_rowid", 9999), ("id", "00000000-0000-4000-8000-000000000999"), ("session_id", "s"),
    ("type", "episodic"), ("key", "k2"), ("content", "two"), ("metadata", '{"a":1}'),
    ("created_at", "2020-01-01T00:00:00.000000Z"), ("updated_at", "2020-01-01T00:00:00.000000Z"),
    ("expires_at", "2099-01-01T00:00:00.000000Z"), ("access_count", 7),
    ("last_accessed_at", "2020-01-01T00:00:00.000000Z")])
def test_a_change_to_any_column_a_memory_shows_moves_the_count(db_path, backend, column, value):
    stored = backend.create(NewMemory(api_key_id="a", key="k", content="one"))
    count = backend._changes("a")
    raw = apsw.Connection(str(db_path))  # a hand edit, or a tool that knows nothing of memroute
    raw.execute(f"UPDATE memories SET {column} = ? WHERE id = ?", (value, stored.id))
    raw.close()
    assert backend._changes("a") == count + 1


def test_moving_a_memory_to_another_tenant_moves_both_counts(db_path, backend):
    stored = backend.create(NewMemory(api_key_id="a", key="k", content="one"))
    before = backend._changes("a"), backend._changes("b")
    backend._connection().execute("UPDATE memories SET api_key_id = 'b' WHERE id = ?", (stored.id,))
    assert (backend._changes("a"), backend._changes("b")) == (before[0] + 1, before[1] + 1)


def test_marking_rows_indexed_keeps_the_count(backend):
    stored = backend.create(NewMemory(api_key_id="a", key="k", content="one"))
    count = backend._changes("a")
    assert count > 0 and backend._changes("b") == 0
    assert backend.mark_indexed([stored]) == 1
    assert backend._changes("a") == count  # needs_reindex is no column a memory shows
    backend.create(NewMemory(api_key_id="b", key="k", content="bob's"))
    assert backend._changes("a") == count and backend._changes("b") > 0


def test_a_write_landing_during_a_search_falls_back_to_the_joined_statement(db_path, monkeypatch):
    backend, other = open_backend(db_path), open_backend(db_path)
    try:
        stored = backend.create(NewMemory(api_key_id="a", key="tea", content="likes green tea"))
        query = SearchQuery(api_key_id="a", text="green tea", limit=5)
        assert backend.keyword(query)[0].memory == stored  # kept
        original = backend._read
        shortlists = []

        def racing(sql, *args, **kw):
            rows = original(sql, *args, **kw)
            if sql.startswith("SELECT rowid, bm25") and not shortlists:
                shortlists.append(rows)  # between the shortlist and the second look at the count
                other.update(stored.id, MemoryPatch(content="likes green tea and green green tea"))
            return rows

        monkeypatch.setattr(backend, "_read", racing)
        fallbacks = []
        joined_statement = SqliteBackend._keyword_joined
        monkeypatch.setattr(SqliteBackend, "_keyword_joined",
                            lambda self, q, m: fallbacks.append(1) or joined_statement(self, q, m))
        found = backend.keyword(query)
        assert fallbacks == [1]
        assert found[0].memory.content == "likes green tea and green green tea"
        assert backend._tenants.stats()["kept"] == 0  # the entry kept under the old count is gone
    finally:
        backend.close()
        other.close()


def test_another_tenants_rows_in_a_shortlist_are_never_returned(backend, monkeypatch):
    """A tenant alone in its file searches without the owner term (``_sole_tenant``); while that look is stale, the
    shortlist can hold another tenant's new rows. They are read once, known as foreign, and never returned."""
    mine = backend.create(NewMemory(api_key_id="a", key="k", content="ramen once"))
    assert backend._sole_tenant("a")
    backend.create_many([NewMemory(api_key_id="b", key=f"b{n}", content="ramen ramen ramen") for n in range(30)])
    query = SearchQuery(api_key_id="a", text="ramen", limit=5)
    for _ in range(2):
        assert [hit.memory.id for hit in backend.keyword(query)] == [mine.id]
    entry = backend._tenants.entry("a", backend._changes("a"))
    assert len(entry.foreign) == 30 and set(entry.by_id) == {mine.id}
    assert backend.get_many_owned("a", [m.id for m in backend.iter_all("b")]) == {}


def test_a_reused_rowid_once_another_tenants_is_found_after_an_own_write(backend):
    """SQLite may give a new row the rowid of a deleted one. Another tenant's deleted row does not move this
    tenant's count, so its rowid may still be known as foreign when this tenant's next row takes it."""
    mine = backend.create(NewMemory(api_key_id="a", key="k", content="ramen once"))
    assert backend._sole_tenant("a")  # for the next second: no owner term, other tenants' rows in the shortlist
    theirs = backend.create(NewMemory(api_key_id="b", key="k", content="ramen ramen"))
    query = SearchQuery(api_key_id="a", text="ramen", limit=5)
    assert [hit.memory.id for hit in backend.keyword(query)] == [mine.id]  # theirs is known as foreign now

    def rowid(memory: Memory) -> int:
        rows = backend._connection().execute("SELECT memory_rowid FROM memories WHERE id = ?", (memory.id,))
        return int(rows.fetchall()[0][0])

    taken = rowid(theirs)
    assert backend.delete(theirs.id)
    again = backend.create(NewMemory(api_key_id="a", key="k2", content="ramen twice"))
    assert rowid(again) == taken
    assert {hit.memory.id for hit in backend.keyword(query)} == {mine.id, again.id}


def test_the_bound_drops_the_least_recent_tenant_and_never_keeps_huge_memories():
    kept = TenantMemories(4)
    memory = Memory.trusted(**{**_fields(), "content": "small"})
    huge = Memory.trusted(**{**_fields(), "content": "x" * (kept.max_chars + 1)})
    a = kept.entry("a", 1)
    kept.keep("a", a, [(1, memory), (2, attrs.evolve(memory, id=_id(2))), (3, huge)], stamp=1)
    assert set(a.by_rowid) == {1, 2}  # the huge one is read each time
    b = kept.entry("b", 1)
    kept.keep("b", b, [(n, attrs.evolve(memory, id=_id(n))) for n in range(10, 14)], stamp=1)
    assert kept.stats()["tenants"] == 1 and len(b.by_rowid) == 4  # a gave way, b fills the bound
    kept.keep("b", b, [(20, attrs.evolve(memory, id=_id(20)))], stamp=1)
    assert 20 not in b.by_rowid  # a tenant larger than the bound keeps what fits
    newer = kept.entry("b", 2)
    assert newer is not b and not newer.by_rowid and kept.stats()["kept"] == 0
    older = kept.entry("b", 1)  # a reader that read the count before the latest write: an entry of its own
    kept.keep("b", older, [(30, attrs.evolve(memory, id=_id(30)))], stamp=1)
    assert kept.entry("b", 2) is newer and not newer.by_rowid


def test_after_an_own_write_a_reader_at_the_old_count_adds_nothing():
    """The race advance() closes: a reader read the count (1) and then a row, this process's write committed and
    moved the entry to 2; what the reader read may be the row before the write, so it must not land."""
    kept = TenantMemories(100)
    memory = Memory.trusted(**{**_fields(), "content": "before the write"})
    entry = kept.entry("a", 1)
    kept.keep("a", entry, [(1, memory)], stamp=1)
    fresh = attrs.evolve(memory, content="after the write")
    kept.advance("a", 1, 2, changed=[_id(7)], fresh=[(1, fresh)])
    assert entry.stamp == 2 and entry.by_rowid == {1: fresh} and kept.entry("a", 2) is entry
    kept.keep("a", entry, [(1, memory), (8, attrs.evolve(memory, id=_id(8)))], stamp=1)  # the late reader
    assert entry.by_rowid == {1: fresh}
    kept.advance("a", 1, 3, changed=[memory.id])  # not at 1 any more: left for the next reader to replace
    assert entry.stamp == 2 and entry.by_rowid == {1: fresh}
    kept.advance("a", 2, 3, changed=[memory.id])
    assert entry.stamp == 3 and not entry.by_rowid and kept.stats()["kept"] == 0


def _id(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def _fields() -> dict[str, object]:
    now = utcnow()
    return {"id": _id(1), "api_key_id": "a", "session_id": None, "type": MemoryType.FACTUAL, "key": "k",
            "content": "", "metadata": {}, "created_at": now, "updated_at": now, "expires_at": None,
            "access_count": 0, "last_accessed_at": None}


def test_searches_and_writes_from_threads_and_another_process_leave_every_kept_memory_true(db_path):
    """Searches (keyword, get_many_owned) on two threads while a thread of this process and another process
    write (creates, updates, deletes, accesses) for two tenants. Every hit is the searching tenant's; afterwards
    every memory kept at a tenant's current count is its row, and searches equal a fresh backend's."""
    backend, other = open_backend(db_path), open_backend(db_path)
    fill(backend, "a", 120, seed=7)
    fill(backend, "b", 60, seed=8)
    stop, errors = threading.Event(), []

    def guarded(work: Callable[[random.Random], None], seed: int) -> Callable[[], None]:
        def run() -> None:
            rng = random.Random(seed)
            try:
                while not stop.is_set():
                    work(rng)
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)
        return run

    def search(rng: random.Random) -> None:
        tenant = rng.choice(["a", "b"])
        found = backend.keyword(SearchQuery(api_key_id=tenant, text=rng.choice(QUERIES), limit=rng.choice([5, 50])))
        assert all(hit.memory.api_key_id == tenant for hit in found)
        owned = backend.get_many_owned(tenant, [hit.memory.id for hit in found])
        assert all(memory.api_key_id == tenant for memory in owned.values())

    def write(writer: SqliteBackend) -> Callable[[random.Random], None]:
        def work(rng: random.Random) -> None:
            tenant = rng.choice(["a", "b"])
            ids = [m.id for m in writer.iter_all(tenant)]
            action = rng.randrange(4)
            if action == 0 or not ids:
                content = " ".join(rng.sample(WORDS, 3))
                writer.create(NewMemory(api_key_id=tenant, key=f"w{rng.random()}", content=content))
            elif action == 1:
                writer.update(rng.choice(ids), MemoryPatch(content=" ".join(rng.sample(WORDS, 4))))
            elif action == 2:
                writer.record_access(tenant, {i: MemoryAccess(count=1, at=utcnow()) for i in rng.sample(ids, 3)})
            else:
                writer.delete(rng.choice(ids))
        return work

    threads = [threading.Thread(target=guarded(search, n)) for n in range(2)]
    threads += [threading.Thread(target=guarded(write(writer), seed)) for writer, seed in ((backend, 10), (other, 11))]
    try:
        for thread in threads:
            thread.start()
        time.sleep(1.5)
        stop.set()
        for thread in threads:
            thread.join()
        assert not errors, errors
        for tenant in ("a", "b"):
            for text in QUERIES:
                backend.keyword(SearchQuery(api_key_id=tenant, text=text, limit=50))  # the entries at the final count
            entry = backend._tenants.entry(tenant, backend._changes(tenant))
            assert entry.by_id and all(other.get(memory_id) == memory for memory_id, memory in entry.by_id.items())
            for text in QUERIES:
                query = SearchQuery(api_key_id=tenant, text=text, limit=50)
                assert [(h.memory, h.score) for h in backend.keyword(query)] == [
                    (h.memory, h.score) for h in other.keyword(query)]
    finally:
        stop.set()
        backend.close()
        other.close()
