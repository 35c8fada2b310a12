"""The SQLite storage backend (``type = "sqlite"``): apsw, one file, FTS5 keyword search.

Schema (``PRAGMA user_version`` = 1) — the reference system's ``memories`` table with its defects fixed:

- ``memory_rowid INTEGER PRIMARY KEY`` is the FTS5 ``content_rowid`` from day one, so index rows can never
  point at the wrong memory or go missing (the reference's ``memory_id`` NULL / orphan bugs);
  ``id TEXT UNIQUE`` is memroute's UUID, identical in every backend.
- ``UNIQUE (api_key_id, key)``: the upsert key, enforced and indexed.
- timestamps are fixed-width ISO-8601 UTC text (``2026-11-29T14:27:46.123456Z``) so plain string
  comparison orders them correctly and every filter runs on an index without ``datetime()`` calls.
- ``memory_fts`` is an external-content FTS5 table over ``(content, key)``; insert and delete triggers keep
  it in step, and the update trigger fires only when ``content`` or ``key`` really change (so bumping
  ``access_count`` never rewrites the index — the reference's 175k-row bloat).
- ``needs_reindex`` (1 on create and on content/key changes) is the retrieval engine's work queue:
  :meth:`SqliteBackend.pending_reindex`, :meth:`~SqliteBackend.mark_indexed`,
  :meth:`~SqliteBackend.mark_all_for_reindex`.
- a ``settings`` key/value table for components that keep small state in the same file.

Keyword search ranks with bm25 over an **OR of the quoted query terms** (``"cat" OR "called"``). The
reference's sanitiser made an implicit AND, so a natural question ("what is my cat called?") finds nothing
unless every word occurs in one memory. bm25 already rewards memories matching more (and rarer) terms, so
OR keeps the precision at the top and finds what AND drops: on the tests' question set AND found the
relevant memory for 1 of 8 questions, OR for 8 of 8 (see ``tests/unit/test_sqlite_backend.py``). The key
column weighs twice the content (the reference's keyword scorer gave key matches the same 2:1 weight).
"""

from __future__ import annotations

import builtins
import json
import re
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Final

import apsw
import attrs

import memroute
from memroute.cache import MISSING, TTLCache
from memroute.db import ThreadConnections
from memroute.errors import (
    BackendError,
    BackendUnavailableError,
    ConfigError,
    ConflictError,
    MemrouteError,
)
from memroute.interfaces import BackendCapabilities, ComponentContext, MemoryBackend
from memroute.models import (
    BackendHit,
    HealthResult,
    ListFilter,
    ListPage,
    Memory,
    MemoryPatch,
    MemoryType,
    NewMemory,
    SearchQuery,
)
from memroute.specs import BackendSpec

__all__ = ["SCHEMA_VERSION", "SqliteBackend", "SqliteSettings", "fts_query", "memroute_backends"]

SCHEMA_VERSION: Final = 1
DEFAULT_FILE: Final = "memroute.db"
MAX_QUERY_CHARS: Final = 4096
MAX_QUERY_TERMS: Final = 32
KEY_WEIGHT: Final = 2.0
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


# --- schema --------------------------------------------------------------------------------------------

_TYPES_SQL = ", ".join(f"'{t.value}'" for t in MemoryType)

_MIGRATIONS: Final[dict[int, str]] = {
    1: f"""
        CREATE TABLE memories (
            memory_rowid     INTEGER PRIMARY KEY,
            id               TEXT NOT NULL UNIQUE,
            api_key_id       TEXT NOT NULL,
            session_id       TEXT,
            type             TEXT NOT NULL CHECK (type IN ({_TYPES_SQL})),
            key              TEXT NOT NULL,
            content          TEXT NOT NULL,
            metadata         TEXT NOT NULL DEFAULT '{{}}' CHECK (json_valid(metadata)),
            created_at       TEXT NOT NULL,
            updated_at       TEXT NOT NULL,
            expires_at       TEXT,
            needs_reindex    INTEGER NOT NULL DEFAULT 1,
            access_count     INTEGER NOT NULL DEFAULT 0,
            last_accessed_at TEXT
        );
        CREATE UNIQUE INDEX idx_memories_owner_key ON memories(api_key_id, key);
        -- (api_key_id, created_at) serves the reference's api_key index and the recency scans
        CREATE INDEX idx_memories_api_key ON memories(api_key_id, created_at);
        CREATE INDEX idx_memories_session ON memories(session_id);
        CREATE INDEX idx_memories_type ON memories(type);
        CREATE INDEX idx_memories_expires ON memories(expires_at);
        CREATE INDEX idx_memories_needs_reindex ON memories(needs_reindex) WHERE needs_reindex = 1;

        CREATE VIRTUAL TABLE memory_fts USING fts5(
            content, key, content='memories', content_rowid='memory_rowid'
        );
        CREATE TRIGGER memory_fts_ai AFTER INSERT ON memories BEGIN
            INSERT INTO memory_fts(rowid, content, key) VALUES (new.memory_rowid, new.content, new.key);
        END;
        CREATE TRIGGER memory_fts_ad AFTER DELETE ON memories BEGIN
            INSERT INTO memory_fts(memory_fts, rowid, content, key)
                VALUES ('delete', old.memory_rowid, old.content, old.key);
        END;
        CREATE TRIGGER memory_fts_au AFTER UPDATE OF content, key, memory_rowid ON memories
        WHEN old.content IS NOT new.content OR old.key IS NOT new.key OR old.memory_rowid IS NOT new.memory_rowid
        BEGIN
            INSERT INTO memory_fts(memory_fts, rowid, content, key)
                VALUES ('delete', old.memory_rowid, old.content, old.key);
            INSERT INTO memory_fts(rowid, content, key) VALUES (new.memory_rowid, new.content, new.key);
        END;

        CREATE TABLE settings (
            key   TEXT PRIMARY KEY,
            value TEXT NOT NULL
        ) WITHOUT ROWID;
    """,
}

_COLUMNS = "id, api_key_id, session_id, type, key, content, metadata, created_at, updated_at, expires_at"
_M_COLUMNS = ", ".join(f"m.{c.strip()}" for c in _COLUMNS.split(","))

_SQL_GET = f"SELECT {_COLUMNS} FROM memories WHERE id = ?"
_SQL_GET_BY_KEY = f"SELECT {_COLUMNS} FROM memories WHERE api_key_id = ? AND key = ?"
_SQL_GET_MANY = f"SELECT {_COLUMNS} FROM memories WHERE id IN (SELECT value FROM json_each(?))"
_SQL_INSERT = (
    "INSERT INTO memories (id, api_key_id, session_id, type, key, content, metadata, created_at, updated_at, "
    "expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SQL_UPDATE = (
    "UPDATE memories SET session_id = ?2, type = ?3, key = ?4, content = ?5, metadata = ?6, updated_at = ?7, "
    "expires_at = ?8, needs_reindex = CASE WHEN content IS NOT ?5 OR key IS NOT ?4 THEN 1 ELSE needs_reindex END "
    "WHERE id = ?1"
)
# put: drop a different memory holding the same (owner, key), then insert-or-replace by id in place (the
# rowid, access telemetry and — when content and key are unchanged — the FTS row and vector stay).
_SQL_PUT_EVICT = "DELETE FROM memories WHERE api_key_id = ? AND key = ? AND id <> ?"
_SQL_PUT = (
    _SQL_INSERT + " ON CONFLICT(id) DO UPDATE SET api_key_id = excluded.api_key_id, "
    "session_id = excluded.session_id, type = excluded.type, key = excluded.key, content = excluded.content, "
    "metadata = excluded.metadata, created_at = excluded.created_at, updated_at = excluded.updated_at, "
    "expires_at = excluded.expires_at, needs_reindex = CASE WHEN content IS NOT excluded.content "
    "OR key IS NOT excluded.key THEN 1 ELSE needs_reindex END"
)


# --- value conversion ----------------------------------------------------------------------------------

def format_ts(value: datetime) -> str:
    """Fixed-width ISO-8601 UTC text (``2026-11-29T14:27:46.123456Z``): sorts as it compares."""
    if value.tzinfo is not timezone.utc:
        value = value.astimezone(timezone.utc)
    return value.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _opt_ts(value: datetime | None) -> str | None:
    return None if value is None else format_ts(value)


def parse_ts(text: str) -> datetime:
    return datetime.fromisoformat(text[:-1]).replace(tzinfo=timezone.utc)


def _to_memory(row: Sequence[Any]) -> Memory:
    (memory_id, api_key_id, session_id, mtype, key, content, metadata, created, updated, expires) = row
    try:
        meta = json.loads(metadata) if metadata else {}
    except ValueError:
        meta = {}  # unreadable metadata (a hand edit): the memory is still usable
    return Memory(
        id=memory_id, api_key_id=api_key_id, session_id=session_id, type=mtype, key=key, content=content,
        metadata=meta if isinstance(meta, dict) else {}, created_at=parse_ts(created), updated_at=parse_ts(updated),
        expires_at=None if expires is None else parse_ts(expires),
    )


def _row_values(memory: Memory) -> tuple[Any, ...]:
    return (
        memory.id, memory.api_key_id, memory.session_id, memory.type.value, memory.key, memory.content,
        json.dumps(memory.metadata, ensure_ascii=False, separators=(",", ":")),
        format_ts(memory.created_at), format_ts(memory.updated_at), _opt_ts(memory.expires_at),
    )


_TERM = re.compile(r"[^\W_]+")


def fts_query(text: str) -> str:
    """An FTS5 MATCH expression for arbitrary user text, or ``""`` when it has no searchable term.

    The text is cut to 4096 characters; its terms (runs of letters and digits — what the ``unicode61``
    tokenizer indexes) are de-duplicated case-insensitively, limited to 32, each double-quoted (a quoted
    string is always a plain phrase to FTS5, so no user text can be read as syntax: ``NEAR(``, ``AND``,
    ``*``, ``-``, ``:``, ``^``, parentheses) and joined with ``OR`` for bm25 to rank.
    """
    seen: dict[str, str] = {}
    for term in _TERM.findall(text[:MAX_QUERY_CHARS]):
        folded = term.casefold()
        if folded not in seen:
            seen[folded] = term
            if len(seen) == MAX_QUERY_TERMS:
                break
    return " OR ".join(f'"{term}"' for term in seen.values())


def _casefold(value: Any) -> Any:
    return value.casefold() if isinstance(value, str) else value


# --- errors --------------------------------------------------------------------------------------------

def _translate(exc: apsw.Error, path: str, action: str, backend: str) -> BackendError:
    """The memroute error for an apsw error, with a message that says how to fix it."""
    where = f"SQLite backend {backend!r} ({path})"
    if isinstance(exc, (apsw.BusyError, apsw.LockedError)):
        return BackendUnavailableError(
            f"{where}: database is locked while trying to {action}: another process or thread holds the write "
            "lock. Retry, stop the other writer, or raise busy_timeout_ms.", backend=backend)
    if isinstance(exc, (apsw.CorruptError, apsw.NotADBError)):
        return BackendUnavailableError(
            f"{where}: the file is corrupt or not a SQLite database ({exc}). Restore it from a backup or move it "
            "aside so memroute creates a new one.", backend=backend)
    if isinstance(exc, (apsw.CantOpenError, apsw.ReadOnlyError, apsw.PermissionsError, apsw.AuthError)):
        return BackendUnavailableError(
            f"{where}: cannot {action}: {exc}. Check that the directory exists and the file and its directory "
            "are writable by this user, or set [backends.NAME] path.", backend=backend)
    if isinstance(exc, (apsw.FullError, apsw.IOError)):
        return BackendUnavailableError(
            f"{where}: I/O error while trying to {action}: {exc}. Check free disk space and the file system.",
            backend=backend)
    if isinstance(exc, apsw.ConstraintError):
        return ConflictError(f"{where}: cannot {action}: {exc}", backend=backend)
    return BackendError(f"{where}: cannot {action}: {type(exc).__name__}: {exc}", backend=backend)


# --- the backend ---------------------------------------------------------------------------------------

class SqliteBackend(MemoryBackend):
    """memroute's embedded default backend. Thread-safe: one apsw connection per thread, every write in a
    ``BEGIN IMMEDIATE`` transaction (so a read-then-write upsert never races another writer)."""

    capabilities = BackendCapabilities()
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
        self._pool: ThreadConnections | None = None
        self._init_lock = threading.Lock()

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

    @staticmethod
    def _on_open(connection: apsw.Connection) -> None:
        connection.create_scalar_function("memroute_casefold", _casefold, 1, deterministic=True)  # type: ignore[arg-type]
        # apsw caches prepared statements per connection; the default (100) already covers every query here

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
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise

    def _check_fts(self, connection: apsw.Connection) -> None:
        # rank = 1 also compares the index with the content table: a row written around the triggers (a
        # hand edit, an old tool) or any other drift is found here and repaired by a rebuild.
        try:
            connection.execute("INSERT INTO memory_fts(memory_fts, rank) VALUES ('integrity-check', 1)")
        except apsw.Error:
            with connection:
                connection.execute("INSERT INTO memory_fts(memory_fts) VALUES ('rebuild')")
            self.fts_rebuilt = True

    fts_rebuilt: bool = False
    """True when opening found the FTS index out of step with the table and rebuilt it."""

    def close(self) -> None:
        with self._init_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        self._cache.clear()

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
        with self._errors(action):
            connection = self._connection()
            connection.execute("BEGIN IMMEDIATE")
            try:
                yield connection
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")

    def _read(self, sql: str, bindings: Any = (), action: str = "read") -> builtins.list[tuple[Any, ...]]:
        with self._errors(action):
            return self._connection().execute(sql, bindings).fetchall()

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
        with self._write("create a memory") as connection:
            row = connection.execute(_SQL_GET_BY_KEY, (new.api_key_id, new.key)).fetchone()
            if row is None:
                memory = new.as_memory()
                connection.execute(_SQL_INSERT, _row_values(memory))
            else:
                memory = new.merged_into(_to_memory(row))
                self._update_row(connection, memory)
        self._invalidate((memory.id,), (memory,))
        return memory

    @staticmethod
    def _update_row(connection: apsw.Connection, memory: Memory) -> None:
        values = _row_values(memory)
        # (id, session, type, key, content, metadata, updated_at, expires_at)
        connection.execute(_SQL_UPDATE, (values[0], values[2], values[3], values[4], values[5], values[6],
                                         values[8], values[9]))

    def put(self, memory: Memory) -> None:
        with self._write("store a replicated memory") as connection:
            evicted = self._put_rows(connection, (memory,))
        self._invalidate([memory.id, *evicted])

    def put_many(self, memories: Iterable[Memory]) -> int:
        """``put`` every memory in one transaction (bulk import); later items win over earlier ones with the
        same id or ``(api_key_id, key)``. Returns how many were stored."""
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
        with self._write("import memories") as connection:
            evicted = self._put_rows(connection, batch.values())
        self._invalidate([*batch, *evicted])
        return len(batch)

    @staticmethod
    def _put_rows(connection: apsw.Connection, memories: Iterable[Memory]) -> builtins.list[str]:
        """Write ``memories`` (inside the caller's transaction); returns the ids of memories they evicted."""
        rows = [_row_values(m) for m in memories]
        evicted: builtins.list[str] = []
        for row in rows:
            evicted += [r[0] for r in connection.execute(_SQL_PUT_EVICT + " RETURNING id", (row[1], row[4], row[0]))]
        connection.executemany(_SQL_PUT, rows)
        return evicted

    def get(self, memory_id: str) -> Memory | None:
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

    def get_many(self, memory_ids: Sequence[str]) -> dict[str, Memory]:
        """The memories among ``memory_ids`` that exist, in one query."""
        if not memory_ids:
            return {}
        rows = self._read(_SQL_GET_MANY, (json.dumps(list(memory_ids)),), "read memories")
        return {m.id: m for m in map(_to_memory, rows)}

    def update(self, memory_id: str, patch: MemoryPatch) -> Memory | None:
        with self._write("update a memory") as connection:
            row = connection.execute(_SQL_GET, (memory_id,)).fetchone()
            if row is None:
                return None
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
        self._invalidate((memory_id,), (memory,))
        return memory

    def delete(self, memory_id: str) -> bool:
        with self._write("delete a memory") as connection:
            deleted = connection.execute("DELETE FROM memories WHERE id = ? RETURNING id", (memory_id,)).fetchall()
        self._invalidate((memory_id,))
        return bool(deleted)

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
            f"SELECT {_COLUMNS} FROM memories WHERE {where} ORDER BY created_at DESC, memory_rowid DESC LIMIT ?",
            [*params, query.limit], "search memories")
        return [BackendHit(memory=_to_memory(row), score=1.0 / rank) for rank, row in enumerate(rows, start=1)]

    def keyword(self, query: SearchQuery) -> builtins.list[BackendHit]:
        match = fts_query(query.text)
        if not match:
            return []
        where, params = self._scope(query, "m.")
        rows = self._read(
            f"SELECT {_M_COLUMNS}, bm25(memory_fts, {CONTENT_WEIGHT}, {KEY_WEIGHT}) AS rank "
            "FROM memory_fts JOIN memories AS m ON m.memory_rowid = memory_fts.rowid "
            f"WHERE memory_fts MATCH ? AND {where} ORDER BY rank, m.created_at DESC LIMIT ?",
            [match, *params, query.limit], "search memories")
        return [BackendHit(memory=_to_memory(row[:-1]), score=-float(row[-1])) for row in rows]

    # --- reindex queue, access telemetry, settings -----------------------------------------------------

    def pending_reindex(self, limit: int = 100) -> builtins.list[Memory]:
        """Memories whose vector is missing or stale (``needs_reindex = 1``), oldest first."""
        rows = self._read(
            f"SELECT {_COLUMNS} FROM memories WHERE needs_reindex = 1 ORDER BY created_at, memory_rowid LIMIT ?",
            (int(limit),), "read the reindex queue")
        return [_to_memory(r) for r in rows]

    def count_pending_reindex(self) -> int:
        return int(self._read("SELECT count(*) FROM memories WHERE needs_reindex = 1")[0][0])

    def mark_indexed(self, memories: Iterable[Memory | str]) -> int:
        """Clear ``needs_reindex``. Pass the :class:`Memory` objects that were embedded to clear only rows
        not changed since (same ``updated_at``); a bare id clears unconditionally. Returns rows cleared."""
        items = builtins.list(memories)
        guarded = [(m.id, format_ts(m.updated_at)) for m in items if isinstance(m, Memory)]
        plain = [(m,) for m in items if isinstance(m, str)]
        with self._write("mark memories indexed") as connection:
            before = connection.total_changes()
            connection.executemany(
                "UPDATE memories SET needs_reindex = 0 WHERE id = ? AND updated_at = ? AND needs_reindex = 1",
                guarded)
            connection.executemany("UPDATE memories SET needs_reindex = 0 WHERE id = ? AND needs_reindex = 1",
                                   plain)
            return int(connection.total_changes() - before)

    def mark_all_for_reindex(self) -> int:
        """Flag every memory for re-embedding (the embedding signature changed). Returns rows flagged."""
        with self._write("flag memories for reindex") as connection:
            before = connection.total_changes()
            connection.execute("UPDATE memories SET needs_reindex = 1 WHERE needs_reindex = 0")
            return int(connection.total_changes() - before)

    def record_access(self, memory_ids: Iterable[str], now: datetime | None = None) -> None:
        """Count an injection of these memories (``access_count``, ``last_accessed_at``). Touches neither the
        FTS index (the update trigger ignores these columns) nor the cached memories."""
        stamp = format_ts(now or memroute.models.utcnow())
        unique = sorted(set(memory_ids))
        with self._write("record memory access") as connection:
            connection.executemany(
                "UPDATE memories SET access_count = access_count + 1, last_accessed_at = ? WHERE id = ?",
                [(stamp, i) for i in unique])

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
        started = time.perf_counter()
        try:
            with self._errors("check health"):
                connection = self._connection()
                count = connection.execute("SELECT count(*) FROM memories").fetchall()[0][0]
                version = connection.pragma("user_version")
        except MemrouteError as exc:
            return HealthResult(ok=False, latency_ms=(time.perf_counter() - started) * 1000, error=str(exc))
        return HealthResult(ok=True, latency_ms=(time.perf_counter() - started) * 1000,
                            details={"memories": count, "schema_version": version, "path": self.path})

    def identity(self) -> str:
        """The database file's absolute path: the vector index and outbox of this primary live in a state
        directory derived from it, so two databases never share an index."""
        return f"sqlite:{self.path if self.path == ':memory:' else Path(self.path).resolve()}"

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type_name, "path": self.path, "schema_version": SCHEMA_VERSION,
                "cache": self._cache.stats()}


@memroute.hookimpl
def memroute_backends() -> Iterator[BackendSpec]:
    yield BackendSpec(
        name="sqlite", factory=SqliteBackend.from_settings, settings_class=SqliteSettings,
        description="Embedded SQLite file (apsw, FTS5 bm25 keyword search); memroute's default backend.",
    )
