"""The SQLite storage backend (``type = "sqlite"``): apsw, one file, FTS5 keyword search.

Schema (``PRAGMA user_version`` = 1) — the reference system's ``memories`` table with its defects fixed:

- ``memory_rowid INTEGER PRIMARY KEY`` is the FTS5 ``content_rowid`` from day one, so index rows can never
  point at the wrong memory or go missing (the reference's ``memory_id`` NULL / orphan bugs);
  ``id TEXT UNIQUE`` is memroute's UUID, identical in every backend.
- ``UNIQUE (api_key_id, key)``: the upsert key, enforced and indexed.
- timestamps are fixed-width ISO-8601 UTC text (``2026-11-29T14:27:46.123456Z``) so plain string
  comparison orders them correctly and every filter runs on an index without ``datetime()`` calls.
- ``memory_fts`` is an external-content FTS5 table over ``(content, key, owner)`` (``owner`` = the api key
  as one hex token, so a search intersects the tenant's postings inside FTS5; a tenant alone in its file skips
  that intersection, see ``SqliteBackend._sole_tenant``); insert and delete triggers
  keep it in step, and the update trigger fires only when content, key or owner really change (so bumping
  ``access_count`` never rewrites the index — the reference's 175k-row bloat).
- ``needs_reindex`` (1 on create and on content/key changes) is the retrieval engine's work queue:
  :meth:`SqliteBackend.pending_reindex`, :meth:`~SqliteBackend.mark_indexed`,
  :meth:`~SqliteBackend.mark_all_for_reindex`.
- per-tenant counters moved by triggers in the writing transaction: ``memory_versions`` (what a search reads
  changed: the data version ``augment`` reuses retrievals by) and ``memory_changes`` (anything a memory shows
  changed: what the memories a search keeps are trusted by, :mod:`memroute_builtins.backends.sqlite.tenants`).
- a ``settings`` key/value table for components that keep small state in the same file.

The DDL, SQL and row conversion live in :mod:`memroute_builtins.backends.sqlite.schema`.

Keyword search ranks with bm25 over an **OR of the quoted query terms** (``"cat" OR "called"``). The
reference's sanitiser made an implicit AND, so a natural question ("what is my cat called?") finds nothing
unless every word occurs in one memory. bm25 already rewards memories matching more (and rarer) terms, so
OR keeps the precision at the top and finds what AND drops: on the tests' question set AND found the
relevant memory first for 0 of 8 questions, OR for 8 of 8
(``test_or_of_terms_finds_what_strict_and_misses`` in ``tests/unit/test_sqlite_backend.py``). The key
column weighs twice the content (the reference's keyword scorer gave key matches the same 2:1 weight).
"""

from __future__ import annotations

import builtins
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import apsw
import attrs

import memroute
from memroute.deployment.db import ThreadConnections
from memroute.embedding.ttl_cache import MISSING, TTLCache
from memroute.errors import (
    BackendUnavailableError,
    ConfigError,
    ConflictError,
    MemrouteError,
    ValidationError,
)
from memroute.interfaces import BackendCapabilities, ComponentContext, HistoryNote, MemoryAccess, MemoryBackend
from memroute.models import (
    BackendHit,
    HealthResult,
    HistoryEntry,
    ListFilter,
    ListPage,
    Memory,
    MemoryPatch,
    NewMemory,
    SearchQuery,
    require_id,
    require_ids,
)
from memroute.specs import BackendSpec
from memroute_builtins.backends.sqlite import history as history_sql
from memroute_builtins.backends.sqlite.schema import (
    _COLUMNS,
    _M_COLUMNS,
    _MIGRATIONS,
    _SQL_CHANGES,
    _SQL_DATA_VERSION,
    _SQL_GET,
    _SQL_GET_BY_KEY,
    _SQL_GET_MANY,
    _SQL_GET_MANY_OWNED,
    _SQL_GET_ROWIDS,
    _SQL_INSERT_NEW,
    _SQL_PUT,
    _SQL_PUT_EVICT,
    _SQL_RECORD_ACCESS,
    _SQL_RECORD_ACCESS_RETURNING,
    _SQL_UPDATE,
    ENSURE_CHANGE_COUNTS,
    ENSURE_DATA_VERSIONS,
    MAX_QUERY_CHARS,
    MAX_QUERY_TERMS,
    SCHEMA_VERSION,
    RowMemo,
    WrittenRows,
    _casefold,
    _row_values,
    _to_memory,
    _translate,
    format_ts,
    fts_query,
    parse_ts,
)
from memroute_builtins.backends.sqlite.tenants import TenantEntry, TenantMemories
from memroute_builtins.backends.sqlite.upkeep import KeywordIndexUpkeep

__all__ = [
    "MAX_QUERY_CHARS", "MAX_QUERY_TERMS", "SCHEMA_VERSION", "SqliteBackend", "SqliteSettings", "format_ts", "fts_query",
    "memroute_backends", "parse_ts",
]

DEFAULT_FILE: Final = "memroute.db"
DEFAULT_KEPT_MEMORIES: Final = 20_000
DEFAULT_FTS_MERGE_MAX_PAGES: Final = 1024
KEY_WEIGHT: Final = 2.0
FTS_ALWAYS_CHECK_BELOW: Final = 10_000
"""Databases with at most this many memories get the full FTS check on every open."""
FTS_FULL_CHECK_INTERVAL_S: Final = 86_400.0
_FTS_CHECKED: Final = "sqlite.fts_checked_at"
CONTENT_WEIGHT: Final = 1.0


# --- settings ------------------------------------------------------------------------------------------

def _at_least(low: float) -> Any:
    def check(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low:
            raise ConfigError(f"{attribute.name}: must be a number >= {low:g}, got {value!r}",
                              [(attribute.name, "range")])

    return check


def _synchronous(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value not in ("NORMAL", "FULL"):
        raise ConfigError(f"{attribute.name}: must be NORMAL or FULL, got {value!r}", [(attribute.name, "invalid")])


@attrs.frozen(kw_only=True)
class SqliteSettings:
    """Options of a ``[backends.NAME]`` table with ``type = "sqlite"``."""

    path: str | None = None
    """The database file. Default: ``memroute.db`` in memroute's data directory. ``":memory:"`` works for
    throw-away use (one connection per thread means each thread sees its own database: tests only)."""
    busy_timeout_ms: int = attrs.field(default=5000, validator=_at_least(0))
    """How long a writer waits for another process's write lock before failing."""
    synchronous: str = attrs.field(default="NORMAL", validator=_synchronous)
    """``NORMAL`` (WAL: committed writes survive an application crash) or ``FULL`` (also a power loss)."""
    cache_ttl_s: float = attrs.field(default=60.0, validator=_at_least(0))
    """Lifetime of an entry in the get-by-id cache; 0 disables the cache."""
    cache_size: int = attrs.field(default=500, validator=_at_least(0))
    """Entries in the get-by-id cache (LRU); 0 disables the cache."""
    kept_memories: int = attrs.field(default=DEFAULT_KEPT_MEMORIES, validator=_at_least(0))
    """How many memories searches keep (over all tenants, least recently searched tenant dropped first), trusted
    without reading their rows while the tenant's change count stands; 0 reads every row every search."""
    fts_merge_max_pages: int = attrs.field(default=DEFAULT_FTS_MERGE_MAX_PAGES, validator=_at_least(0))
    """Merge the keyword index into one segment in the background once writes pause, while it has at most this
    many leaf pages (``upkeep``: a query looks each term up in every segment); 0 leaves it to FTS5's merging."""


# --- the backend ---------------------------------------------------------------------------------------

SOLE_TENANT_TTL_S: Final = 1.0
"""How long :meth:`SqliteBackend._sole_tenant` trusts its last look at which tenants own rows."""


class SqliteBackend(MemoryBackend):
    """memroute's embedded default backend. Thread-safe: one apsw connection per thread, every write in a
    ``BEGIN IMMEDIATE`` transaction (so a read-then-write upsert never races another writer)."""

    in_process = True  # a SQLite file, and the Python that builds memories from its rows

    capabilities = BackendCapabilities(bounded_latency=True, reindex_markers=True, access_tracking=True,
                                       data_versions=True, batch_create=True, tenant_routing=True, history=True)
    type_name = "sqlite"

    def __init__(self, name: str, path: str | Path, *, settings: SqliteSettings | None = None,
                 prepare_connection: Any = None) -> None:
        super().__init__(name)
        self.settings = settings or SqliteSettings()
        self.path = str(path)
        self._prepare = prepare_connection
        self._cache: TTLCache[str, Memory] = TTLCache(self.settings.cache_size, self.settings.cache_ttl_s)
        self._generation = 0
        self._cache_lock = threading.Lock()
        self._rows = RowMemo()
        self._tenants = TenantMemories(int(self.settings.kept_memories))
        """The memories searches read, per tenant, trusted while its change count stands (see ``tenants``)."""
        self._written = WrittenRows()
        self._sole: tuple[float, str | None] = (-SOLE_TENANT_TTL_S, None)
        """(when it was checked, the file's only tenant or ``None``): see :meth:`_sole_tenant`."""
        self._pool: ThreadConnections | None = None
        self._upkeep = self._new_upkeep()
        """Merges the keyword index's segments once writes pause (see ``upkeep``)."""
        self._init_lock = threading.Lock()
        self._write_lock = threading.RLock()
        """Writers of this process take turns here before SQLite's write lock. Without it, threads contending
        for the database's one write lock each sleep in SQLite's busy handler (1, 2, 5, 10, ... ms backoff)
        although the write they wait for takes ~0.3 ms: eight concurrent HTTP writers completed fewer adds a
        second than one. Other processes still wait in the busy timeout."""

    @classmethod
    def from_settings(cls, settings: SqliteSettings, context: ComponentContext) -> SqliteBackend:
        """The factory memroute calls for ``[backends.NAME] type = "sqlite"``."""
        path = settings.path or str(Path(context.data_dir) / DEFAULT_FILE)
        if path != ":memory:":
            path = str(Path(path).expanduser())
        return cls(context.instance_name, path, settings=settings, prepare_connection=context.prepare_connection)

    # --- lifecycle ---------------------------------------------------------------------------------------

    def initialize(self) -> None:
        """Open the database, apply migrations and check the FTS index (rebuilt when out of step)."""
        with self._init_lock:
            if self._pool is not None:
                return
            pool = ThreadConnections(
                self.path, prepare=self._prepare, busy_timeout_ms=int(self.settings.busy_timeout_ms),
                synchronous=self.settings.synchronous, on_open=self._on_open,
            )
            try:
                connection = pool.get()
                self._migrate(connection)
                self._check_fts(connection)
            except BackendUnavailableError as exc:
                pool.close()
                raise BackendUnavailableError(
                    f"SQLite backend {self.name!r}: {exc}. Set [backends.{self.name}] path to a writable file.",
                    backend=self.name) from exc
            except apsw.Error as exc:
                pool.close()
                raise _translate(exc, self.path, "open the database", self.name) from exc
            self._pool = pool
            self._upkeep = self._new_upkeep()
            try:
                self._upkeep.opened(connection)
            except apsw.Error as exc:  # never a reason not to open: the next write tries again
                self._upkeep.last_error = f"{type(exc).__name__}: {exc}"

    def _new_upkeep(self) -> KeywordIndexUpkeep:
        # A ":memory:" database is one per connection: the upkeep's own connection would see another one.
        pages = 0 if self.path == ":memory:" else int(self.settings.fts_merge_max_pages)
        return KeywordIndexUpkeep(lambda: self._write("merge the keyword index"), self._connection, max_pages=pages)

    @staticmethod
    def _on_open(connection: apsw.Connection) -> None:
        connection.create_scalar_function("memroute_casefold", _casefold, 1, deterministic=True)  # type: ignore[arg-type]
        # Checkpoints are where WAL mode syncs; the default (every 1000 pages, ~80 single-memory commits) made
        # them a large share of a small write. 10000 pages (~40 MB of WAL) between checkpoints, and the WAL
        # file is truncated back after one. (apsw caches prepared statements per connection already.)
        connection.pragma("wal_autocheckpoint", 10000)
        connection.pragma("journal_size_limit", 64 * 1024 * 1024)

    def _migrate(self, connection: apsw.Connection) -> None:
        connection.execute("BEGIN IMMEDIATE")
        try:
            version = connection.pragma("user_version")
            if version > SCHEMA_VERSION:
                raise BackendUnavailableError(
                    f"SQLite backend {self.name!r}: {self.path} has schema version {version}, newer than this "
                    f"memroute supports ({SCHEMA_VERSION}). Upgrade memroute.", backend=self.name)
            for target in sorted(v for v in _MIGRATIONS if v > version):
                connection.execute(_MIGRATIONS[target])
                connection.pragma("user_version", target)
            if not connection.execute("SELECT 1 FROM sqlite_schema WHERE name = 'memory_version_au'").fetchall():
                connection.execute(ENSURE_DATA_VERSIONS)
            if not connection.execute("SELECT 1 FROM sqlite_schema WHERE name = 'memory_change_ao'").fetchall():
                connection.execute(ENSURE_CHANGE_COUNTS)
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise

    def _check_fts(self, connection: apsw.Connection) -> None:
        """Repair the FTS index if it is out of step with the table.

        The triggers update the index in the same transaction as the row, so a crash cannot split them;
        drift comes from outside (a hand edit, a tool that bypassed the triggers, a damaged index). Every
        open compares document counts (milliseconds). The full check — ``integrity-check`` with rank 1, which
        re-reads every row (~0.4 s per 50,000 memories) — runs when the counts differ, on small databases,
        and otherwise at most once a day, so short-lived processes (the CLI) do not pay it each time."""
        counts: tuple[Any, ...] = connection.execute(
            "SELECT (SELECT count(*) FROM memories), (SELECT count(*) FROM memory_fts_docsize)").fetchall()[0]
        memories, documents = int(counts[0]), int(counts[1])
        checked: builtins.list[tuple[Any, ...]] = connection.execute(
            "SELECT value FROM settings WHERE key = ?", (_FTS_CHECKED,)).fetchall()
        now = time.time()
        due = not checked or now - float(checked[0][0]) > FTS_FULL_CHECK_INTERVAL_S
        if memories == documents and memories > FTS_ALWAYS_CHECK_BELOW and not due:
            return
        try:
            if memories != documents:
                raise apsw.CorruptError("document count differs")
            connection.execute("INSERT INTO memory_fts(memory_fts, rank) VALUES ('integrity-check', 1)")
        except apsw.Error:
            with connection:
                connection.execute("INSERT INTO memory_fts(memory_fts) VALUES ('rebuild')")
            self.fts_rebuilt = True
        with connection:
            connection.execute("INSERT INTO settings(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET "
                               "value = excluded.value", (_FTS_CHECKED, repr(now)))

    fts_rebuilt: bool = False
    """True when opening found the FTS index out of step with the table and rebuilt it."""

    def close(self) -> None:
        self._upkeep.stop()
        with self._init_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        self._cache.clear()
        self._rows.clear()
        self._tenants.clear()
        self._written.clear()

    # --- plumbing ----------------------------------------------------------------------------------------

    def _connection(self) -> apsw.Connection:
        pool = self._pool
        if pool is None:
            raise BackendUnavailableError(
                f"SQLite backend {self.name!r} is not open: call initialize() first (or it was closed).",
                backend=self.name)
        return pool.get()

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except apsw.Error as exc:
            raise _translate(exc, self.path, action, self.name) from exc

    @contextmanager
    def _write(self, action: str) -> Iterator[apsw.Connection]:
        """One write transaction. IMMEDIATE takes the write lock up front, so reads inside it see the state
        the write applies to, and a second writer waits (busy timeout) instead of failing mid-transaction."""
        with self._errors(action), self._write_lock:
            connection = self._connection()
            connection.execute("BEGIN IMMEDIATE")
            try:
                yield connection
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")

    @contextmanager
    def _write_kept(self, action: str, tenants: Iterable[str] = (), *, keyword: bool = True) -> Iterator[_KeptWrite]:
        """:meth:`_write`, bringing the kept memories of the tenants written along (``TenantMemories.advance``):
        a tenant's change count is read before its rows are written (``tenants``, or :meth:`_KeptWrite.track`
        once the body knows the owner) and again at the end, and after the commit its entry drops the ids the
        body put in ``changed`` and takes the ``fresh`` memories. Tenants with nothing kept cost nothing. With
        ``keyword`` (a write that may change the keyword index), the index is merged once writes pause."""
        with self._write(action) as connection:
            write = _KeptWrite(connection, self._tenants)
            write.track(tenants)
            yield write
            after = {tenant: _count(connection, tenant) for tenant in write.before}
        for tenant, count in write.before.items():
            self._tenants.advance(tenant, count, after[tenant], write.changed, write.fresh)
        if keyword:
            self._upkeep.written()

    def _read(self, sql: str, bindings: Any = (), action: str = "read") -> builtins.list[tuple[Any, ...]]:
        # What `with self._errors(action)` does, without a generator context manager (a search reads two or three
        # times; with RowMemo.memories, 20-30 us less per keyword statement and per get_many in paced searches at
        # 500 memories).
        try:
            return self._connection().execute(sql, bindings).fetchall()
        except apsw.Error as exc:
            raise _translate(exc, self.path, action, self.name) from exc

    def _invalidate(self, ids: Iterable[str], fresh: Iterable[Memory] = ()) -> None:
        # The generation counter stops a reader that fetched a row before this write from caching it after.
        with self._cache_lock:
            self._generation += 1
            for memory_id in ids:
                self._cache.pop(memory_id)
            for memory in fresh:
                self._cache.set(memory.id, memory)

    # --- CRUD --------------------------------------------------------------------------------------------

    def create(self, new: NewMemory) -> Memory:
        """Upsert on ``(api_key_id, key)``: an existing memory keeps its id and ``created_at``; content, type,
        session and expiry are replaced and metadata is shallow-merged."""
        memory = new.as_memory()
        values = _row_values(memory)
        # The common case — a new key — is one autocommitted statement; only an existing key takes the
        # read-merge-write transaction (IMMEDIATE, so no other writer can slip in between). A tenant whose memories
        # searches keep writes in a transaction that reads its change count, so they stay kept.
        if self._tenants.keeps(new.api_key_id):
            with self._write_kept("create a memory", (new.api_key_id,)) as write:
                _before, memory = self._upsert(write.connection, new)
                write.changed.append(memory.id)
            self._invalidate((memory.id,), (memory,))
            self._written.add([(_row_values(memory), memory)])
            return memory
        with self._errors("create a memory"), self._write_lock:
            inserted = self._connection().execute(_SQL_INSERT_NEW, values).fetchall()
        if not inserted:
            with self._write("create a memory") as connection:
                row = connection.execute(_SQL_GET_BY_KEY, (new.api_key_id, new.key)).fetchone()
                if row is not None:
                    memory = new.merged_into(_to_memory(row))
                    self._update_row(connection, memory)
                elif connection.execute(_SQL_INSERT_NEW, _row_values(memory)).fetchall() == []:
                    raise ConflictError(f"memory id {new.id} is already used by another memory", backend=self.name)
            values = _row_values(memory)
        self._upkeep.written()
        self._invalidate((memory.id,), (memory,))
        self._written.add([(values, memory)])
        return memory

    def create_many(self, news: Sequence[NewMemory]) -> builtins.list[Memory | MemrouteError]:
        """``create`` each of ``news`` in one ``BEGIN IMMEDIATE`` transaction, in order (a later item with an
        earlier one's key merges into it, as one after another would). An item's own error (its id taken,
        text SQLite cannot encode) is returned in its place and the others are still committed: each item is
        one write statement, and a failed statement leaves nothing behind in the transaction. A failure of
        the database itself rolls the whole batch back and raises."""
        return self._create_many(news, None)

    def create_many_recorded(self, news: Sequence[NewMemory],
                             notes: Sequence[HistoryNote]) -> builtins.list[Memory | MemrouteError]:
        """:meth:`create_many` with each stored item's history entry inserted in the same transaction
        (:class:`~memroute.interfaces.RecordedWrites`): one commit for the memories and their history, and a
        failure of either (the database's, or a statement of the history's) rolls both back and raises. The
        entry says what the upsert found in the row it replaced, read inside the transaction."""
        if len(notes) != len(news):
            raise ValidationError(f"create_many_recorded: {len(news)} memories but {len(notes)} notes",
                                  [("notes", "length")])
        return self._create_many(news, notes)

    def _create_many(self, news: Sequence[NewMemory],
                     notes: Sequence[HistoryNote] | None) -> builtins.list[Memory | MemrouteError]:
        outcomes: builtins.list[Memory | MemrouteError] = []
        written: builtins.list[tuple[tuple[Any, ...], Memory]] = []
        entries: builtins.list[HistoryEntry] = []
        with self._write_kept("create memories", {new.api_key_id for new in news}) as write:
            for at, new in enumerate(news):
                try:
                    before, memory = self._upsert(write.connection, new)
                except ConflictError as exc:
                    outcomes.append(exc)
                    continue
                except (UnicodeError, RecursionError) as exc:
                    outcomes.append(ValidationError(
                        f"create: backend {self.name!r} cannot take this input ({type(exc).__name__}: {exc})",
                        [("(input)", "invalid")]))
                    continue
                outcomes.append(memory)
                written.append((_row_values(memory), memory))
                write.changed.append(memory.id)
                if notes is not None and (entry := HistoryEntry.of_change(
                        before, memory, actor=notes[at].actor, event=notes[at].event)) is not None:
                    entries.append(entry)
            if entries:
                history_sql.append(write.connection, entries)
        self._invalidate([m.id for _row, m in written], [m for _row, m in written])
        self._written.add(written)
        return outcomes

    def _upsert(self, connection: apsw.Connection, new: NewMemory) -> tuple[Memory | None, Memory]:
        """One upsert inside the caller's write transaction: the memory it replaced (``None``: a new key) and the
        one it stored."""
        memory = new.as_memory()
        if connection.execute(_SQL_INSERT_NEW, _row_values(memory)).fetchall():
            return None, memory
        row = connection.execute(_SQL_GET_BY_KEY, (new.api_key_id, new.key)).fetchone()
        if row is None:  # the key is free, so the id is what collided
            raise ConflictError(f"memory id {new.id} is already used by another memory", backend=self.name)
        before = _to_memory(row)
        memory = new.merged_into(before)
        self._update_row(connection, memory)
        return before, memory

    @staticmethod
    def _update_row(connection: apsw.Connection, memory: Memory) -> None:
        values = _row_values(memory)
        # (id, session, type, key, content, metadata, updated_at, expires_at)
        connection.execute(_SQL_UPDATE, (values[0], values[2], values[3], values[4], values[5], values[6],
                                         values[8], values[9]))

    def put(self, memory: Memory) -> None:
        written = [(_row_values(memory), memory)]
        with self._write_kept("store a replicated memory", (memory.api_key_id,)) as write:
            evicted = self._put_rows(write.connection, written)
            write.changed += [memory.id, *evicted]
        self._invalidate([memory.id, *evicted])
        self._wrote(written, evicted)

    def put_many(self, memories: Iterable[Memory]) -> int:
        """``put`` every memory in one transaction (bulk import); later items win over earlier ones with the
        same id or ``(api_key_id, key)``. Returns how many were stored."""
        return self._put_many(memories, ())

    def put_many_recorded(self, memories: Sequence[Memory], entries: Sequence[HistoryEntry]) -> int:
        """:meth:`put_many` with ``entries`` inserted in the same transaction
        (:class:`~memroute.interfaces.RecordedImports`): a failure of either rolls both back and raises."""
        return self._put_many(memories, entries)

    def _put_many(self, memories: Iterable[Memory], entries: Sequence[HistoryEntry]) -> int:
        batch: dict[str, Memory] = {}
        by_key: dict[tuple[str, str], str] = {}
        for memory in memories:
            previous = by_key.get((memory.api_key_id, memory.key))
            if previous is not None and previous != memory.id:
                del batch[previous]
            batch[memory.id] = memory
            by_key[(memory.api_key_id, memory.key)] = memory.id
        if not batch:
            return 0
        written = [(_row_values(m), m) for m in batch.values()]
        with self._write_kept("import memories", {m.api_key_id for m in batch.values()}) as write:
            evicted = self._put_rows(write.connection, written)
            write.changed += [*batch, *evicted]
            if entries:
                history_sql.append(write.connection, entries)
        self._invalidate([*batch, *evicted])
        self._wrote(written, evicted)
        return len(batch)

    def _wrote(self, written: builtins.list[tuple[tuple[Any, ...], Memory]], evicted: Iterable[str]) -> None:
        """After a commit: the indexer reads these rows next (see :class:`WrittenRows`)."""
        self._written.discard(evicted)
        self._written.add(written)

    @staticmethod
    def _put_rows(connection: apsw.Connection, written: Sequence[tuple[tuple[Any, ...], Memory]]) -> builtins.list[str]:
        """Write the ``(row values, memory)`` pairs (inside the caller's transaction); returns the ids of
        memories they evicted."""
        rows = [row for row, _memory in written]
        owners_keys = json.dumps([(row[1], row[4], row[0]) for row in rows], ensure_ascii=False)
        evicted = [r[0] for r in connection.execute(_SQL_PUT_EVICT, (owners_keys,))]
        connection.executemany(_SQL_PUT, rows)
        return evicted

    def get(self, memory_id: str) -> Memory | None:
        require_id(memory_id)
        cached = self._cache.get(memory_id)
        if cached is not MISSING:
            return cached
        generation = self._generation
        rows = self._read(_SQL_GET, (memory_id,), "read a memory")
        if not rows:
            return None
        memory = _to_memory(rows[0])
        with self._cache_lock:
            if generation == self._generation:
                self._cache.set(memory_id, memory)
        return memory

    def get_by_key(self, api_key_id: str, key: str) -> Memory | None:
        """The memory with this ``(api_key_id, key)``: one lookup on the unique index the upsert uses."""
        rows = self._read(_SQL_GET_BY_KEY, (api_key_id, key), "read a memory by key")
        return _to_memory(rows[0]) if rows else None

    def get_many(self, memory_ids: Sequence[str]) -> dict[str, Memory]:
        """The memories among ``memory_ids`` that exist, in one query."""
        if not memory_ids:
            return {}
        require_ids(memory_ids)
        rows = self._read(_SQL_GET_MANY, (json.dumps(list(memory_ids)),), "read memories")
        return {m.id: m for m in self._rows.memories(rows)}

    def update(self, memory_id: str, patch: MemoryPatch) -> Memory | None:
        return self._update(memory_id, patch, None)

    def update_recorded(self, api_key_id: str, memory_id: str, patch: MemoryPatch,
                        note: HistoryNote) -> Memory | None:
        """:meth:`update_owned` with its history entry in the same transaction (:class:`RecordedWrites`)."""
        return self._update(memory_id, patch, api_key_id, note)

    def delete_recorded(self, api_key_id: str, memory_id: str, note: HistoryNote) -> bool:
        """:meth:`delete_owned` with its history entry (what the row said) in the same transaction."""
        require_id(memory_id)
        with self._write_kept("delete a memory", (api_key_id,)) as write:
            write.changed.append(memory_id)
            rows = write.connection.execute(
                f"DELETE FROM memories WHERE id = ? AND api_key_id = ? RETURNING {_COLUMNS}",
                (memory_id, api_key_id)).fetchall()
            if rows and (entry := HistoryEntry.of_change(_to_memory(rows[0]), None, actor=note.actor,
                                                         event=note.event)) is not None:
                history_sql.append(write.connection, [entry])
        if rows:
            self._invalidate((memory_id,))
            self._written.discard((memory_id,))
        return bool(rows)

    def _update(self, memory_id: str, patch: MemoryPatch, owner: str | None,
                note: HistoryNote | None = None) -> Memory | None:
        require_id(memory_id)
        with self._write_kept("update a memory") as write:
            connection = write.connection
            row = connection.execute(_SQL_GET, (memory_id,)).fetchone()
            if row is None or (owner is not None and row[1] != owner):
                return None
            write.track((row[1],))
            write.changed.append(memory_id)
            existing = _to_memory(row)
            if patch.is_empty():
                return existing
            memory = patch.applied_to(existing)
            if memory.key != existing.key:
                clash = connection.execute(
                    "SELECT id FROM memories WHERE api_key_id = ? AND key = ?", (memory.api_key_id, memory.key)
                ).fetchone()
                if clash is not None:
                    raise ConflictError(
                        f"cannot rename memory {memory_id} to key {memory.key!r}: memory {clash[0]} of the same "
                        "api key already has that key", backend=self.name)
            self._update_row(connection, memory)
            if note is not None and (entry := HistoryEntry.of_change(existing, memory, actor=note.actor,
                                                                     event=note.event)) is not None:
                history_sql.append(connection, [entry])
        self._invalidate((memory_id,), (memory,))
        self._written.add([(_row_values(memory), memory)])
        return memory

    def delete(self, memory_id: str) -> bool:
        require_id(memory_id)
        with self._write_kept("delete a memory") as write:
            if self._tenants.tenants():  # the owner, so its kept memories follow (one lookup)
                write.track(row[0] for row in write.connection.execute(
                    "SELECT api_key_id FROM memories WHERE id = ?", (memory_id,)).fetchall())
            write.changed.append(memory_id)
            deleted = write.connection.execute("DELETE FROM memories WHERE id = ? RETURNING id",
                                               (memory_id,)).fetchall()
        self._invalidate((memory_id,))
        self._written.discard((memory_id,))
        return bool(deleted)

    # --- tenant routing (capability tenant_routing): another tenant's memory is "no such id" ---------------

    def get_owned(self, api_key_id: str, memory_id: str) -> Memory | None:
        memory = self.get(memory_id)
        return memory if memory is not None and memory.api_key_id == api_key_id else None

    def get_many_owned(self, api_key_id: str, memory_ids: Sequence[str]) -> dict[str, Memory]:
        """The memories of ``api_key_id`` among ``memory_ids``: those a search of the tenant kept at its current
        change count without a read (one lookup of the count), the rest in one query (and kept). A search's
        vector candidates come here (``MemoryManager.get_many``): at 500 memories, ~50 rows read and compared
        every search before."""
        if not memory_ids:
            return {}
        require_ids(memory_ids)
        if not self._tenants.max_memories:
            rows = self._read(_SQL_GET_MANY_OWNED, (json.dumps(list(memory_ids)), api_key_id), "read memories")
            return {m.id: m for m in self._rows.memories(rows, 0, 1)}
        stamp = self._changes(api_key_id)
        entry = self._tenants.entry(api_key_id, stamp)
        found: dict[str, Memory] = {}
        missing = []
        kept = entry.by_id
        for memory_id in memory_ids:
            memory = kept.get(memory_id)
            if memory is None:
                missing.append(memory_id)
            else:
                found[memory_id] = memory
        if missing:
            # Read after the count: what is read is as new as the count or newer, never older (tenants module).
            rows = self._read(_SQL_GET_MANY_OWNED, (json.dumps(missing), api_key_id), "read memories")
            read = [(row[0], memory) for row, memory in zip(rows, self._rows.memories(rows, 0, 1), strict=True)]
            self._tenants.keep(api_key_id, entry, read, stamp=stamp)
            found.update((memory.id, memory) for _, memory in read)
        return found

    def update_owned(self, api_key_id: str, memory_id: str, patch: MemoryPatch) -> Memory | None:
        return self._update(memory_id, patch, api_key_id)

    def delete_owned(self, api_key_id: str, memory_id: str) -> bool:
        require_id(memory_id)
        with self._write_kept("delete a memory", (api_key_id,)) as write:
            write.changed.append(memory_id)
            deleted = write.connection.execute(
                "DELETE FROM memories WHERE id = ? AND api_key_id = ? RETURNING id", (memory_id, api_key_id)).fetchall()
        if deleted:
            self._invalidate((memory_id,))
            self._written.discard((memory_id,))
        return bool(deleted)

    def _changes(self, api_key_id: str) -> int:
        """The tenant's change count (``memory_changes``; 0 before its first row)."""
        rows = self._read(_SQL_CHANGES, (api_key_id,), "search memories")
        return int(rows[0][0]) if rows else 0

    # --- list ------------------------------------------------------------------------------------------

    def list(self, filter: ListFilter) -> ListPage:
        where, params = [], []
        if filter.api_key_id is not None:
            where.append("api_key_id = ?")
            params.append(filter.api_key_id)
        if filter.type is not None:
            where.append("type = ?")
            params.append(filter.type.value)
        if filter.session_id is not None:
            where.append("session_id = ?")
            params.append(filter.session_id)
        if filter.query and filter.query.strip():
            # Case-insensitive substring with Python's casefold (SQLite's LIKE folds ASCII only); instr has no
            # wildcards, so '%' and '_' in the query match literally.
            needle = filter.query.strip().casefold()
            where.append("(instr(memroute_casefold(content), ?) > 0 OR instr(memroute_casefold(key), ?) > 0)")
            params += [needle, needle]
        clause = ("WHERE " + " AND ".join(where)) if where else ""
        direction = "DESC" if filter.order_dir == "desc" else "ASC"
        order = f"{filter.order_by} {direction}, memory_rowid {direction}"  # both from fixed allow-lists
        with self._errors("list memories"):
            connection = self._connection()
            with connection:  # one read snapshot for the counts and the page
                counts = connection.execute(
                    f"SELECT type, count(*) FROM memories {clause} GROUP BY type", params).fetchall()
                rows = connection.execute(
                    f"SELECT {_COLUMNS} FROM memories {clause} ORDER BY {order} LIMIT ? OFFSET ?",
                    [*params, filter.limit, filter.offset]).fetchall()
        by_type: dict[str, int] = {str(mtype): count for mtype, count in counts}  # type: ignore[misc]
        return ListPage(data=tuple(map(_to_memory, rows)), total=sum(by_type.values()), by_type=by_type)

    def tenants(self) -> builtins.list[str]:
        rows = self._read("SELECT DISTINCT api_key_id FROM memories ORDER BY api_key_id", action="list tenants")
        return [row[0] for row in rows]

    def iter_all(self, api_key_id: str | None = None, batch: int = 500) -> Iterable[Memory]:
        """Every memory (of one tenant, or all), oldest first: the id order is read once, rows in batches."""
        owner = "WHERE api_key_id = ?" if api_key_id is not None else ""
        ids = [r[0] for r in self._read(
            f"SELECT id FROM memories {owner} ORDER BY created_at, memory_rowid",
            (api_key_id,) if api_key_id is not None else (), "export memories")]
        for start in range(0, len(ids), batch):
            chunk = ids[start:start + batch]
            found = self.get_many(chunk)
            yield from (found[i] for i in chunk if i in found)

    # --- search ----------------------------------------------------------------------------------------

    @staticmethod
    def _scope(query: SearchQuery, alias: str = "") -> tuple[str, builtins.list[Any]]:
        """The owner / expiry / retention / session filter every search path applies, in SQL."""
        p = alias
        sql = [f"{p}api_key_id = ?", f"({p}expires_at IS NULL OR {p}expires_at > ?)"]
        params: builtins.list[Any] = [query.api_key_id, format_ts(query.now)]
        cutoff = query.created_after
        if cutoff is not None:
            sql.append(f"{p}created_at >= ?")
            params.append(format_ts(cutoff))
        if query.session_id is not None:
            sql.append(f"{p}session_id = ?")
            params.append(query.session_id)
        return " AND ".join(sql), params

    def search(self, query: SearchQuery) -> builtins.list[BackendHit]:
        """``exact``: the newest memories first (score 1/rank). Otherwise keyword: bm25 over content and key
        (score = -bm25, higher is better); text without a searchable term gives no hits."""
        if query.strategy == "exact":
            return self.recent(query)
        return self.keyword(query)

    def recent(self, query: SearchQuery) -> builtins.list[BackendHit]:
        where, params = self._scope(query)
        rows = self._read(
            f"SELECT {_COLUMNS} FROM memories WHERE {where} ORDER BY created_at DESC, id LIMIT ?",
            [*params, query.limit], "search memories")
        return [BackendHit(memory=self._rows.memory(row), score=1.0 / rank) for rank, row in enumerate(rows, start=1)]

    def keyword(self, query: SearchQuery) -> builtins.list[BackendHit]:
        """bm25 matches of ``query.text`` (see :meth:`search`): the FTS shortlist's rowids and ranks, with the
        tenant's memories kept at its change count (``tenants``) instead of reading the rows; the rows it lacks are
        read and kept. The count is read again at the end: when a write of the tenant landed meanwhile, the
        search runs again as one statement joining the rows (:meth:`_keyword_joined`), so rank and memory always
        come from the same file. The same hits, in the same order, as that statement (a test compares them)."""
        terms = fts_query(query.text)
        if not terms:
            return []
        if self._sole_tenant(query.api_key_id):
            # The owner column weighs 0 in bm25 and idf counts each phrase over the whole table, so without the
            # owner term the scores are the same bits; in a file of one tenant the matches are the same rows.
            # Intersecting the owner's postings (every row's) cost 0.3-0.4 ms of a 2,000-memory search, paced.
            match = f"{{content key}} : ({terms})"
        else:
            owner = query.api_key_id.encode("utf-8").hex().upper()  # what hex(api_key_id) indexed
            match = f'owner : "{owner}" AND {{content key}} : ({terms})'
        tenant = query.api_key_id
        if not self._tenants.max_memories:
            return self._keyword_joined(query, match)
        stamp = self._changes(tenant)
        entry = self._tenants.entry(tenant, stamp)
        in_scope = _scope_filter(query)
        depth = max(query.limit * 4, 64)
        while True:
            shortlist = self._read(
                f"SELECT rowid, bm25(memory_fts, {CONTENT_WEIGHT}, {KEY_WEIGHT}, 0.0) AS rank FROM memory_fts "
                "WHERE memory_fts MATCH ? ORDER BY rank LIMIT ?", (match, depth), "search memories")
            kept, foreign = entry.by_rowid, entry.foreign
            read = self._read_rowids(tenant, entry, stamp, [rowid for rowid, _ in shortlist
                                                     if rowid not in kept and rowid not in foreign])
            hits = _first_in_scope(shortlist, kept, read, in_scope, query.limit)
            if len(hits) >= query.limit or len(shortlist) < depth or not self._matches_past(match, depth):
                break
            depth *= 8
        if self._changes(tenant) != stamp:
            self._tenants.drop(tenant)
            return self._keyword_joined(query, match)
        # The shortlist comes in rank order; equal ranks go newest first, then by id (the joined statement's order).
        if any(hits[i][0] == hits[i + 1][0] for i in range(len(hits) - 1)):
            hits.sort(key=lambda hit: hit[1].id)
            hits.sort(key=lambda hit: hit[1].created_at, reverse=True)
            hits.sort(key=lambda hit: hit[0])
        return [BackendHit(memory=memory, score=-float(rank)) for rank, memory in hits[:query.limit]]

    def _read_rowids(self, tenant: str, entry: TenantEntry, stamp: int,
                     rowids: builtins.list[int]) -> dict[int, Memory]:
        """The tenant's memories among FTS ``rowids`` read from the file (and kept in ``entry``, with the rowids
        of other tenants' rows)."""
        if not rowids:
            return {}
        rows = self._read(_SQL_GET_ROWIDS, (json.dumps(rowids),), "search memories")
        mine = [row for row in rows if row[2] == tenant]
        read = dict(zip([row[0] for row in mine], self._rows.memories(mine, 0, 1), strict=True))
        self._tenants.keep(tenant, entry, read.items(), [row[0] for row in rows if row[2] != tenant], stamp=stamp)
        return read

    def _keyword_joined(self, query: SearchQuery, match: str) -> builtins.list[BackendHit]:
        """:meth:`keyword` as one statement: the shortlist joined to the memory rows."""
        where, params = self._scope(query, "m.")
        # Rank inside the FTS table first (a top-N sort over the matches, no table lookup per match), then apply
        # the expiry / retention / session filters to that shortlist: 3.0 ms against 4.1 ms for joining every
        # match, at 10k memories. When the filters leave fewer than ``limit`` rows and there are more matches
        # than the shortlist held, look deeper: the result is the same as filtering first. Each row also carries the
        # shortlist's size (the CTE is materialized once, the count read from it): a shortlist shorter than
        # ``depth`` held every match, so nothing deeper exists and the second scan of the FTS match (a count that
        # ran in most proxy searches, 0.2-0.4 ms cold) is skipped.
        depth = max(query.limit * 4, 64)
        while True:
            rows = self._read(
                f"WITH hits AS MATERIALIZED (SELECT rowid, bm25(memory_fts, {CONTENT_WEIGHT}, {KEY_WEIGHT}, 0.0) "
                "AS rank FROM memory_fts WHERE memory_fts MATCH ? ORDER BY rank LIMIT ?) "
                f"SELECT {_M_COLUMNS}, hits.rank, (SELECT count(*) FROM hits) FROM hits "
                # CROSS JOIN keeps the shortlist as the outer loop (SQLite honours it).
                "CROSS JOIN memories AS m ON m.memory_rowid = hits.rowid "
                f"WHERE {where} ORDER BY hits.rank, m.created_at DESC, m.id LIMIT ?",
                [match, depth, *params, query.limit], "search memories")
            if len(rows) >= query.limit or (rows and rows[0][-1] < depth) or not self._matches_past(match, depth):
                break
            depth *= 8
        return [BackendHit(memory=memory, score=-float(row[-2]))
                for memory, row in zip(self._rows.memories(rows, 2), rows, strict=True)]

    def _matches_past(self, match: str, depth: int) -> bool:
        """Whether ``match`` has more than ``depth`` matches (so a deeper shortlist holds more)."""
        count = self._read("SELECT count(*) FROM memory_fts WHERE memory_fts MATCH ?", [match], "search memories")
        return int(count[0][0]) > depth

    def _sole_tenant(self, tenant: str) -> bool:
        """True when ``tenant`` was, at most :data:`SOLE_TENANT_TTL_S` ago, the only owner of rows in the file
        (checked with one lookup on the owner index for any other owner), so its keyword search can leave the
        owner term out of the FTS5 match. Only speed rests on this: the search filters the shortlist by owner in
        SQL whatever the match says, and looks deeper when other tenants' rows crowded it (the first searches
        after another tenant's first write, until the next check)."""
        checked, sole = self._sole
        now = time.monotonic()
        if now - checked >= SOLE_TENANT_TTL_S:
            others = self._read("SELECT EXISTS (SELECT 1 FROM memories WHERE api_key_id < ?1 OR api_key_id > ?1)",
                                (tenant,), "search memories")[0][0]
            sole = None if others else tenant
            self._sole = (now, sole)
        return sole == tenant

    # --- reindex queue, access telemetry, settings -----------------------------------------------------

    def pending_reindex(self, limit: int = 100, api_key_id: str | None = None) -> builtins.list[Memory]:
        """Memories whose vector is missing or stale (``needs_reindex = 1``), oldest first (of one tenant, or
        all)."""
        if api_key_id is None:
            rows = self._read(
                f"SELECT {_COLUMNS} FROM memories WHERE needs_reindex = 1 ORDER BY memory_rowid LIMIT ?",
                (int(limit),), "read the reindex queue")
        else:
            rows = self._read(
                f"SELECT {_COLUMNS} FROM memories WHERE needs_reindex = 1 AND api_key_id = ? ORDER BY memory_rowid "
                "LIMIT ?", (api_key_id, int(limit)), "read the reindex queue")
        return [self._written.take(r) for r in rows]

    def count_pending_reindex(self, api_key_id: str | None = None) -> int:
        if api_key_id is None:
            return int(self._read("SELECT count(*) FROM memories WHERE needs_reindex = 1")[0][0])
        return int(self._read("SELECT count(*) FROM memories WHERE needs_reindex = 1 AND api_key_id = ?",
                              (api_key_id,))[0][0])

    def mark_indexed(self, memories: Iterable[Memory | str]) -> int:
        """Clear ``needs_reindex``. Pass the :class:`Memory` objects that were embedded to clear only rows
        not changed since (same ``updated_at``); a bare id clears unconditionally. Returns rows cleared."""
        items = builtins.list(memories)
        guarded = [(m.id, format_ts(m.updated_at)) for m in items if isinstance(m, Memory)]
        plain = [(m,) for m in items if isinstance(m, str)]
        # changes(), not total_changes(): the data-version trigger's own writes must not count as rows cleared.
        cleared = 0
        with self._write("mark memories indexed") as connection:
            for values in guarded:
                connection.execute(
                    "UPDATE memories SET needs_reindex = 0 WHERE id = ? AND updated_at = ? AND needs_reindex = 1",
                    values)
                cleared += connection.changes()
            for values in plain:
                connection.execute("UPDATE memories SET needs_reindex = 0 WHERE id = ? AND needs_reindex = 1", values)
                cleared += connection.changes()
        return cleared

    def mark_all_for_reindex(self) -> int:
        """Flag every memory for re-embedding (the embedding signature changed). Returns rows flagged."""
        with self._write("flag memories for reindex") as connection:
            connection.execute("UPDATE memories SET needs_reindex = 1 WHERE needs_reindex = 0")
            return int(connection.changes())

    def record_access(self, api_key_id: str, accesses: Mapping[str, MemoryAccess]) -> int:
        """Add batched accesses of memories of ``api_key_id`` (:class:`~memroute.interfaces.AccessRecorder`):
        one transaction, the FTS index and data version untouched (their triggers ignore these columns), ``updated_at``
        and ``needs_reindex`` unchanged. Returns the rows updated."""
        rows = [(memory_id, api_key_id, access.count, format_ts(access.at))
                for memory_id, access in sorted(accesses.items())]
        if not rows:
            return 0
        with self._write_kept("record memory access", (api_key_id,), keyword=False) as write:
            # Each updated row comes back (RETURNING: no trigger's write is counted): the kept ones are kept as the
            # update left them (the memories read most are the ones accessed most).
            if not write.before:
                changed = len(builtins.list(write.connection.executemany(_SQL_RECORD_ACCESS + " RETURNING 1", rows)))
            else:
                returned = builtins.list(write.connection.executemany(_SQL_RECORD_ACCESS_RETURNING, rows))
                changed = len(returned)
                kept = set(self._tenants.kept_ids(api_key_id, accesses))
                mine = [row for row in returned if row[1] in kept]
                write.fresh = builtins.list(zip([row[0] for row in mine], self._rows.memories(mine, 0, 1), strict=True))
        self._invalidate(accesses)  # cached copies would show the old counts
        return changed

    def data_version(self, api_key_id: str) -> int:
        """The tenant's data version (:class:`~memroute.interfaces.DataVersions`): moved by triggers in the
        transaction of every write that changes what a search of the tenant reads, whichever process made it."""
        rows = self._read(_SQL_DATA_VERSION, (api_key_id,), "read the data version")
        return int(rows[0][0]) if rows else 0

    # --- history (capability ``history``: memroute_builtins.backends.sqlite.history) ------------------------

    def append_history(self, entries: Sequence[HistoryEntry]) -> None:
        if entries:
            with self._write("record history") as connection:
                history_sql.append(connection, entries)

    def history(self, api_key_id: str, memory_id: str) -> builtins.list[HistoryEntry]:
        with self._errors("read history"):
            return history_sql.read(self._connection(), api_key_id, memory_id)

    def purge_history(self, api_key_id: str | None, *, before: datetime) -> int:
        with self._write("purge history") as connection:
            return history_sql.purge(connection, api_key_id, before)

    def get_setting(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM settings WHERE key = ?", (key,), "read a setting")
        return rows[0][0] if rows else None

    def set_setting(self, key: str, value: str | None) -> None:
        with self._write("write a setting") as connection:
            if value is None:
                connection.execute("DELETE FROM settings WHERE key = ?", (key,))
            else:
                connection.execute(
                    "INSERT INTO settings(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = "
                    "excluded.value", (key, value))

    # --- health and status -----------------------------------------------------------------------------

    def health(self) -> HealthResult:
        """A real query against the file every time: the memory count and the schema version."""
        def probe() -> dict[str, Any]:
            with self._errors("check health"):
                connection = self._connection()
                count = connection.execute("SELECT count(*) FROM memories").fetchall()[0][0]
                version = connection.pragma("user_version")
            return {"memories": count, "schema_version": version, "path": self.path}

        return HealthResult.timed(probe)

    def identity(self) -> str:
        """The database file's absolute path: the vector index and outbox of this primary live in a state
        directory derived from it, so two databases never share an index."""
        return f"sqlite:{self.path if self.path == ':memory:' else Path(self.path).resolve()}"

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type_name, "path": self.path, "schema_version": SCHEMA_VERSION,
                "cache": self._cache.stats(), "kept_memories": self._tenants.stats(),
                "keyword_index": self._upkeep.stats()}


def _count(connection: apsw.Connection, tenant: str) -> int:
    rows = connection.execute(_SQL_CHANGES, (tenant,)).fetchall()
    return int(rows[0][0]) if rows else 0


class _KeptWrite:
    """The body's side of :meth:`SqliteBackend._write_kept`: the connection, the ids it changed, and the
    change counts of the kept tenants it writes, read before it writes them."""

    def __init__(self, connection: apsw.Connection, kept: TenantMemories) -> None:
        self.connection = connection
        self.changed: builtins.list[str] = []
        self.fresh: builtins.list[tuple[int, Memory]] = []
        self.before: dict[str, int] = {}
        self._kept = kept

    def track(self, tenants: Iterable[str]) -> None:
        for tenant in tenants:
            if tenant not in self.before and self._kept.keeps(tenant):
                self.before[tenant] = _count(self.connection, tenant)


def _first_in_scope(shortlist: builtins.list[tuple[int, float]], kept: Mapping[int, Memory],
                    read: Mapping[int, Memory], in_scope: Callable[[Memory], bool],
                    limit: int) -> builtins.list[tuple[float, Memory]]:
    """The shortlist's memories (kept or just ``read``) that are ``in_scope``, as ``(rank, memory)`` in its rank
    order, up to the ``limit``-th and the rest of that one's run of equal ranks: the rows past it rank lower than
    every one of the first ``limit`` after the tie order (newest, then id, within a rank), so they are never
    returned, and are not looked at (a shortlist is four times the limit: 400 rows for an augment's 100)."""
    hits: builtins.list[tuple[float, Memory]] = []
    last = None
    for rowid, rank in shortlist:
        if len(hits) >= limit and rank != last:
            break
        memory = kept.get(rowid) or read.get(rowid)
        if memory is not None and in_scope(memory):
            hits.append((rank, memory))
            last = rank
    return hits


def _scope_filter(query: SearchQuery) -> Any:
    """:meth:`SqliteBackend._scope` (expiry, retention, session; the owner is the caller's) as a predicate on a
    memory. Fixed-width UTC timestamps compare as their text does, so both select the same rows."""
    now, cutoff, session = query.now, query.created_after, query.session_id

    def admits(memory: Memory) -> bool:
        expires = memory.expires_at
        return ((expires is None or expires > now) and (cutoff is None or memory.created_at >= cutoff)
                and (session is None or memory.session_id == session))

    return admits


@memroute.hookimpl
def memroute_backends() -> Iterator[BackendSpec]:
    yield BackendSpec(
        name="sqlite", factory=SqliteBackend.from_settings, settings_class=SqliteSettings,
        description="Embedded SQLite file (apsw, FTS5 bm25 keyword search); memroute's default backend.",
        path_option="path",
    )
