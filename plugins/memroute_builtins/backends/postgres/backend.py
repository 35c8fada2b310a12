"""The PostgreSQL storage backend (``type = "postgres"``): psycopg 3, a connection pool, tsvector keyword search,
row-level security by tenant.

Schema (``"<schema>".schema_migrations`` holds the version; migrations in
:mod:`memroute_builtins.backends.postgres.schema` run in one transaction under an advisory lock, so several
processes starting together migrate once):

- ``memories``: the SQLite backend's columns with native types (``jsonb`` metadata, ``timestamptz`` times, a
  ``seq`` identity for insertion order), ``UNIQUE (api_key_id, key)`` as the upsert key, and a generated
  ``tsvector`` (key weighted twice the content) under one GIN index led by ``api_key_id`` (btree_gin). The
  primary key is ``(api_key_id, id)``: every key includes the tenant, so Citus can shard the table by it, and
  every statement a tenant's call sends names the tenant (:class:`~memroute.interfaces.TenantRouting`).
- ``needs_reindex`` is the retrieval engine's work queue, as in the SQLite backend: any memroute process on the
  database embeds what any other wrote.
- Row-level security, forced for the table owner too: a transaction sees only the tenant it was opened for
  (:meth:`Database.transaction`); every query also filters on the owner itself. Superusers and roles with
  ``BYPASSRLS`` skip policies, so connect as an ordinary role (``health()`` says which applies).

No per-process cache sits in front of reads: several servers share the database, and a write through one must
be read through every other at once.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import attrs

import memroute
from memroute.errors import BackendUnavailableError, ConflictError, MemrouteError, ValidationError
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
    utcnow,
)
from memroute.specs import BackendSpec
from memroute_builtins.backends.postgres.database import (
    ALL_TENANTS,
    Database,
    DatabaseSettings,
    check_schema_name,
    redact_dsn,
)
from memroute_builtins.backends.postgres.history import HistorySql, columns_of, to_entry
from memroute_builtins.backends.postgres.schema import (
    CONTENT_WEIGHT,
    KEY_WEIGHT,
    SCHEMA_VERSION,
    Sql,
    keyword_terms,
    migrations,
    or_query_sql,
    put_columns,
    row_values,
    to_memory,
)

__all__ = ["PostgresBackend", "PostgresSettings", "memroute_backends"]

_EXTENSIONS: Final = ("btree_gin",)
_PUT_CHUNK: Final = 5_000
"""Rows per set-based statement of ``put_many`` and of a history insert (bounds one statement's parameter arrays,
not the transaction)."""
_UPSERT_ATTEMPTS: Final = 50
"""Tries of a recorded add whose key's row concurrent writers keep deleting between its insert and its locked
read. Each retry means another transaction committed a delete of that key meanwhile, so the writers as a whole
progress; two threads deleting one key in a loop against four adding it made an add retry up to four times."""
TS_MATCH: Final = "pg_catalog.ts_match_vq(pg_catalog.tsvector, pg_catalog.tsquery)"
"""The function behind ``tsvector @@ tsquery``. Under row-level security PostgreSQL uses an operator as an
index condition only if its function is leakproof (otherwise it must run after the policy, row by row), and
only a superuser can mark it so: ``ALTER FUNCTION pg_catalog.ts_match_vq(tsvector, tsquery) LEAKPROOF``."""


@attrs.frozen(kw_only=True)
class PostgresSettings(DatabaseSettings):
    """Options of a ``[backends.NAME]`` table with ``type = "postgres"`` (see docs/backends/postgres.md)."""

    schema: str = attrs.field(default="memroute", validator=check_schema_name)
    """The PostgreSQL schema memroute's tables live in (created when missing)."""
    row_level_security: bool = True
    """Force row-level security by tenant on the table owner (the role in the dsn) as a second wall behind
    the owner filter every query applies. Keyword search keeps its GIN index under the policy only once a
    superuser has marked the text-match function leakproof (:data:`TS_MATCH`; ``health()`` says which
    applies); until then a search reads the tenant's rows (docs/backends/postgres.md has the numbers)."""


class PostgresBackend(MemoryBackend):
    """memroute's backend for a shared PostgreSQL. Thread-safe: each call borrows a pooled connection for one
    transaction. Keeps history (capability ``history``) and writes a change's history entry in the change's own
    transaction (:class:`~memroute.interfaces.RecordedWrites`, :class:`~memroute.interfaces.RecordedImports`)."""

    in_process = False  # a PostgreSQL server (its own processes)

    capabilities = BackendCapabilities(reindex_markers=True, access_tracking=True, tenant_routing=True,
                                       batch_create=True, history=True)
    type_name = "postgres"

    def __init__(self, name: str, settings: PostgresSettings) -> None:
        super().__init__(name)
        self.settings = settings
        self.schema = settings.schema
        self.sql = Sql(settings.schema)
        self.history_sql = HistorySql(settings.schema)
        self.db = Database(settings, component=f"PostgreSQL backend {name!r}")
        self._jsonb: Any = None
        self._opened = False

    @classmethod
    def from_settings(cls, settings: PostgresSettings, context: ComponentContext) -> PostgresBackend:
        """The factory memroute calls for ``[backends.NAME] type = "postgres"``."""
        return cls(context.instance_name, settings)

    # --- lifecycle ---------------------------------------------------------------------------------------

    def initialize(self) -> None:
        """Open the pool and apply migrations. Idempotent."""
        if self._opened:
            return
        from psycopg.types.json import Jsonb

        self._jsonb = Jsonb
        self.db.open()
        try:
            self._migrate()
        except BaseException:
            self.db.close()
            raise
        self._opened = True

    def _migrate(self) -> None:
        s = f'"{self.schema}"'
        with self.db.transaction("create memroute's schema", tenant=ALL_TENANTS) as conn:
            # One migrator at a time across processes: the others wait here, then find the work done.
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"memroute.migrate.{self.schema}",))
            for extension in _EXTENSIONS:
                present = conn.execute("SELECT 1 FROM pg_extension WHERE extname = %s", (extension,)).fetchone()
                if present is None:
                    try:
                        with conn.transaction():
                            conn.execute(f"CREATE EXTENSION IF NOT EXISTS {extension}")
                    except Exception as exc:
                        raise BackendUnavailableError(
                            f"{self.db.where}: the {extension} extension is missing and this role cannot create it "
                            f"({exc}). Run CREATE EXTENSION {extension}; once as a superuser (it ships with "
                            "PostgreSQL's contrib modules).", backend=self.name) from exc
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
            conn.execute(f"CREATE TABLE IF NOT EXISTS {self.sql.version_table} (version integer NOT NULL, "
                         "applied_at timestamptz NOT NULL DEFAULT now())")
            row = conn.execute(f"SELECT max(version) FROM {self.sql.version_table}").fetchone()
            version = int(row[0]) if row and row[0] is not None else 0
            if version > SCHEMA_VERSION:
                raise BackendUnavailableError(
                    f"{self.db.where}: schema {self.schema!r} is at version {version}, newer than this memroute "
                    f"supports ({SCHEMA_VERSION}). Upgrade memroute.", backend=self.name)
            steps = migrations(self.schema)
            for target in sorted(v for v in steps if v > version):
                conn.execute(steps[target])
                conn.execute(f"INSERT INTO {self.sql.version_table} (version) VALUES (%s)", (target,))
            forced = conn.execute("SELECT relforcerowsecurity FROM pg_class WHERE oid = %s::regclass",
                                  (self.sql.table,)).fetchone()[0]
            if bool(forced) != self.settings.row_level_security:
                conn.execute(f"ALTER TABLE {self.sql.table} {'' if self.settings.row_level_security else 'NO '}"
                             "FORCE ROW LEVEL SECURITY")

    def close(self) -> None:
        if self._opened:
            self._opened = False
            self.db.close()

    # --- CRUD --------------------------------------------------------------------------------------------

    def _values(self, memory: Memory) -> tuple[Any, ...]:
        return row_values(memory, self._jsonb)

    def create(self, new: NewMemory) -> Memory:
        """Upsert on ``(api_key_id, key)`` in one statement: an existing memory keeps its id and
        ``created_at``; content, type, session and expiry are replaced and metadata is shallow-merged."""
        memory = new.as_memory()
        with self.db.transaction("create a memory", tenant=new.api_key_id) as conn:
            row = conn.execute(self.sql.upsert, self._values(memory)).fetchone()
        return to_memory(row)

    def create_many(self, news: Sequence[NewMemory]) -> builtins.list[Memory | MemrouteError]:
        """``create`` each of ``news`` in one transaction, in order (a later item with an earlier one's key
        upserts into it, as one after another would; the tenant is set for each item's statement, so a batch
        may mix tenants). Each item's upsert runs in a savepoint: an item's own error — its id taken by another
        memory of the tenant (:class:`ConflictError`), text PostgreSQL cannot store (:class:`ValidationError`)
        — rolls back that item alone and is returned in its place; the others are committed. Any other failure
        (the connection, the server) rolls the whole batch back and raises. The service's group commit writes
        concurrent adds through this (``batch_create``)."""
        return self._create_many(news, None)

    def create_many_recorded(self, news: Sequence[NewMemory],
                             notes: Sequence[HistoryNote]) -> builtins.list[Memory | MemrouteError]:
        """:meth:`create_many` with each stored item's history entry inserted in the same transaction, inside the
        item's savepoint (:class:`~memroute.interfaces.RecordedWrites`): an item that fails on its own data leaves
        neither its memory nor its entry, and any other failure (of the database, or of a history insert) rolls
        the whole batch back and raises. The entry says what the row the upsert replaced held, read under a row
        lock inside the transaction (no concurrent writer slips in between)."""
        if len(notes) != len(news):
            raise ValidationError(f"create_many_recorded: {len(news)} memories but {len(notes)} notes",
                                  [("notes", "length")])
        return self._create_many(news, notes)

    def _create_many(self, news: Sequence[NewMemory],
                     notes: Sequence[HistoryNote] | None) -> builtins.list[Memory | MemrouteError]:
        if not news:
            return []
        outcomes: builtins.list[Memory | MemrouteError] = []
        tenant = news[0].api_key_id
        with self.db.transaction("create memories", tenant=tenant) as conn:
            for at, new in enumerate(news):
                if new.api_key_id != tenant:
                    tenant = new.api_key_id
                    self.db.set_tenant(conn, tenant)
                try:
                    with conn.transaction():  # a savepoint inside the batch's transaction
                        if notes is None:
                            memory = to_memory(conn.execute(self.sql.upsert, self._values(new.as_memory())).fetchone())
                        else:
                            before, memory = self._upsert_locked(conn, new)
                            entry = HistoryEntry.of_change(before, memory, actor=notes[at].actor, event=notes[at].event)
                            if entry is not None:
                                self._record(conn, tenant, [entry])
                except Exception as exc:
                    outcome = self._item_error(exc)
                    if outcome is None:
                        raise  # not this item's fault: the whole batch rolls back
                    outcomes.append(outcome)
                    continue
                outcomes.append(memory)
        return outcomes

    def _upsert_locked(self, conn: Any, new: NewMemory) -> tuple[Memory | None, Memory]:
        """The upsert of ``new`` inside the caller's transaction, with the row it replaced (``None``: a new key).

        A new key is one insert. A taken key's row is locked (``FOR UPDATE``) and read before the upsert writes
        into it, so the row read is the row replaced, whatever concurrent writers do; if that row was deleted
        between the insert and the read, the insert is tried again. When the key is free but the insert still
        conflicts, the id is taken by another memory of the tenant: :class:`ConflictError`."""
        values = self._values(new.as_memory())
        for _attempt in range(_UPSERT_ATTEMPTS):
            inserted = conn.execute(self.sql.insert_new, values).fetchone()
            if inserted is not None:
                return None, to_memory(inserted)
            locked = conn.execute(self.sql.get_by_key_for_update, (new.api_key_id, new.key)).fetchone()
            if locked is not None:
                return to_memory(locked), to_memory(conn.execute(self.sql.upsert, values).fetchone())
            if conn.execute(self.sql.get, (new.api_key_id, new.id)).fetchone() is not None:
                raise ConflictError(f"memory id {new.id} is already used by another memory", backend=self.name)
        raise ConflictError(f"key {new.key!r}: concurrent writers deleted and re-created its memory {_UPSERT_ATTEMPTS} "
                            "times while this add waited; add it again", backend=self.name)

    def _item_error(self, exc: Exception) -> MemrouteError | None:
        """The error that belongs to one item of a batch (its data: SQLSTATE classes 22 and 23, or text the
        driver cannot encode), or ``None`` for a failure of the database itself."""
        import psycopg

        if isinstance(exc, (UnicodeError, RecursionError)):
            return ValidationError(f"create: backend {self.name!r} cannot take this input ({type(exc).__name__}: "
                                   f"{exc})", [("(input)", "invalid")])
        if isinstance(exc, (ValidationError, ConflictError)):
            return exc
        if not isinstance(exc, (psycopg.DataError, psycopg.IntegrityError)):
            return None
        translated = self.db.translate(exc, "create a memory")
        if isinstance(translated, (ConflictError, ValidationError)):
            return translated
        return ValidationError(str(translated), [("(input)", "invalid")])

    def put(self, memory: Memory) -> None:
        self.put_many([memory])

    def put_many(self, memories: Sequence[Memory]) -> int:
        """Store exact copies in one transaction (replication and import). The last copy of one
        ``(api_key_id, id)``, or of one ``(api_key_id, key)``, in the batch wins. The same id under another
        tenant is another memory: ids are unique per tenant by the primary key, across tenants by being random
        UUIDs (and the import refuses another tenant's id)."""
        return self._put_many(memories, ())

    def put_many_recorded(self, memories: Sequence[Memory], entries: Sequence[HistoryEntry]) -> int:
        """:meth:`put_many` with ``entries`` inserted in the same transaction, each under its tenant's scope
        (:class:`~memroute.interfaces.RecordedImports`): a failure of either rolls both back and raises."""
        return self._put_many(memories, entries)

    def _put_many(self, memories: Sequence[Memory], entries: Sequence[HistoryEntry]) -> int:
        batch: dict[tuple[str, str], Memory] = {}
        by_key: dict[tuple[str, str], str] = {}
        for memory in memories:
            tenant = memory.api_key_id
            previous = by_key.get((tenant, memory.key))
            if previous is not None and previous != memory.id:
                del batch[(tenant, previous)]
            batch.pop((tenant, memory.id), None)
            batch[(tenant, memory.id)] = memory
            by_key[(tenant, memory.key)] = memory.id
        if not batch:
            return 0
        by_tenant: dict[str, list[Memory]] = {}
        for memory in batch.values():
            by_tenant.setdefault(memory.api_key_id, []).append(memory)
        recorded = _by_tenant(entries)
        first, *rest = dict.fromkeys([*by_tenant, *recorded])
        with self.db.transaction("store replicated memories", tenant=first) as conn:
            for tenant in (first, *rest):
                if tenant != first:
                    self.db.set_tenant(conn, tenant)
                group = by_tenant.get(tenant, [])
                for start in range(0, len(group), _PUT_CHUNK):
                    chunk = group[start:start + _PUT_CHUNK]
                    # Never prepared: after five runs a prepared statement may get a generic plan, which cannot
                    # see the arrays' size and joined 3,333 keys to a tenant's rows in 1.2 s (the custom plan:
                    # a hash join, 2.4 ms), so the tenth import of a long-lived server slowed 15-fold.
                    conn.execute(self.sql.put_evict, ([m.key for m in chunk], [m.id for m in chunk], tenant),
                                 prepare=False)
                    conn.execute(self.sql.put, [tenant, *put_columns(chunk)])
                self._record(conn, tenant, recorded.get(tenant, []))
        return len(batch)

    # By id. The interface's get / get_many / update / delete name no tenant: they find the memory wherever it
    # is (on Citus: one query per shard). The service and the retrieval engine call the *_owned forms
    # (:class:`~memroute.interfaces.TenantRouting`), whose every statement names the tenant: one shard, and
    # another tenant's memory with that id is simply not there.

    def get(self, memory_id: str) -> Memory | None:
        require_id(memory_id)  # NUL or a lone surrogate: a ValidationError, not a psycopg DataError
        with self.db.transaction("read a memory", tenant=ALL_TENANTS) as conn:
            row = conn.execute(self.sql.get_any_tenant, (memory_id,)).fetchone()
        return None if row is None else to_memory(row)

    def get_owned(self, api_key_id: str, memory_id: str) -> Memory | None:
        """The memory ``memory_id`` of ``api_key_id``, or ``None`` (also when another tenant holds the id)."""
        require_id(memory_id)
        with self.db.transaction("read a memory", tenant=api_key_id) as conn:
            row = conn.execute(self.sql.get, (api_key_id, memory_id)).fetchone()
        return None if row is None else to_memory(row)

    def get_many(self, memory_ids: Sequence[str]) -> dict[str, Memory]:
        """The memories among ``memory_ids`` that exist, in one query."""
        if not memory_ids:
            return {}
        for memory_id in memory_ids:
            require_id(memory_id)
        with self.db.transaction("read memories", tenant=ALL_TENANTS) as conn:
            rows = conn.execute(self.sql.get_many_any_tenant, (list(memory_ids),)).fetchall()
        return {m.id: m for m in map(to_memory, rows)}

    def get_many_owned(self, api_key_id: str, memory_ids: Sequence[str]) -> dict[str, Memory]:
        """The memories of ``api_key_id`` among ``memory_ids``, in one query on the tenant's shard."""
        if not memory_ids:
            return {}
        for memory_id in memory_ids:
            require_id(memory_id)
        with self.db.transaction("read memories", tenant=api_key_id) as conn:
            rows = conn.execute(self.sql.get_many, (api_key_id, list(memory_ids))).fetchall()
        return {m.id: m for m in map(to_memory, rows)}

    def update(self, memory_id: str, patch: MemoryPatch) -> Memory | None:
        require_id(memory_id)
        with self.db.transaction("update a memory", tenant=ALL_TENANTS) as conn:
            # Find the owner without a lock (Citus locks rows only in a single-shard query), then lock and
            # update the row through its owner.
            owner = conn.execute(self.sql.owner_any_tenant, (memory_id,)).fetchone()
            return None if owner is None else self._update(conn, str(owner[0]), memory_id, patch)

    def update_owned(self, api_key_id: str, memory_id: str, patch: MemoryPatch) -> Memory | None:
        """:meth:`update` of a memory of ``api_key_id`` (``None`` when the tenant has no such id)."""
        require_id(memory_id)
        with self.db.transaction("update a memory", tenant=api_key_id) as conn:
            return self._update(conn, api_key_id, memory_id, patch)

    def update_recorded(self, api_key_id: str, memory_id: str, patch: MemoryPatch,
                        note: HistoryNote) -> Memory | None:
        """:meth:`update_owned` with its history entry (the locked row before, the row after) in the same
        transaction (:class:`~memroute.interfaces.RecordedWrites`)."""
        require_id(memory_id)
        with self.db.transaction("update a memory", tenant=api_key_id) as conn:
            return self._update(conn, api_key_id, memory_id, patch, note)

    def _update(self, conn: Any, api_key_id: str, memory_id: str, patch: MemoryPatch,
                note: HistoryNote | None = None) -> Memory | None:
        row = conn.execute(self.sql.get_for_update, (api_key_id, memory_id)).fetchone()
        if row is None:
            return None
        existing = to_memory(row)
        if patch.is_empty():
            return existing
        memory = patch.applied_to(existing)
        if memory.key != existing.key:
            clash = conn.execute(self.sql.key_clash, (api_key_id, memory.key, memory.id)).fetchone()
            if clash is not None:
                raise ConflictError(
                    f"cannot rename memory {memory_id} to key {memory.key!r}: memory {clash[0]} of the same "
                    "api key already has that key", backend=self.name)
        conn.execute(self.sql.update, (
            memory.session_id, memory.type.value, memory.key, memory.content, self._jsonb(memory.metadata),
            memory.updated_at, memory.expires_at, memory.content, memory.key, memory.session_id,
            memory.expires_at, api_key_id, memory.id))
        if note is not None and (entry := HistoryEntry.of_change(existing, memory, actor=note.actor,
                                                                 event=note.event)) is not None:
            self._record(conn, api_key_id, [entry])
        return memory

    def delete(self, memory_id: str) -> bool:
        require_id(memory_id)
        with self.db.transaction("delete a memory", tenant=ALL_TENANTS) as conn:
            return conn.execute(self.sql.delete_any_tenant, (memory_id,)).fetchone() is not None

    def delete_owned(self, api_key_id: str, memory_id: str) -> bool:
        """Delete a memory of ``api_key_id``; ``False`` when the tenant has no such id."""
        return self._delete(api_key_id, memory_id, None)

    def delete_recorded(self, api_key_id: str, memory_id: str, note: HistoryNote) -> bool:
        """:meth:`delete_owned` with its history entry (what the deleted row said, as the delete returned it) in
        the same transaction (:class:`~memroute.interfaces.RecordedWrites`)."""
        return self._delete(api_key_id, memory_id, note)

    def _delete(self, api_key_id: str, memory_id: str, note: HistoryNote | None) -> bool:
        require_id(memory_id)
        with self.db.transaction("delete a memory", tenant=api_key_id) as conn:
            row = conn.execute(self.sql.delete, (api_key_id, memory_id)).fetchone()
            if row is not None and note is not None and (entry := HistoryEntry.of_change(
                    to_memory(row), None, actor=note.actor, event=note.event)) is not None:
                self._record(conn, api_key_id, [entry])
        return row is not None

    # --- list --------------------------------------------------------------------------------------------

    def list(self, filter: ListFilter) -> ListPage:
        where, params = ["true"], []
        if filter.api_key_id is not None:
            where.append("api_key_id = %s")
            params.append(filter.api_key_id)
        if filter.type is not None:
            where.append("type = %s")
            params.append(filter.type.value)
        if filter.session_id is not None:
            where.append("session_id = %s")
            params.append(filter.session_id)
        if filter.query and filter.query.strip():
            # Case-insensitive substring; strpos has no wildcards, so '%' and '_' match literally.
            needle = filter.query.strip()
            where.append("(strpos(lower(content), lower(%s)) > 0 OR strpos(lower(key), lower(%s)) > 0)")
            params += [needle, needle]
        clause = " AND ".join(where)
        direction = "DESC" if filter.order_dir == "desc" else "ASC"
        # Both from fixed allow-lists. NULLs (never accessed) sort as the oldest, as on every backend
        # (PostgreSQL's default puts them first in descending order).
        nulls = " NULLS LAST" if direction == "DESC" else " NULLS FIRST"
        order = f"{filter.order_by} {direction}{nulls}, seq {direction}"
        tenant = filter.api_key_id if filter.api_key_id is not None else ALL_TENANTS
        with self.db.transaction("list memories", tenant=tenant) as conn:
            counts = conn.execute(f"SELECT type, count(*) FROM {self.sql.table} WHERE {clause} GROUP BY type",
                                  params).fetchall()
            rows = conn.execute(
                f"SELECT {self.sql.columns} FROM {self.sql.table} WHERE {clause} ORDER BY {order} LIMIT %s OFFSET %s",
                [*params, filter.limit, filter.offset]).fetchall()
        by_type = {str(mtype): int(count) for mtype, count in counts}
        data = tuple(map(to_memory, rows))
        return ListPage(data=data, total=sum(by_type.values()), by_type=by_type)

    def iter_all(self, api_key_id: str | None = None, batch: int = 500) -> Iterable[Memory]:
        """Every memory (of one tenant, or all), oldest first, read in keyset pages."""
        tenant = api_key_id if api_key_id is not None else ALL_TENANTS
        owner = "AND api_key_id = %s" if api_key_id is not None else ""
        after = (datetime.min.replace(tzinfo=utcnow().tzinfo), -1)
        while True:
            params: builtins.list[Any] = [after[0], after[0], after[1]]
            if api_key_id is not None:
                params.append(api_key_id)
            with self.db.transaction("export memories", tenant=tenant) as conn:
                rows = conn.execute(
                    f"SELECT {self.sql.columns}, seq FROM {self.sql.table} WHERE (created_at > %s OR "
                    f"(created_at = %s AND seq > %s)) {owner} ORDER BY created_at, seq LIMIT %s",
                    [*params, batch]).fetchall()
            yield from (to_memory(r[:-1]) for r in rows)
            if len(rows) < batch:
                return
            after = (rows[-1][7], rows[-1][-1])

    # --- search ------------------------------------------------------------------------------------------

    @staticmethod
    def _scope(query: SearchQuery) -> tuple[str, builtins.list[Any]]:
        """The owner / expiry / retention / session filter every search path applies, in SQL."""
        sql = ["api_key_id = %s", "(expires_at IS NULL OR expires_at > %s)"]
        params: builtins.list[Any] = [query.api_key_id, query.now]
        cutoff = query.created_after
        if cutoff is not None:
            sql.append("created_at >= %s")
            params.append(cutoff)
        if query.session_id is not None:
            sql.append("session_id = %s")
            params.append(query.session_id)
        return " AND ".join(sql), params

    def search(self, query: SearchQuery) -> builtins.list[BackendHit]:
        """``exact``: the newest memories first (score 1/rank). Otherwise keyword: ``ts_rank`` over the key
        and content words (an OR of the query's terms); text without a searchable term gives no hits."""
        if query.strategy == "exact":
            return self.recent(query)
        return self.keyword(query)

    def recent(self, query: SearchQuery) -> builtins.list[BackendHit]:
        where, params = self._scope(query)
        with self.db.transaction("search memories", tenant=query.api_key_id) as conn:
            rows = conn.execute(
                f"SELECT {self.sql.columns} FROM {self.sql.table} WHERE {where} "
                "ORDER BY created_at DESC, seq DESC LIMIT %s", [*params, query.limit]).fetchall()
        return [BackendHit(memory=to_memory(row), score=1.0 / rank) for rank, row in enumerate(rows, start=1)]

    def keyword(self, query: SearchQuery) -> builtins.list[BackendHit]:
        statement = self.keyword_statement(query)
        if statement is None:
            return []
        with self.db.transaction("search memories", tenant=query.api_key_id) as conn:
            rows = conn.execute(*statement).fetchall()
        return [BackendHit(memory=to_memory(row[:-1]), score=float(row[-1])) for row in rows]

    def keyword_statement(self, query: SearchQuery) -> tuple[str, builtins.list[Any]] | None:
        """The keyword leg's SQL and parameters (``None``: the text has no searchable term). Public so a test
        can ``EXPLAIN`` exactly what :meth:`keyword` runs.

        Ranked in the database: ``ts_rank`` over the tenant's matches, top ``limit``. The GIN index over
        ``(api_key_id, search)`` finds the matches only where PostgreSQL may evaluate ``@@`` before the
        row-level security policy, i.e. when ``ts_match_vq`` is marked leakproof (see :meth:`health`)."""
        terms = keyword_terms(query.text)
        if not terms:
            return None
        where, params = self._scope(query)
        weights = f"'{{0, 0, {CONTENT_WEIGHT}, {KEY_WEIGHT}}}'::float4[]"
        sql = (f"WITH q AS (SELECT ({or_query_sql(len(terms))}) AS tsq) "
               f"SELECT {self.sql.columns}, ts_rank({weights}, search, q.tsq) AS rank "
               f"FROM {self.sql.table}, q WHERE search @@ q.tsq AND {where} "
               "ORDER BY rank DESC, created_at DESC, seq DESC LIMIT %s")
        return sql, [*terms, *params, query.limit]

    # --- reindex queue, access telemetry, settings -------------------------------------------------------

    def pending_reindex(self, limit: int = 100, api_key_id: str | None = None) -> builtins.list[Memory]:
        """Memories whose vector is missing or stale, oldest first (of one tenant, or all)."""
        tenant = api_key_id if api_key_id is not None else ALL_TENANTS
        owner = "AND api_key_id = %s" if api_key_id is not None else ""
        params = [api_key_id] if api_key_id is not None else []
        with self.db.transaction("read the reindex queue", tenant=tenant) as conn:
            rows = conn.execute(
                f"SELECT {self.sql.columns} FROM {self.sql.table} WHERE needs_reindex {owner} ORDER BY seq LIMIT %s",
                [*params, int(limit)]).fetchall()
        return [to_memory(r) for r in rows]

    def count_pending_reindex(self, api_key_id: str | None = None) -> int:
        tenant = api_key_id if api_key_id is not None else ALL_TENANTS
        owner = "AND api_key_id = %s" if api_key_id is not None else ""
        with self.db.transaction("read the reindex queue", tenant=tenant) as conn:
            row = conn.execute(f"SELECT count(*) FROM {self.sql.table} WHERE needs_reindex {owner}",
                               [api_key_id] if api_key_id is not None else []).fetchone()
        return int(row[0])

    def mark_indexed(self, memories: Iterable[Memory | str]) -> int:
        """Clear ``needs_reindex``. A :class:`Memory` clears only a row unchanged since (same ``updated_at``),
        in one statement per tenant; a bare id clears unconditionally, wherever it is. Returns rows cleared."""
        items = builtins.list(memories)
        by_tenant: dict[str, builtins.list[Memory]] = {}
        for item in items:
            if isinstance(item, Memory):
                by_tenant.setdefault(item.api_key_id, []).append(item)
        plain = [m for m in items if isinstance(m, str)]
        with self.db.transaction("mark memories indexed", tenant=ALL_TENANTS) as conn:
            cleared = 0
            for tenant, group in by_tenant.items():
                cur = conn.execute(self.sql.mark_indexed, ([m.id for m in group], [m.updated_at for m in group],
                                                           tenant))
                cleared += cur.rowcount
            if plain:
                cleared += conn.execute(self.sql.mark_indexed_any_tenant, (plain,)).rowcount
        return cleared

    def mark_all_for_reindex(self) -> int:
        """Flag every memory for re-embedding (the embedding signature changed). Returns rows flagged."""
        with self.db.transaction("flag memories for reindex", tenant=ALL_TENANTS) as conn:
            return int(conn.execute(f"UPDATE {self.sql.table} SET needs_reindex = true WHERE NOT needs_reindex")
                       .rowcount)

    def record_access(self, api_key_id: str, accesses: Mapping[str, MemoryAccess]) -> int:
        """Add batched accesses of memories of ``api_key_id`` (:class:`~memroute.interfaces.AccessRecorder`) in
        one statement, inside the tenant's row-level-security scope. ``updated_at``, ``needs_reindex`` and the
        generated ``search`` column are untouched. Returns the rows updated."""
        items = sorted(accesses.items())
        if not items:
            return 0
        with self.db.transaction("record memory access", tenant=api_key_id) as conn:
            cur = conn.execute(self.sql.record_access, ([i for i, _ in items], [a.count for _, a in items],
                                                        [a.at for _, a in items], api_key_id))
            return int(cur.rowcount)

    # --- history (capability ``history``: memroute_builtins.backends.postgres.history) ---------------------

    def append_history(self, entries: Sequence[HistoryEntry]) -> None:
        for tenant, batch in _by_tenant(entries).items():
            with self.db.transaction("record history", tenant=tenant) as conn:
                self._record(conn, tenant, batch)

    def _record(self, conn: Any, tenant: str, entries: Sequence[HistoryEntry]) -> None:
        """Insert ``entries`` of ``tenant`` inside the caller's transaction, scoped to that tenant."""
        for start in range(0, len(entries), _PUT_CHUNK):
            conn.execute(self.history_sql.insert, columns_of(tenant, entries[start:start + _PUT_CHUNK]))

    def history(self, api_key_id: str, memory_id: str) -> builtins.list[HistoryEntry]:
        with self.db.transaction("read history", tenant=api_key_id) as conn:
            rows = conn.execute(self.history_sql.select, (api_key_id, memory_id)).fetchall()
        return [to_entry(row) for row in rows]

    def purge_history(self, api_key_id: str | None, *, before: datetime) -> int:
        sql, params = self.history_sql.purge(api_key_id, before)
        with self.db.transaction("purge history", tenant=api_key_id or ALL_TENANTS) as conn:
            return int(conn.execute(sql, params).rowcount)

    def get_setting(self, key: str) -> str | None:
        with self.db.transaction("read a setting", tenant=ALL_TENANTS) as conn:
            row = conn.execute(f"SELECT value FROM {self.sql.settings_table} WHERE key = %s", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_setting(self, key: str, value: str | None) -> None:
        with self.db.transaction("write a setting", tenant=ALL_TENANTS) as conn:
            if value is None:
                conn.execute(f"DELETE FROM {self.sql.settings_table} WHERE key = %s", (key,))
            else:
                conn.execute(f"INSERT INTO {self.sql.settings_table} (key, value) VALUES (%s, %s) "
                             "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value", (key, value))

    # --- health and status -------------------------------------------------------------------------------

    def health(self) -> HealthResult:
        """A real round trip every time: the schema version, an estimate of the row count (``count(*)`` would
        scan millions of rows every 30 s), and whether row-level security applies to this role."""
        started = time.perf_counter()
        try:
            with self.db.transaction("check health", tenant=ALL_TENANTS) as conn:
                version, estimate, forced, bypass, leakproof, server = conn.execute(
                    f"SELECT (SELECT max(version) FROM {self.sql.version_table}), "
                    "(SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass), "
                    "(SELECT relforcerowsecurity FROM pg_class WHERE oid = %s::regclass), "
                    "(SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user), "
                    f"(SELECT proleakproof FROM pg_proc WHERE oid = '{TS_MATCH}'::regprocedure), "
                    "current_setting('server_version')", (self.sql.table, self.sql.table)).fetchone()
        except MemrouteError as exc:
            return HealthResult(ok=False, latency_ms=(time.perf_counter() - started) * 1000, error=str(exc))
        policy_applies = bool(forced) and not bypass
        return HealthResult(ok=True, latency_ms=(time.perf_counter() - started) * 1000, details={
            "schema_version": version, "memories_estimate": max(int(estimate or 0), 0),
            "row_level_security": ("bypassed (superuser or BYPASSRLS role)" if bypass else
                                   "enforced" if forced else "off (row_level_security = false)"),
            "keyword_index": ("gin" if leakproof or not policy_applies else
                              f"tenant scan: {TS_MATCH} is not leakproof, so under row-level security the GIN "
                              "index cannot serve keyword search (docs/backends/postgres.md)"),
            "server_version": server, "pool": self.db.stats()})

    def identity(self) -> str:
        """Host, port, database and schema: where this primary's data lives (no user, no password)."""
        from psycopg.conninfo import conninfo_to_dict

        try:
            info = conninfo_to_dict(self.settings.dsn)
        except Exception:
            return f"postgres:{redact_dsn(self.settings.dsn)}/{self.schema}"
        host = info.get("host") or info.get("hostaddr") or "local"
        return f"postgres:{host}:{info.get('port') or 5432}/{info.get('dbname') or ''}/{self.schema}"

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type_name, "dsn": redact_dsn(self.settings.dsn),
                "schema": self.schema, "schema_version": SCHEMA_VERSION, "pool": self.db.stats()}


def _by_tenant(entries: Iterable[HistoryEntry]) -> dict[str, builtins.list[HistoryEntry]]:
    grouped: dict[str, builtins.list[HistoryEntry]] = {}
    for entry in entries:
        grouped.setdefault(entry.api_key_id, []).append(entry)
    return grouped


@memroute.hookimpl
def memroute_backends() -> Iterator[BackendSpec]:
    yield BackendSpec(
        name="postgres", factory=_factory, settings_class=PostgresSettings,
        description="PostgreSQL (psycopg 3, pooled; tsvector keyword search; row-level security by tenant).",
    )


def _factory(settings: PostgresSettings, context: ComponentContext) -> PostgresBackend:
    return PostgresBackend.from_settings(settings, context)


@memroute.hookimpl
def memroute_state_store(primary: Any, context: Any) -> Any:
    """With a ``postgres`` primary, the deployment's keys, runtime settings and leases live in its database, so
    every server process on it shares them (see :mod:`memroute_builtins.backends.postgres.state`)."""
    del context
    if not isinstance(primary, PostgresBackend):
        return None
    from memroute_builtins.backends.postgres.state import PostgresStateStore

    return PostgresStateStore(primary.db, primary.schema)
