"""The SQLite backend's own behaviour: schema, FTS sync, query sanitising, cache, threads, errors."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import apsw
import attrs
import pytest

from memroute.config.settings import structure_options
from memroute.errors import BackendUnavailableError, ConfigError, ValidationError
from memroute.interfaces import ComponentContext, MemoryAccess
from memroute.models import ListFilter, Memory, MemoryPatch, NewMemory, SearchQuery, new_memory_id, utcnow
from memroute.plugins import make_plugin_manager
from memroute.testing.backend import FTS_SYNTAX_QUERIES
from memroute_builtins.backends.sqlite.backend import (
    MAX_QUERY_TERMS,
    SCHEMA_VERSION,
    SqliteBackend,
    SqliteSettings,
    fts_query,
)


def open_backend(path: Path, **options: object) -> SqliteBackend:
    backend = SqliteBackend("test", path, settings=SqliteSettings(**options))  # type: ignore[arg-type]
    backend.initialize()
    return backend


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "unit.db"


@pytest.fixture
def backend(db_path: Path):
    backend = open_backend(db_path)
    yield backend
    backend.close()


def scalar(backend: SqliteBackend, sql: str, *bindings: object) -> object:
    return backend._connection().execute(sql, bindings).fetchall()[0][0]


def fts_in_step(backend: SqliteBackend) -> None:
    """The index holds exactly one document per memory and agrees with the table (rank=1 compares both)."""
    indexed = scalar(backend, "SELECT count(*) FROM memory_fts_docsize")
    assert indexed == scalar(backend, "SELECT count(*) FROM memories"), "orphan or missing FTS documents"
    backend._connection().execute("INSERT INTO memory_fts(memory_fts, rank) VALUES ('integrity-check', 1)")


def add(backend: SqliteBackend, key: str, content: str, api_key_id: str = "a", **fields: object) -> Memory:
    return backend.create(NewMemory(api_key_id=api_key_id, key=key, content=content, **fields))  # type: ignore[arg-type]


# --- schema and migrations -----------------------------------------------------------------------------

def test_schema_version_and_objects(backend: SqliteBackend) -> None:
    assert scalar(backend, "PRAGMA user_version") == SCHEMA_VERSION
    names = {r[0] for r in backend._connection().execute("SELECT name FROM sqlite_schema")}
    assert {"memories", "memory_fts", "settings", "idx_memories_owner_key", "memory_fts_ai", "memory_fts_ad",
            "memory_fts_au", "idx_memories_needs_reindex", "idx_memories_expires"} <= names
    fts_sql = scalar(backend, "SELECT sql FROM sqlite_schema WHERE name = 'memory_fts'")
    assert "content='memory_fts_source', content_rowid='memory_rowid'" in str(fts_sql)
    trigger = str(scalar(backend, "SELECT sql FROM sqlite_schema WHERE name = 'memory_fts_au'"))
    assert "WHEN old.content IS NOT new.content OR old.key IS NOT new.key OR old.api_key_id" in trigger


def test_timestamps_are_fixed_width_utc_text(backend: SqliteBackend) -> None:
    memory = add(backend, "k", "v", expires_at=utcnow() + timedelta(days=1))
    row = backend._connection().execute(
        "SELECT created_at, updated_at, expires_at FROM memories WHERE id = ?", (memory.id,)).fetchall()[0]
    for value in row:
        assert len(value) == 27 and value.endswith("Z") and value[10] == "T", value


def test_reopen_keeps_schema_and_refuses_newer_versions(db_path: Path) -> None:
    open_backend(db_path).close()
    again = open_backend(db_path)
    assert scalar(again, "PRAGMA user_version") == SCHEMA_VERSION
    again._connection().pragma("user_version", SCHEMA_VERSION + 1)
    again.close()
    with pytest.raises(BackendUnavailableError, match="newer than this memroute supports"):
        open_backend(db_path)


def test_settings_table(backend: SqliteBackend) -> None:
    assert backend.get_setting("embedding.signature") is None
    backend.set_setting("embedding.signature", "hashing:v1:64")
    backend.set_setting("embedding.signature", "hashing:v1:128")
    assert backend.get_setting("embedding.signature") == "hashing:v1:128"
    backend.set_setting("embedding.signature", None)
    assert backend.get_setting("embedding.signature") is None


# --- FTS stays in step ---------------------------------------------------------------------------------

def test_fts_in_step_after_every_write_path(backend: SqliteBackend) -> None:
    first = add(backend, "k1", "alpha bravo")
    add(backend, "k1", "charlie delta")  # upsert
    second = add(backend, "k2", "echo foxtrot")
    backend.update(second.id, MemoryPatch(content="golf hotel"))
    backend.update(second.id, MemoryPatch(key="k2-renamed"))
    backend.update(second.id, MemoryPatch(metadata={"only": "metadata"}))
    now = utcnow()
    backend.put(Memory(id=new_memory_id(), api_key_id="a", key="k1", content="india juliet", created_at=now,
                       updated_at=now))  # evicts `first`
    backend.put_many([Memory(id=new_memory_id(), api_key_id="b", key=f"bulk{i}", content=f"kilo {i}",
                             created_at=now, updated_at=now) for i in range(20)])
    backend.delete(second.id)
    fts_in_step(backend)
    assert backend.get(first.id) is None
    for gone in ("alpha", "charlie", "echo", "golf"):
        assert backend.search(SearchQuery(api_key_id="a", text=gone)) == [], f"stale FTS row for {gone!r}"
    assert [h.memory.content for h in backend.search(SearchQuery(api_key_id="a", text="juliet"))] == ["india juliet"]


def test_update_trigger_ignores_access_and_metadata_changes(backend: SqliteBackend) -> None:
    memories = [add(backend, f"k{i}", f"content number {i}") for i in range(5)]
    backend._connection().execute("INSERT INTO memory_fts(memory_fts) VALUES ('optimize')")
    rows_before = scalar(backend, "SELECT count(*) FROM memory_fts_data")
    for _ in range(50):
        backend.record_access("a", {m.id: MemoryAccess(count=1, at=utcnow()) for m in memories})
    backend.update(memories[0].id, MemoryPatch(metadata={"x": 1}, type="episodic", session_id="s"))
    assert scalar(backend, "SELECT count(*) FROM memory_fts_data") == rows_before, "FTS rewritten by telemetry"
    assert scalar(backend, "SELECT access_count FROM memories WHERE id = ?", memories[1].id) == 50
    fts_in_step(backend)


def test_out_of_step_index_is_rebuilt_on_open(db_path: Path) -> None:
    backend = open_backend(db_path)
    memory = add(backend, "k", "zulu yankee")
    backend._connection().execute("INSERT INTO memory_fts(memory_fts) VALUES ('delete-all')")  # simulate drift
    assert backend.search(SearchQuery(api_key_id="a", text="zulu")) == []
    backend.close()
    reopened = open_backend(db_path)
    try:
        assert reopened.fts_rebuilt
        assert [h.memory.id for h in reopened.search(SearchQuery(api_key_id="a", text="zulu"))] == [memory.id]
        fts_in_step(reopened)
    finally:
        reopened.close()


# --- query sanitising ----------------------------------------------------------------------------------

def test_fts_query_quotes_terms_and_joins_with_or() -> None:
    assert fts_query('NEAR(cat "dog") AND -bird*') == '"NEAR" OR "cat" OR "dog" OR "AND" OR "bird"'
    assert fts_query("Cat cat CAT") == '"Cat"'
    assert fts_query("café 東京 🐍 ___ ::") == '"café" OR "東京"'
    assert fts_query("   ") == "" and fts_query("*-^:()") == ""
    many = " ".join(f"w{i}" for i in range(100))
    assert fts_query(many).count(" OR ") == MAX_QUERY_TERMS - 1
    assert fts_query("x" * 5000 + " tail") == '"' + "x" * 4096 + '"'


@pytest.mark.parametrize("text", [*FTS_SYNTAX_QUERIES, "a" * 10_000, "\u202e rtl override", "ß", "\x01\x1f ctl"])
def test_no_user_text_raises_in_match(backend: SqliteBackend, text: str) -> None:
    add(backend, "k", "straße ramen TypeScript")
    for strategy in ("semantic", "hybrid", "exact"):
        backend.search(SearchQuery(api_key_id="a", text=text, strategy=strategy))


@pytest.mark.parametrize("text", ["\x00", "x \ud800", "\udfff tail"])
def test_unstorable_query_text_is_refused_before_the_backend(text: str) -> None:
    with pytest.raises(ValidationError, match="query"):
        SearchQuery(api_key_id="a", text=text)


def test_or_of_terms_finds_what_strict_and_misses(backend: SqliteBackend) -> None:
    """The measurement behind OR: natural questions rarely have every word inside one memory."""
    facts = {
        "pet": "My cat is named Miso",
        "editor": "I use Neovim with a Lua config",
        "lang": "I prefer TypeScript for frontend work",
        "city": "I live in Lisbon since 2019",
        "food": "Favourite food is ramen with garlic",
        "work": "I work as a data engineer at Acme",
        "os": "My laptop runs Arch Linux",
        "music": "I listen to jazz while coding",
    }
    ids = {key: add(backend, key, content).id for key, content in facts.items()}
    questions = {
        "pet": "what is my cat called",
        "editor": "which editor do I use",
        "lang": "what language do I prefer for frontend",
        "city": "where do I live now",
        "food": "what is my favourite food",
        "work": "where do I work",
        "os": "which linux does my laptop run",
        "music": "what music do I listen to",
    }

    def top_hit(match: str) -> str | None:
        rows = backend._connection().execute(
            "SELECT m.id FROM memory_fts JOIN memories m ON m.memory_rowid = memory_fts.rowid "
            "WHERE memory_fts MATCH ? ORDER BY bm25(memory_fts, 1.0, 2.0, 0.0) LIMIT 1", (match,)).fetchall()
        return rows[0][0] if rows else None

    or_found = sum(top_hit(fts_query(q)) == ids[k] for k, q in questions.items())
    and_found = sum(top_hit(fts_query(q).replace(" OR ", " ")) == ids[k] for k, q in questions.items())
    assert or_found == len(questions), f"OR ranked the right memory first for {or_found}/{len(questions)}"
    assert and_found < or_found, f"strict AND found {and_found}, OR {or_found}"


def test_keyword_scores_and_key_weight(backend: SqliteBackend) -> None:
    in_key = add(backend, "editor", "I use Neovim with a long configuration written over many years")
    in_content = add(backend, "tools", "the editor I use is Neovim with a long configuration over years")
    hits = backend.search(SearchQuery(api_key_id="a", text="editor"))
    assert [h.memory.id for h in hits] == [in_key.id, in_content.id]
    assert hits[0].score > hits[1].score > 0


def test_list_query_is_unicode_case_insensitive_and_literal(backend: SqliteBackend) -> None:
    add(backend, "k1", "L'ÉCOLE est fermée")
    add(backend, "k2", "50% off_sale")
    add(backend, "k3", "500 offXsale")
    assert [m.key for m in backend.list(ListFilter(api_key_id="a", query="école")).data] == ["k1"]
    assert [m.key for m in backend.list(ListFilter(api_key_id="a", query="0% OFF_")).data] == ["k2"]


# --- cache ---------------------------------------------------------------------------------------------

def test_cache_is_invalidated_by_every_write(backend: SqliteBackend) -> None:
    memory = add(backend, "k", "v1")
    assert backend.get(memory.id) is not None and backend.get(memory.id).content == "v1"  # type: ignore[union-attr]
    assert backend._cache.hits >= 1
    backend.update(memory.id, MemoryPatch(content="v2"))
    assert backend.get(memory.id).content == "v2"  # type: ignore[union-attr]
    add(backend, "k", "v3")
    assert backend.get(memory.id).content == "v3"  # type: ignore[union-attr]
    backend.put(Memory(id=memory.id, api_key_id="a", key="k", content="v4", created_at=memory.created_at,
                       updated_at=utcnow()))
    assert backend.get(memory.id).content == "v4"  # type: ignore[union-attr]
    replacement = Memory(id=new_memory_id(), api_key_id="a", key="k", content="v5", created_at=utcnow(),
                         updated_at=utcnow())
    backend.put_many([replacement])
    assert backend.get(memory.id) is None, "a memory evicted by put_many is still served from the cache"
    assert backend.get(replacement.id).content == "v5"  # type: ignore[union-attr]
    backend.delete(replacement.id)
    assert backend.get(replacement.id) is None


def test_cache_can_be_disabled(db_path: Path) -> None:
    backend = open_backend(db_path, cache_size=0)
    try:
        memory = add(backend, "k", "v")
        assert backend.get(memory.id) is not None and len(backend._cache) == 0
    finally:
        backend.close()


# --- reindex queue -------------------------------------------------------------------------------------

def test_reindex_queue(backend: SqliteBackend) -> None:
    a, b = add(backend, "a", "one"), add(backend, "b", "two")
    assert [m.id for m in backend.pending_reindex()] == [a.id, b.id]
    assert backend.mark_indexed([a, b.id]) == 2
    assert backend.pending_reindex() == [] and backend.count_pending_reindex() == 0
    backend.update(a.id, MemoryPatch(metadata={"x": 1}))
    assert backend.pending_reindex() == [], "a metadata change must not queue a re-embedding"
    changed = backend.update(a.id, MemoryPatch(content="one, changed"))
    assert [m.id for m in backend.pending_reindex()] == [a.id]
    backend.update(a.id, MemoryPatch(content="changed again"))
    assert backend.mark_indexed([changed]) == 0, "a stale embedding must not clear the flag"  # type: ignore[list-item]
    assert backend.mark_all_for_reindex() == 1 and backend.count_pending_reindex() == 2


# --- independence, threads, errors ---------------------------------------------------------------------

def test_two_files_are_independent_backends(tmp_path: Path) -> None:
    first, second = open_backend(tmp_path / "one.db"), open_backend(tmp_path / "two.db")
    try:
        memory = add(first, "k", "only in one")
        assert second.get(memory.id) is None
        assert second.list(ListFilter(api_key_id="a")).total == 0
        add(second, "k", "only in two")
        assert first.get(memory.id).content == "only in one"  # type: ignore[union-attr]
    finally:
        first.close()
        second.close()


def test_concurrent_writers(backend: SqliteBackend) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def work(worker: int) -> None:
        try:
            barrier.wait()
            for i in range(25):
                add(backend, f"own-{worker}-{i}", f"worker {worker} item {i}")
                add(backend, f"shared-{i % 5}", f"last writer {worker}")  # contended upserts on the same keys
                if i % 5 == 0:
                    backend.search(SearchQuery(api_key_id="a", text="worker item"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert backend.list(ListFilter(api_key_id="a")).total == 4 * 25 + 5
    fts_in_step(backend)


def test_path_in_a_file_is_unavailable_with_a_fix(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with pytest.raises(BackendUnavailableError, match="path"):
        open_backend(blocker / "memroute.db")


def test_directory_as_database_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailableError, match="writable"):
        open_backend(tmp_path)


def test_corrupt_file_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(BackendUnavailableError, match="corrupt"):
        open_backend(path)


def test_locked_database_says_so(backend: SqliteBackend, db_path: Path) -> None:
    impatient = open_backend(db_path, busy_timeout_ms=0)
    other = apsw.Connection(str(db_path))
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(BackendUnavailableError, match="locked"):
            add(impatient, "k", "v")
        with pytest.raises(BackendUnavailableError, match="locked"):
            impatient.update(new_memory_id(), MemoryPatch(content="x"))
        other.execute("ROLLBACK")
        assert add(impatient, "k", "v").content == "v"
    finally:
        other.close()
        impatient.close()


def test_closed_backend_raises_and_health_reports(backend: SqliteBackend) -> None:
    health = backend.health()
    assert health.ok and health.details["memories"] == 0 and health.details["schema_version"] == SCHEMA_VERSION
    backend.close()
    with pytest.raises(BackendUnavailableError, match="initialize"):
        backend.get(new_memory_id())
    assert not backend.health().ok


# --- plugin wiring -------------------------------------------------------------------------------------

def test_registered_as_a_plugin_with_default_path(tmp_path: Path) -> None:
    spec = make_plugin_manager().backends()["sqlite"]
    context = ComponentContext(instance_name="main", data_dir=tmp_path / "data")
    backend = spec.factory(structure_options({}, spec.settings_class, "backends.main"), context)
    try:
        assert isinstance(backend, SqliteBackend) and backend.path == str(tmp_path / "data" / "memroute.db")
        backend.initialize()
        assert (tmp_path / "data" / "memroute.db").exists()
    finally:
        backend.close()


def test_bad_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="synchronous"):
        structure_options({"synchronous": "OFF"}, SqliteSettings, "backends.main")
    with pytest.raises(ConfigError, match="busy_timeout_ms"):
        structure_options({"busy_timeout_ms": -1}, SqliteSettings, "backends.main")
    for bad in (-1, "many", True):
        with pytest.raises(ConfigError, match="kept_memories"):
            structure_options({"kept_memories": bad}, SqliteSettings, "backends.main")
    with pytest.raises(ConfigError):
        structure_options({"pathh": "x.db"}, SqliteSettings, "backends.main")


def test_keyword_owner_token_follows_owner_changes(backend: SqliteBackend) -> None:
    odd = add(backend, "k", "ramen noodles", api_key_id="!!! ☃")  # no word characters: still one owner token
    assert [h.memory.id for h in backend.search(SearchQuery(api_key_id="!!! ☃", text="ramen"))] == [odd.id]
    assert backend.search(SearchQuery(api_key_id="other", text="ramen")) == []
    moved = Memory(id=odd.id, api_key_id="other", key="k", content="ramen noodles", created_at=odd.created_at,
                   updated_at=utcnow())
    backend.put(moved)  # same id, new owner: the FTS owner column must follow
    assert backend.search(SearchQuery(api_key_id="!!! ☃", text="ramen")) == []
    assert [h.memory.id for h in backend.search(SearchQuery(api_key_id="other", text="ramen"))] == [odd.id]
    owner_token = b"other".hex().upper()
    assert backend.search(SearchQuery(api_key_id="other", text=owner_token)) == [], "query text matched the owner"
    fts_in_step(backend)


def test_content_drift_is_found_by_the_full_check(db_path: Path) -> None:
    backend = open_backend(db_path)
    memory = add(backend, "k", "original words")
    connection = backend._connection()
    connection.execute("DROP TRIGGER memory_fts_au")  # a tool that writes around the index
    connection.execute("UPDATE memories SET content = 'replaced text' WHERE id = ?", (memory.id,))
    backend.close()
    reopened = open_backend(db_path)  # small database: the full check runs on every open
    try:
        assert reopened.fts_rebuilt
        assert [h.memory.id for h in reopened.search(SearchQuery(api_key_id="a", text="replaced"))] == [memory.id]
        assert reopened.search(SearchQuery(api_key_id="a", text="original")) == []
    finally:
        reopened.close()


def test_large_database_skips_the_full_check_until_due(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memroute_builtins.backends.sqlite import backend as sqlite_backend

    monkeypatch.setattr(sqlite_backend, "FTS_ALWAYS_CHECK_BELOW", 0)
    backend = open_backend(db_path)
    add(backend, "k", "alpha")
    first = backend.get_setting("sqlite.fts_checked_at")
    backend.close()
    assert first is not None, "the first open must run the full check and record it"
    reopened = open_backend(db_path)
    assert reopened.get_setting("sqlite.fts_checked_at") == first, "the full check ran although it was not due"
    reopened.close()
    monkeypatch.setattr(sqlite_backend, "FTS_FULL_CHECK_INTERVAL_S", -1.0)
    due = open_backend(db_path)
    assert due.get_setting("sqlite.fts_checked_at") != first, "the full check did not run once it was due"
    due.close()


def test_keyword_search_plan_is_driven_by_the_fts_match_under_every_filter(backend):
    """With the retention/session filters the planner once preferred the owner index and re-ran the FTS query
    per row (two orders of magnitude slower). The plan must start from the FTS match."""
    for i in range(50):
        backend.create(NewMemory(api_key_id="a", key=f"k{i}", content=f"trip to Lisbon number {i}"))
    statements: list[str] = []

    def trace(cursor, sql, bindings):
        statements.append(sql)
        return True

    connection = backend._connection()
    connection.exec_trace = trace
    try:
        query = SearchQuery(api_key_id="a", text="Lisbon trip", retention_days=30, session_id=None)
        assert backend.search(query)
    finally:
        connection.exec_trace = None
    sql = next(s for s in statements if "memory_fts MATCH" in s)
    plan = [row[3] for row in connection.execute("EXPLAIN QUERY PLAN " + sql, _bindings_for(sql, query))]
    assert any(step.startswith("SCAN memory_fts VIRTUAL TABLE") for step in plan), plan
    assert not any(("USING INDEX" in step and "memories" in step) or step.startswith("SEARCH m USING INDEX")
                   for step in plan), plan  # memories are looked up by rowid from the FTS shortlist


def _bindings_for(sql: str, query: SearchQuery) -> list[object]:
    from memroute_builtins.backends.sqlite.backend import SqliteBackend

    _where, params = SqliteBackend._scope(query, "m.")
    return ["x", 64, *params, query.limit][: sql.count("?")]


def test_keyword_search_looks_past_a_shortlist_the_filters_empty(backend):
    """The FTS shortlist is ranked before the expiry/retention/session filters; when they remove all of it,
    the search must go deeper rather than return fewer results than exist."""
    past = utcnow() - timedelta(minutes=1)
    for i in range(70):  # best-ranked for "alpha" (term repeated), but expired
        backend.create(NewMemory(api_key_id="a", key=f"x{i}", content="alpha alpha alpha alpha", expires_at=past))
    for i in range(10):
        backend.create(NewMemory(api_key_id="a", key=f"live{i}", content=f"alpha and other words {i}"))
    hits = backend.search(SearchQuery(api_key_id="a", text="alpha", limit=5))
    assert len(hits) == 5 and all(h.memory.key.startswith("live") for h in hits)


def test_keyword_search_reads_only_the_tenants_postings(backend: SqliteBackend, monkeypatch) -> None:
    """The FTS owner match: a tenant's keyword search is one statement over its own postings, however many
    better matches other tenants hold. Without it the shortlist fills with other tenants' rows and the
    search has to count and look deeper (the results stay right, so only this shows the owner match)."""
    for i in range(200):
        add(backend, f"b{i}", f"ramen ramen ramen bowl {i}", api_key_id="b")
    mine = add(backend, "a", "I once had ramen in a long sentence about many other things entirely")
    assert not backend._sole_tenant("a")  # the look at who owns rows (at most once a second) is not counted
    reads: list[str] = []
    original = backend._read

    def counting(sql: str, *args: object, **kwargs: object) -> list[tuple[object, ...]]:
        reads.append(sql)
        return original(sql, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(backend, "_read", counting)
    hits = backend.search(SearchQuery(api_key_id="a", text="ramen", strategy="hybrid", limit=1))
    assert [h.memory.id for h in hits] == [mine.id]
    fts = [sql for sql in reads if "memory_fts" in sql]
    assert len(fts) == 1, f"keyword search by one tenant ran {len(fts)} FTS statements: {fts}"


def test_keyword_search_with_fewer_matches_than_the_limit_is_one_statement(backend: SqliteBackend,
                                                                           monkeypatch) -> None:
    """Fewer matches than ``limit``: the shortlist held every match (it was shorter than its depth), so the
    search neither counts the matches nor looks deeper; the results are every live match, best first."""
    live = [add(backend, f"k{i}", "kayak " * (i + 1) + "trip") for i in range(3)]
    backend.create(NewMemory(api_key_id="a", key="old", content="kayak kayak kayak kayak kayak",
                             expires_at=utcnow() - timedelta(minutes=1)))
    assert backend._sole_tenant("a")  # the look at who owns rows (at most once a second) is not counted
    reads: list[str] = []
    original = backend._read

    def counting(sql: str, *args: object, **kwargs: object) -> list[tuple[object, ...]]:
        reads.append(sql)
        return original(sql, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(backend, "_read", counting)
    hits = backend.keyword(SearchQuery(api_key_id="a", text="kayak", limit=10))
    assert [h.memory.id for h in hits] == [m.id for m in reversed(live)]
    assert all(h.score > 0 for h in hits) and hits[0].score >= hits[-1].score
    assert [sql for sql in reads if "memory_fts" in sql] == [reads[1]], reads  # one FTS statement, no count
    reads.clear()  # again: the memories the first search read are kept at the tenant's change count
    assert backend.keyword(SearchQuery(api_key_id="a", text="kayak", limit=10)) == hits
    assert [sql.split(" FROM ")[1].split()[0] for sql in reads] == ["memory_changes", "memory_fts", "memory_changes"]


# --- the row memo ----------------------------------------------------------------------------------------

def test_search_reuses_a_memory_while_its_row_is_unchanged_and_rebuilds_it_after_any_change(db_path: Path) -> None:
    backend = open_backend(db_path)
    other = open_backend(db_path)  # another process's writes reach this backend only through the file
    try:
        stored = add(backend, "pref:tea", "Likes green tea")
        query = SearchQuery(api_key_id="a", text="green tea", strategy="hybrid", limit=5)
        first = backend.search(query)[0].memory
        assert backend.search(query)[0].memory is first
        assert backend.get_many([stored.id])[stored.id] is first
        other.update(stored.id, MemoryPatch(metadata={"category": "drink"}))  # metadata only: FTS untouched
        changed = backend.search(query)[0].memory
        assert changed is not first and changed.metadata == {"category": "drink"} and first.metadata == {}
        other.update(stored.id, MemoryPatch(content="Likes green tea with mint"))
        assert backend.get_many([stored.id])[stored.id].content == "Likes green tea with mint"
    finally:
        other.close()
        backend.close()


def test_the_row_memo_is_bounded() -> None:
    from memroute_builtins.backends.sqlite.schema import RowMemo

    memo = RowMemo(size=3)
    now = "2026-11-29T14:27:46.123456Z"
    rows = [(new_memory_id(), "a", None, "factual", f"k{i}", f"c{i}", "{}", now, now, None, 0, None) for i in range(5)]
    built = [memo.memory(row) for row in rows]
    assert len(memo._items) == 3 and memo.memory(rows[-1]) is built[-1]
    assert memo.memory(rows[0]) is not built[0] and memo.memory(rows[0]).content == "c0"


def test_the_row_memo_keeps_no_huge_memories() -> None:
    from memroute_builtins.backends.sqlite.schema import RowMemo

    memo = RowMemo()
    now = "2026-11-29T14:27:46.123456Z"
    row = (new_memory_id(), "a", None, "factual", "k", "x" * (RowMemo.max_chars + 1), "{}", now, now, None, 0, None)
    assert memo.memory(row).content == row[5] and memo._items == {}


class _CountingBusy(SqliteBackend):
    """Counts how often a connection of this backend found SQLite's write lock taken (its busy handler ran)."""

    busy = 0

    def _on_open(self, connection: apsw.Connection) -> None:
        super()._on_open(connection)

        def handler(_attempts: int) -> bool:
            type(self).busy += 1
            threading.Event().wait(0.001)
            return True

        connection.set_busy_handler(handler)


def test_writers_of_one_process_take_turns_without_sqlites_busy_backoff(tmp_path: Path) -> None:
    """Eight threads writing at once queue on the backend's lock, never in SQLite's busy handler (which sleeps
    1, 2, 5, 10 ... ms per attempt although a write takes a fraction of a millisecond)."""
    backend = _CountingBusy("main", tmp_path / "busy.db")
    backend.initialize()
    start = threading.Barrier(8)

    def writer(worker: int) -> None:
        start.wait()
        for i in range(40):
            memory = backend.create(NewMemory(api_key_id="t", key=f"k{worker}:{i % 10}", content=f"w{worker} {i}"))
            backend.update(memory.id, MemoryPatch(content=f"w{worker} {i} changed"))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert backend.list(ListFilter(api_key_id="t", limit=1)).total == 80
    assert _CountingBusy.busy == 0
    backend.close()


def test_the_row_memo_keeps_the_parsed_memory_when_only_access_counts_move() -> None:
    from memroute_builtins.backends.sqlite.schema import RowMemo

    memo = RowMemo()
    now = "2026-11-29T14:27:46.123456Z"
    row = (new_memory_id(), "a", None, "factual", "k", "c", '{"category": "x"}', now, now, None, 0, None)
    first = memo.memory(row)
    later = "2026-11-30T08:00:00.000000Z"
    accessed = memo.memory((*row[:10], 3, later))
    assert accessed is not first and accessed.metadata is first.metadata and accessed.content == "c"
    assert (accessed.access_count, accessed.last_accessed_at.isoformat()) == (3, "2026-11-30T08:00:00+00:00")
    assert memo.memory((*row[:10], 3, later)) is accessed
    edited = memo.memory((*row[:5], "c2", *row[6:10], 3, later))
    assert edited.content == "c2" and edited.metadata == {"category": "x"} and edited.metadata is not first.metadata


def test_data_versions_move_with_what_a_search_reads(db_path: Path) -> None:
    backend = open_backend(db_path)
    try:
        assert backend.capabilities.data_versions and backend.data_version("a") == 0
        memory = add(backend, "k", "one")
        seen = [backend.data_version("a")]

        def moved() -> bool:
            seen.append(backend.data_version("a"))
            return seen[-1] != seen[-2]

        assert seen[0] > 0
        add(backend, "k", "one", metadata={"category": "x"})  # re-stated: new updated_at and metadata only
        backend.record_access("a", {memory.id: MemoryAccess(count=2, at=utcnow())})
        assert not moved() and backend.data_version("b") == 0
        backend.update(memory.id, MemoryPatch(content="two"))
        assert moved()
        assert backend.mark_indexed([memory.id]) == 1 and moved()  # its vector landed
        backend.put(attrs.evolve(backend.get(memory.id), session_id="s"))  # type: ignore[arg-type]
        assert moved()
        assert backend.delete(memory.id) and moved()
        add(backend, "other", "bob's", api_key_id="b")
        assert not moved() and backend.data_version("b") > 0
    finally:
        backend.close()
    # A file without the counters (made by a memroute that predates them) gets them when it is opened.
    raw = apsw.Connection(str(db_path))
    raw.execute("DROP TRIGGER memory_version_ai; DROP TRIGGER memory_version_ad; DROP TRIGGER memory_version_au; "
                "DROP TABLE memory_versions; DROP TRIGGER memory_change_ai; DROP TRIGGER memory_change_ad; "
                "DROP TRIGGER memory_change_au; DROP TRIGGER memory_change_ao; DROP TABLE memory_changes")
    raw.close()
    backend = open_backend(db_path)
    try:
        assert backend.data_version("a") == 0 and backend._changes("a") == 0
        add(backend, "again", "three")
        assert backend.data_version("a") == 1 and backend._changes("a") == 1  # the change counts too
    finally:
        backend.close()


def test_candidates_by_id_are_looked_up_by_id_not_by_walking_the_tenant(db_path: Path) -> None:
    """A search's vector candidates are read by their ids: the plan uses the id index, never the owner index (which
    walked every memory of the tenant: 17 ms a search at 100k memories). The owner is still checked."""
    from memroute_builtins.backends.sqlite.schema import _SQL_GET_MANY_OWNED

    backend = open_backend(db_path, kept_memories=0)  # every call reads the rows
    mine = [add(backend, f"k{i}", f"memory number {i}") for i in range(300)]
    theirs = add(backend, "k0", "another tenant's memory", api_key_id="b")
    plan = " ".join(row[3] for row in backend._connection().execute(
        "EXPLAIN QUERY PLAN " + _SQL_GET_MANY_OWNED, ('["x"]', "a")).fetchall())
    assert "(id=?)" in plan and "idx_memories_api_key" not in plan, plan
    wanted = [mine[5].id, mine[250].id, theirs.id]
    assert set(backend.get_many_owned("a", wanted)) == {mine[5].id, mine[250].id}
    assert set(backend.get_many_owned("b", wanted)) == {theirs.id}
    backend.close()
