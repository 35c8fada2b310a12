"""The SQLite backend's schema, SQL, value conversion, FTS query sanitising and error translation.

Kept apart from :mod:`memroute_builtins.backends.sqlite.backend` (the backend class) so each module reads on its own.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any, Final

import apsw

from memroute.errors import BackendError, BackendUnavailableError, ConflictError
from memroute.models import HistoryEvent, Memory, MemoryType

SCHEMA_VERSION: Final = 2
MAX_QUERY_CHARS: Final = 4096
MAX_QUERY_TERMS: Final = 32


# --- schema --------------------------------------------------------------------------------------------

_TYPES_SQL = ", ".join(f"'{t.value}'" for t in MemoryType)
_EVENTS_SQL = ", ".join(f"'{e.value}'" for e in HistoryEvent)

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
        -- The reference's single-column api_key / session indexes, led by the owner every query filters on
        -- ((api_key_id, created_at) also serves recency order). Its type index is left out on purpose: four
        -- values are never selective, and every write would pay for it.
        CREATE INDEX idx_memories_api_key ON memories(api_key_id, created_at);
        -- Partial: rows without a session or an expiry (most) cost these indexes nothing; `session_id = ?` and
        -- `expires_at <= ?` imply NOT NULL, so the queries that need them still use them.
        CREATE INDEX idx_memories_session ON memories(api_key_id, session_id, created_at)
            WHERE session_id IS NOT NULL;
        CREATE INDEX idx_memories_expires ON memories(expires_at) WHERE expires_at IS NOT NULL;
        CREATE INDEX idx_memories_needs_reindex ON memories(needs_reindex) WHERE needs_reindex = 1;

        -- The FTS source adds an `owner` column (the api key as one hex token) so a keyword search intersects
        -- the tenant's posting list inside FTS5 instead of joining every tenant's matches to the table; the
        -- owner filter in SQL stays the authority.
        CREATE VIEW memory_fts_source AS
            SELECT memory_rowid, content, key, hex(api_key_id) AS owner FROM memories;
        CREATE VIRTUAL TABLE memory_fts USING fts5(
            content, key, owner, content='memory_fts_source', content_rowid='memory_rowid'
        );
        CREATE TRIGGER memory_fts_ai AFTER INSERT ON memories BEGIN
            INSERT INTO memory_fts(rowid, content, key, owner)
                VALUES (new.memory_rowid, new.content, new.key, hex(new.api_key_id));
        END;
        CREATE TRIGGER memory_fts_ad AFTER DELETE ON memories BEGIN
            INSERT INTO memory_fts(memory_fts, rowid, content, key, owner)
                VALUES ('delete', old.memory_rowid, old.content, old.key, hex(old.api_key_id));
        END;
        CREATE TRIGGER memory_fts_au AFTER UPDATE OF content, key, api_key_id, memory_rowid ON memories
        WHEN old.content IS NOT new.content OR old.key IS NOT new.key OR old.api_key_id IS NOT new.api_key_id
            OR old.memory_rowid IS NOT new.memory_rowid
        BEGIN
            INSERT INTO memory_fts(memory_fts, rowid, content, key, owner)
                VALUES ('delete', old.memory_rowid, old.content, old.key, hex(old.api_key_id));
            INSERT INTO memory_fts(rowid, content, key, owner)
                VALUES (new.memory_rowid, new.content, new.key, hex(new.api_key_id));
        END;

        CREATE TABLE settings (
            key   TEXT PRIMARY KEY,
            value TEXT NOT NULL
        ) WITHOUT ROWID;
    """,
    # 2: the history of every memory's changes (capability ``history``). No foreign key to memories: the
    # history of a deleted memory is kept (see docs/pipeline.md, "History").
    2: f"""
        CREATE TABLE memory_history (
            history_rowid INTEGER PRIMARY KEY,
            id            TEXT NOT NULL UNIQUE,
            memory_id     TEXT NOT NULL,
            api_key_id    TEXT NOT NULL,
            event         TEXT NOT NULL CHECK (event IN ({_EVENTS_SQL})),
            actor         TEXT NOT NULL,
            at            TEXT NOT NULL,
            old_content   TEXT,
            new_content   TEXT,
            old_key       TEXT,
            new_key       TEXT,
            old_type      TEXT,
            new_type      TEXT
        );
        CREATE INDEX idx_memory_history_memory ON memory_history(api_key_id, memory_id, history_rowid);
        CREATE INDEX idx_memory_history_at ON memory_history(at);
    """,
}

# Per-tenant data versions (capability ``data_versions``): bumped in the write's own transaction by triggers, so
# every process's writes move them, also those of a memroute that predates them (the triggers live in the file).
# Created if missing at every open rather than as a numbered migration: an older memroute can still open the file.
# An update moves the version only when something a search reads changes: not access telemetry, updated_at or
# metadata (a re-stated fact that changes nothing else leaves it alone).
_SEARCHED = ("id", "api_key_id", "session_id", "type", "key", "content", "created_at", "expires_at", "needs_reindex")


def _per_tenant_counter(table: str, column: str, name: str, watched: Sequence[str], *, owner_trigger: bool) -> str:
    """DDL of a per-tenant counter moved by triggers: every insert and delete, and every update changing one of
    ``watched``. An update that moves a row to another owner moves both owners' counters: in the one update
    trigger, or, with ``owner_trigger``, in a second trigger that fires only then (an update within one owner
    then moves the counter once)."""
    # No conflict clause inside the trigger: the statement that fires it imposes its own (INSERT OR REPLACE, an
    # upsert) on every statement of the trigger body.
    def bump(who: str) -> str:
        return (f"INSERT INTO {table}(api_key_id, {column}) SELECT {who}.api_key_id, 0 WHERE NOT EXISTS "
                f"(SELECT 1 FROM {table} WHERE api_key_id = {who}.api_key_id); "
                f"UPDATE {table} SET {column} = {column} + 1 WHERE api_key_id = {who}.api_key_id;")

    changed = " OR ".join(f"old.{c} IS NOT new.{c}" for c in watched)
    ddl = f"""
    CREATE TABLE IF NOT EXISTS {table} (
        api_key_id TEXT PRIMARY KEY,
        {column} INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE TRIGGER IF NOT EXISTS {name}_ai AFTER INSERT ON memories BEGIN {bump("new")} END;
    CREATE TRIGGER IF NOT EXISTS {name}_ad AFTER DELETE ON memories BEGIN {bump("old")} END;
    """
    if not owner_trigger:
        return ddl + f"""CREATE TRIGGER IF NOT EXISTS {name}_au AFTER UPDATE ON memories WHEN {changed}
    BEGIN {bump("old")} {bump("new")} END;
    """
    return ddl + f"""CREATE TRIGGER IF NOT EXISTS {name}_au AFTER UPDATE ON memories WHEN {changed}
    BEGIN {bump("old")} END;
    CREATE TRIGGER IF NOT EXISTS {name}_ao AFTER UPDATE OF api_key_id ON memories
    WHEN old.api_key_id IS NOT new.api_key_id BEGIN {bump("new")} END;
    """


ENSURE_DATA_VERSIONS: Final = _per_tenant_counter("memory_versions", "version", "memory_version", _SEARCHED,
                                                  owner_trigger=False)
_SQL_DATA_VERSION = "SELECT version FROM memory_versions WHERE api_key_id = ?"

# Per-tenant change counts: like the data versions, but moved by a change to any column a Memory shows (access
# telemetry, updated_at and metadata too), so memories built from rows can be trusted without reading the rows
# again while the count stands (memroute_builtins.backends.sqlite.tenants). needs_reindex is not shown: marking
# rows indexed moves nothing. Created if missing at every open, like the data versions.
_SHOWN = ("memory_rowid", "id", "api_key_id", "session_id", "type", "key", "content", "metadata", "created_at",
          "updated_at", "expires_at", "access_count", "last_accessed_at")
ENSURE_CHANGE_COUNTS: Final = _per_tenant_counter("memory_changes", "changes", "memory_change", _SHOWN,
                                                  owner_trigger=True)
_SQL_CHANGES = "SELECT changes FROM memory_changes WHERE api_key_id = ?"

_COLUMNS = ("id, api_key_id, session_id, type, key, content, metadata, created_at, updated_at, expires_at, "
            "access_count, last_accessed_at")
_M_COLUMNS = ", ".join(f"m.{c.strip()}" for c in _COLUMNS.split(","))

_SQL_GET = f"SELECT {_COLUMNS} FROM memories WHERE id = ?"
_SQL_GET_BY_KEY = f"SELECT {_COLUMNS} FROM memories WHERE api_key_id = ? AND key = ?"
_SQL_GET_MANY = f"SELECT {_COLUMNS} FROM memories WHERE id IN (SELECT value FROM json_each(?))"
# With the FTS rowid first (what TenantMemories keeps memories by). `+api_key_id`: the owner is checked on the
# rows found by id, never used as an index. Without the `+` SQLite's planner (no statistics) walked the owner index,
# i.e. every memory of the tenant, testing each id against the list: a search's vector candidates cost 17 ms at
# 100k memories per tenant instead of ~100 lookups (docs/performance.md, "Where the time goes").
_SQL_GET_MANY_OWNED = (f"SELECT memory_rowid, {_COLUMNS} FROM memories WHERE id IN (SELECT value FROM json_each(?1)) "
                       "AND +api_key_id = ?2")
_SQL_GET_ROWIDS = (f"SELECT memory_rowid, {_COLUMNS} FROM memories "
                   "WHERE memory_rowid IN (SELECT value FROM json_each(?))")
_SQL_INSERT = (
    "INSERT INTO memories (id, api_key_id, session_id, type, key, content, metadata, created_at, updated_at, "
    "expires_at, access_count, last_accessed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SQL_INSERT_NEW = _SQL_INSERT + " ON CONFLICT DO NOTHING RETURNING memory_rowid"
_SQL_UPDATE = (
    "UPDATE memories SET session_id = ?2, type = ?3, key = ?4, content = ?5, metadata = ?6, updated_at = ?7, "
    "expires_at = ?8, needs_reindex = CASE WHEN content IS NOT ?5 OR key IS NOT ?4 OR session_id IS NOT ?2 "
    "OR expires_at IS NOT ?8 THEN 1 ELSE needs_reindex END WHERE id = ?1"
)
# needs_reindex marks the rows whose vector must be (re)written: new rows, and changes to anything the vector
# or its filter payload holds (content, key, owner, session, created/expiry times).
# put: drop a different memory holding the same (owner, key), then insert-or-replace by id in place (the
# rowid, access telemetry and — when content and key are unchanged — the FTS row and vector stay).
_SQL_PUT_EVICT = (
    "DELETE FROM memories WHERE memory_rowid IN (SELECT m.memory_rowid FROM json_each(?) AS j JOIN memories AS m "
    "ON m.api_key_id = j.value ->> 0 AND m.key = j.value ->> 1 WHERE m.id <> j.value ->> 2) RETURNING id"
)
_SQL_PUT = (
    _SQL_INSERT + " ON CONFLICT(id) DO UPDATE SET api_key_id = excluded.api_key_id, "
    "session_id = excluded.session_id, type = excluded.type, key = excluded.key, content = excluded.content, "
    "metadata = excluded.metadata, created_at = excluded.created_at, updated_at = excluded.updated_at, "
    "expires_at = excluded.expires_at, needs_reindex = CASE WHEN content IS NOT excluded.content "
    "OR key IS NOT excluded.key OR session_id IS NOT excluded.session_id OR expires_at IS NOT excluded.expires_at "
    "OR created_at IS NOT excluded.created_at OR api_key_id IS NOT excluded.api_key_id THEN 1 ELSE needs_reindex END, "
    # Access telemetry only grows: a replicated or restored copy never erases accesses recorded here.
    "access_count = max(access_count, excluded.access_count), "
    "last_accessed_at = CASE WHEN excluded.last_accessed_at > coalesce(last_accessed_at, '') "
    "THEN excluded.last_accessed_at ELSE last_accessed_at END"
)
# Telemetry (memroute.routing.access): the owner is part of the match, so a batch can never touch another tenant's row;
# the later time wins (batches of several processes may land out of order). Columns outside the FTS trigger.
_SQL_RECORD_ACCESS = (
    "UPDATE memories SET access_count = access_count + ?3, last_accessed_at = CASE WHEN ?4 > "
    "coalesce(last_accessed_at, '') THEN ?4 ELSE last_accessed_at END WHERE id = ?1 AND api_key_id = ?2"
)
_SQL_RECORD_ACCESS_RETURNING = _SQL_RECORD_ACCESS + f" RETURNING memory_rowid, {_COLUMNS}"


# --- value conversion ----------------------------------------------------------------------------------

def format_ts(value: datetime) -> str:
    """Fixed-width ISO-8601 UTC text (``2026-11-29T14:27:46.123456Z``): sorts as it compares."""
    if value.tzinfo is not timezone.utc:
        value = value.astimezone(timezone.utc)
    return value.isoformat(timespec="microseconds")[:-6] + "Z"  # drop "+00:00"


def _opt_ts(value: datetime | None) -> str | None:
    return None if value is None else format_ts(value)


def parse_ts(text: str) -> datetime:
    return datetime.fromisoformat(text[:-1]).replace(tzinfo=timezone.utc)


def _to_memory(row: Sequence[Any]) -> Memory:
    (memory_id, api_key_id, session_id, mtype, key, content, metadata, created, updated, expires, accesses,
     accessed) = row
    try:
        meta = json.loads(metadata) if metadata else {}
    except ValueError:
        meta = {}  # unreadable metadata (a hand edit): the memory is still usable
    return Memory.trusted(  # rows were validated when they were written
        id=memory_id, api_key_id=api_key_id, session_id=session_id, type=mtype, key=key, content=content,
        metadata=meta if isinstance(meta, dict) else {}, created_at=parse_ts(created), updated_at=parse_ts(updated),
        expires_at=None if expires is None else parse_ts(expires), access_count=int(accesses or 0),
        last_accessed_at=None if accessed is None else parse_ts(accessed),
    )


_ACCESS_COLUMNS: Final = 10
"""Index of ``access_count`` in a row of ``_COLUMNS`` (``last_accessed_at`` follows; both come last)."""


class RowMemo:
    """The :class:`Memory` last built from each memory's row, reused while the row reads back identical.

    A search materialises every candidate it reads (a hybrid search for ``augment`` reads up to 200 rows), and
    building a memory parses its metadata JSON and two or three timestamps: about 6 us a row, the largest cost
    left in the keyword leg. The row is still read from SQLite every time; only its conversion is memoised, so a
    row changed by this process or another is rebuilt (any column differs). Bounded to ``size`` memories,
    oldest entry dropped first, and only memories of at most ``max_chars`` characters are kept (a few huge ones
    must not pin megabytes). Memories are shared between callers: their ``metadata`` is read-only.
    """

    max_chars = 16_384

    def __init__(self, size: int = 8192) -> None:
        self.size = size
        self._items: dict[str, tuple[tuple[Any, ...], Memory]] = {}
        self._lock = threading.Lock()

    def memory(self, row: Sequence[Any]) -> Memory:
        row = tuple(row)
        found = self._items.get(row[0])
        if found is not None:
            if found[0] == row:
                return found[1]
            if found[0][:_ACCESS_COLUMNS] == row[:_ACCESS_COLUMNS]:
                # Only the access telemetry moved (augment records every memory it injects, so the memories
                # read most often are exactly the ones whose counts change): keep the parsed content,
                # metadata and timestamps, take the new counts.
                accessed = row[_ACCESS_COLUMNS + 1]
                old = found[1]
                memory = Memory.trusted(
                    id=old.id, api_key_id=old.api_key_id, session_id=old.session_id, type=old.type, key=old.key,
                    content=old.content, metadata=old.metadata, created_at=old.created_at,
                    updated_at=old.updated_at, expires_at=old.expires_at, access_count=int(row[_ACCESS_COLUMNS] or 0),
                    last_accessed_at=None if accessed is None else parse_ts(accessed))
                self._keep(row, memory)
                return memory
        memory = _to_memory(row)
        if len(memory.content) > self.max_chars:
            return memory
        self._keep(row, memory)
        return memory

    def memories(self, rows: Sequence[Sequence[Any]], extra: int = 0, lead: int = 0) -> list[Memory]:
        """:meth:`memory` of each row, the rows' last ``extra`` columns (a search's rank and count) and first
        ``lead`` columns (a rowid) left out: the unchanged rows (most, read after read) matched here, without a
        call each."""
        items = self._items
        built = []
        for row in rows:
            if extra or lead:
                row = row[lead:len(row) - extra]
            found = items.get(row[0])
            built.append(found[1] if found is not None and found[0] == row else self.memory(row))
        return built

    def _keep(self, row: tuple[Any, ...], memory: Memory) -> None:
        with self._lock:
            self._items.pop(memory.id, None)  # re-inserted last: the newest entry is dropped last
            while len(self._items) >= self.size:
                del self._items[next(iter(self._items))]
            self._items[memory.id] = (row, memory)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


class WrittenRows:
    """The memories this process just wrote, with the rows written for them, until the indexer reads them back.

    A write flags its row for the vector index; the indexer then reads the flagged rows
    (:meth:`SqliteBackend.pending_reindex`) and used to build every memory again from its row (JSON and
    timestamp parsing: ~10 % of static indexing time). The rows are still read from SQLite; a row that reads
    back exactly as written takes the memory written, and any other row (changed since, by this process or
    another) is built from what was read. Entries leave when read; at most ``size`` are kept, oldest dropped
    first (a bigger import builds the rest as before).
    """

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._items: dict[str, tuple[tuple[Any, ...], Memory]] = {}
        self._lock = threading.Lock()

    def add(self, written: Sequence[tuple[tuple[Any, ...], Memory]]) -> None:
        with self._lock:
            for row, memory in written[-self.size:]:
                self._items.pop(memory.id, None)
                while len(self._items) >= self.size:
                    del self._items[next(iter(self._items))]
                self._items[memory.id] = (row, memory)

    def take(self, row: Sequence[Any]) -> Memory:
        """The memory for a row just read: the one written when the row is unchanged, else built from it."""
        row = tuple(row)
        if self._items:
            with self._lock:
                found = self._items.pop(row[0], None)
            if found is not None and found[0] == row:
                return found[1]
        return _to_memory(row)

    def discard(self, memory_ids: Iterable[str]) -> None:
        with self._lock:
            for memory_id in memory_ids:
                self._items.pop(memory_id, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


_dump_metadata = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _row_values(memory: Memory) -> tuple[Any, ...]:
    return (
        memory.id, memory.api_key_id, memory.session_id, memory.type.value, memory.key, memory.content,
        _dump_metadata(memory.metadata) if memory.metadata else "{}",
        format_ts(memory.created_at), format_ts(memory.updated_at), _opt_ts(memory.expires_at),
        memory.access_count, _opt_ts(memory.last_accessed_at),
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
