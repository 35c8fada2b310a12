"""The PostgreSQL backend's schema (versioned migrations), SQL, row conversion and keyword-query building.

Kept apart from :mod:`memroute_builtins.backends.postgres.backend` (the backend class) so each reads on its
own. Every statement names memroute's schema explicitly (``"memroute".memories``): nothing depends on the
connection's ``search_path``, which pgbouncer and shared roles make unreliable.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any, Final

from memroute.models import HistoryEvent, Memory, MemoryType

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Sql", "keyword_terms", "put_columns", "row_values", "to_memory"]

SCHEMA_VERSION: Final = 4
MAX_QUERY_CHARS: Final = 4096
MAX_QUERY_TERMS: Final = 32
INDEXED_PREFIX_CHARS: Final = 262_144
"""Keyword search indexes the first 256 Ki characters of a memory: a tsvector is capped at 1 MB, and a
memory of a million distinct words would otherwise be refused by the write."""
KEY_WEIGHT: Final = 1.0
CONTENT_WEIGHT: Final = 0.5
"""ts_rank weights of label A (the key) and B (the content): the key weighs twice the content, as in the
SQLite backend's bm25 and the reference's keyword scorer."""

_TYPES_SQL = ", ".join(f"'{t.value}'" for t in MemoryType)
_EVENTS_SQL = ", ".join(f"'{e.value}'" for e in HistoryEvent)
# The policy admits the tenant the transaction was opened for, or every row in a transaction opened for
# ALL_TENANTS (operations addressed by id). A transaction that set neither sees nothing: default deny.
_POLICY = ("(current_setting('memroute.all_tenants', true) = 'on' "
           "OR api_key_id = current_setting('memroute.api_key_id', true))")


def migrations(schema: str) -> dict[int, str]:
    """Version → DDL. Applied in order inside one transaction under an advisory lock (see the backend).

    1: memories (+ settings). 2: the deployment's state: API keys, state values, leases (``state``).
    3: the primary key of ``memories`` becomes ``(api_key_id, id)``, so every unique constraint of the tenant
    table includes the tenant and Citus can distribute it by ``api_key_id`` (docs/deployment.md), plus a plain
    index on ``id``. Rebuilding the key's index keeps every row as it is. 4: the history of every memory's
    changes (capability ``history``), keyed by tenant like ``memories`` and under the same row-level policy; no
    foreign key, so the history of a deleted memory stays."""
    from memroute_builtins.backends.postgres.state import state_migration

    s = f'"{schema}"'
    return {
        1: f"""
            CREATE TABLE {s}.memories (
                id               text PRIMARY KEY,
                seq              bigint GENERATED ALWAYS AS IDENTITY,
                api_key_id       text NOT NULL,
                session_id       text,
                type             text NOT NULL CHECK (type IN ({_TYPES_SQL})),
                key              text NOT NULL,
                content          text NOT NULL,
                metadata         jsonb NOT NULL DEFAULT '{{}}'::jsonb CHECK (jsonb_typeof(metadata) = 'object'),
                created_at       timestamptz NOT NULL,
                updated_at       timestamptz NOT NULL,
                expires_at       timestamptz,
                needs_reindex    boolean NOT NULL DEFAULT true,
                access_count     bigint NOT NULL DEFAULT 0,
                last_accessed_at timestamptz,
                -- 'simple': lower-cased words, no stemming and no stop words: the same terms FTS5's unicode61
                -- tokenizer indexes in the SQLite backend, so both keyword legs find the same memories.
                search tsvector GENERATED ALWAYS AS (
                    setweight(to_tsvector('simple'::regconfig, key), 'A') ||
                    setweight(to_tsvector('simple'::regconfig, left(content, {INDEXED_PREFIX_CHARS})), 'B')
                ) STORED,
                CONSTRAINT memories_owner_key UNIQUE (api_key_id, key)
            );
            -- Owner first in every index: every query filters on it ((api_key_id, created_at) also serves
            -- recency order and list pages).
            CREATE INDEX memories_owner_created ON {s}.memories (api_key_id, created_at, seq);
            CREATE INDEX memories_owner_session ON {s}.memories (api_key_id, session_id, created_at)
                WHERE session_id IS NOT NULL;
            CREATE INDEX memories_expires ON {s}.memories (expires_at) WHERE expires_at IS NOT NULL;
            CREATE INDEX memories_needs_reindex ON {s}.memories (seq) WHERE needs_reindex;
            -- One GIN index over (owner, words) (btree_gin): a keyword search intersects the tenant's
            -- postings inside the index instead of reading every tenant's matches.
            CREATE INDEX memories_search ON {s}.memories USING gin (api_key_id, search);

            ALTER TABLE {s}.memories ENABLE ROW LEVEL SECURITY;
            ALTER TABLE {s}.memories FORCE ROW LEVEL SECURITY;
            CREATE POLICY memories_tenant ON {s}.memories USING {_POLICY} WITH CHECK {_POLICY};

            CREATE TABLE {s}.settings (
                key   text PRIMARY KEY,
                value text NOT NULL
            );
        """,
        2: state_migration(schema),
        3: f"""
            ALTER TABLE {s}.memories DROP CONSTRAINT memories_pkey;
            ALTER TABLE {s}.memories ADD CONSTRAINT memories_pkey PRIMARY KEY (api_key_id, id);
            -- Not unique: the by-id operations that name no tenant (replication, the import's foreign-id
            -- check, verification) find an id without reading every row.
            CREATE INDEX memories_id ON {s}.memories (id);
        """,
        4: f"""
            CREATE TABLE {s}.memory_history (
                api_key_id  text NOT NULL,
                id          text NOT NULL,
                seq         bigint GENERATED ALWAYS AS IDENTITY,
                memory_id   text NOT NULL,
                event       text NOT NULL CHECK (event IN ({_EVENTS_SQL})),
                actor       text NOT NULL,
                at          timestamptz NOT NULL,
                old_content text,
                new_content text,
                old_key     text,
                new_key     text,
                old_type    text,
                new_type    text,
                PRIMARY KEY (api_key_id, id)
            );
            CREATE INDEX memory_history_memory ON {s}.memory_history (api_key_id, memory_id, at, seq);
            CREATE INDEX memory_history_at ON {s}.memory_history (at);
            ALTER TABLE {s}.memory_history ENABLE ROW LEVEL SECURITY;
            ALTER TABLE {s}.memory_history FORCE ROW LEVEL SECURITY;
            CREATE POLICY memory_history_tenant ON {s}.memory_history USING {_POLICY} WITH CHECK {_POLICY};
        """,
    }


MIGRATIONS = migrations
_COLUMNS: Final = ("id, api_key_id, session_id, type, key, content, metadata, created_at, updated_at, expires_at, "
                   "access_count, last_accessed_at")


class Sql:
    """The statements of one schema, built once per backend.

    Every statement that acts for one tenant names it as a bound ``api_key_id = %s`` (or as the inserted
    value): on a Citus cluster distributed by ``api_key_id`` (docs/deployment.md) that routes it to the one
    shard holding the tenant. The ``*_any_tenant`` statements are the interface's by-id operations without a
    tenant (replication, verification, operators): correct on Citus too, one query per shard."""

    def __init__(self, schema: str) -> None:
        t = f'"{schema}".memories'
        self.table = t
        self.columns = _COLUMNS
        self.get_any_tenant = f"SELECT {_COLUMNS} FROM {t} WHERE id = %s"
        self.get_many_any_tenant = f"SELECT {_COLUMNS} FROM {t} WHERE id = ANY(%s)"
        self.owner_any_tenant = f"SELECT api_key_id FROM {t} WHERE id = %s"
        self.delete_any_tenant = f"DELETE FROM {t} WHERE id = %s RETURNING id"
        self.get = f"SELECT {_COLUMNS} FROM {t} WHERE api_key_id = %s AND id = %s"
        self.get_for_update = self.get + " FOR UPDATE"
        self.get_many = f"SELECT {_COLUMNS} FROM {t} WHERE api_key_id = %s AND id = ANY(%s)"
        insert = (f"INSERT INTO {t} ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)")
        # The upsert in one statement: a new key inserts; an existing (owner, key) keeps its id and
        # created_at, takes the new content / type / session / expiry, and shallow-merges metadata (jsonb ||).
        # The row is flagged for a new vector only when something the vector or its filters hold changed.
        self.upsert = (
            insert + " ON CONFLICT ON CONSTRAINT memories_owner_key DO UPDATE SET "
            "content = EXCLUDED.content, type = EXCLUDED.type, session_id = EXCLUDED.session_id, "
            f"expires_at = EXCLUDED.expires_at, updated_at = EXCLUDED.updated_at, metadata = {t}.metadata || "
            f"EXCLUDED.metadata, needs_reindex = {t}.needs_reindex OR {t}.content IS DISTINCT FROM EXCLUDED.content "
            f"OR {t}.session_id IS DISTINCT FROM EXCLUDED.session_id "
            f"OR {t}.expires_at IS DISTINCT FROM EXCLUDED.expires_at "
            f"RETURNING {_COLUMNS}"
        )
        # A recorded add (create_many_recorded) needs the row its upsert replaces: it inserts a new key first,
        # and when the key (or the id) is taken, locks the key's row, reads it and only then upserts into it, so
        # no concurrent writer changes the row between what the history entry says and what the upsert replaced.
        self.insert_new = insert + f" ON CONFLICT DO NOTHING RETURNING {_COLUMNS}"
        self.get_by_key_for_update = f"SELECT {_COLUMNS} FROM {t} WHERE api_key_id = %s AND key = %s FOR UPDATE"
        # The row a delete removed (a recorded delete's history entry says what it held; a plain one only asks
        # whether there was one).
        self.delete = f"DELETE FROM {t} WHERE api_key_id = %s AND id = %s RETURNING {_COLUMNS}"
        self.update = (
            f"UPDATE {t} SET session_id = %s, type = %s, key = %s, content = %s, metadata = %s, updated_at = %s, "
            "expires_at = %s, needs_reindex = needs_reindex OR content IS DISTINCT FROM %s OR key IS DISTINCT "
            "FROM %s OR session_id IS DISTINCT FROM %s OR expires_at IS DISTINCT FROM %s "
            "WHERE api_key_id = %s AND id = %s"
        )
        # put_many, set-based, per tenant: one DELETE and one INSERT per chunk of one tenant's rows, each row's
        # values passed as parallel arrays and unnested in the server (executemany of 10,000 rows cost ~240 µs a
        # row: two statements each, parsed and planned per row). First drop a different memory of the tenant
        # holding the same key, then insert-or-replace by (owner, id). The owner is one bound value, never
        # updated (Citus cannot change a row's distribution column): an id's owner never changes.
        self.put_evict = (
            f"DELETE FROM {t} AS m USING unnest(%s::text[], %s::text[]) AS p(key, id) "
            "WHERE m.api_key_id = %s AND m.key = p.key AND m.id <> p.id")
        self.put = (
            f"INSERT INTO {t} ({_COLUMNS}) SELECT id, %s::text, session_id, type, key, content, metadata::jsonb, "
            "created_at, updated_at, expires_at, access_count, last_accessed_at FROM unnest(%s::text[], "
            "%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::timestamptz[], %s::timestamptz[], "
            "%s::timestamptz[], %s::bigint[], %s::timestamptz[]) AS p(id, session_id, type, key, "
            "content, metadata, created_at, updated_at, expires_at, access_count, last_accessed_at) "
            "ON CONFLICT (api_key_id, id) DO UPDATE SET "
            "session_id = EXCLUDED.session_id, type = EXCLUDED.type, key = EXCLUDED.key, content = EXCLUDED.content, "
            "metadata = EXCLUDED.metadata, created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at, "
            f"expires_at = EXCLUDED.expires_at, needs_reindex = {t}.needs_reindex "
            f"OR {t}.content IS DISTINCT FROM EXCLUDED.content OR {t}.key IS DISTINCT FROM EXCLUDED.key "
            f"OR {t}.session_id IS DISTINCT FROM EXCLUDED.session_id "
            f"OR {t}.expires_at IS DISTINCT FROM EXCLUDED.expires_at "
            f"OR {t}.created_at IS DISTINCT FROM EXCLUDED.created_at, "
            # Access telemetry only grows: a replicated or restored copy never erases accesses recorded here.
            f"access_count = GREATEST({t}.access_count, EXCLUDED.access_count), "
            f"last_accessed_at = GREATEST({t}.last_accessed_at, EXCLUDED.last_accessed_at)"
        )
        # Telemetry (memroute.routing.access): the owner is part of the match (and RLS the second wall); GREATEST skips
        # NULLs, so the later time wins even when batches of several processes land out of order.
        self.record_access = (
            f"UPDATE {t} AS m SET access_count = m.access_count + a.n, "
            "last_accessed_at = GREATEST(m.last_accessed_at, a.at) "
            "FROM unnest(%s::text[], %s::bigint[], %s::timestamptz[]) AS a(id, n, at) "
            "WHERE m.api_key_id = %s AND m.id = a.id"
        )
        # The indexer's "vector written" mark, per tenant, only for rows unchanged since they were read.
        self.mark_indexed = (
            f"UPDATE {t} AS m SET needs_reindex = false FROM unnest(%s::text[], %s::timestamptz[]) AS "
            "g(id, updated_at) WHERE m.api_key_id = %s AND m.id = g.id AND m.updated_at = g.updated_at "
            "AND m.needs_reindex")
        self.mark_indexed_any_tenant = f"UPDATE {t} SET needs_reindex = false WHERE id = ANY(%s) AND needs_reindex"
        self.key_clash = f"SELECT id FROM {t} WHERE api_key_id = %s AND key = %s AND id <> %s"
        self.version_table = f'"{schema}".schema_migrations'
        self.settings_table = f'"{schema}".settings'


# --- value conversion ----------------------------------------------------------------------------------

def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo is timezone.utc else value.astimezone(timezone.utc)


def to_memory(row: Sequence[Any]) -> Memory:
    (memory_id, api_key_id, session_id, mtype, key, content, metadata, created, updated, expires, accesses,
     accessed) = row
    return Memory.trusted(  # rows were validated when they were written
        id=memory_id, api_key_id=api_key_id, session_id=session_id, type=mtype, key=key, content=content,
        metadata=metadata if isinstance(metadata, dict) else {}, created_at=_utc(created),  # type: ignore[arg-type]
        updated_at=_utc(updated), expires_at=_utc(expires),  # type: ignore[arg-type]
        access_count=int(accesses or 0), last_accessed_at=_utc(accessed),
    )


def put_columns(memories: Sequence[Memory]) -> list[list[Any]]:
    """The array parameters of :attr:`Sql.put` for memories of one tenant: one array per column but the owner
    (bound once, before them), metadata as JSON text (cast in the server)."""
    columns: list[list[Any]] = [[] for _ in range(11)]
    for m in memories:
        for column, value in zip(columns, (
                m.id, m.session_id, m.type.value, m.key, m.content,
                json.dumps(m.metadata, ensure_ascii=False, separators=(",", ":")), m.created_at, m.updated_at,
                m.expires_at, m.access_count, m.last_accessed_at), strict=True):
            column.append(value)
    return columns


def row_values(memory: Memory, jsonb: Any) -> tuple[Any, ...]:
    """The INSERT parameters of a memory (``jsonb`` wraps the metadata: psycopg's ``Jsonb``)."""
    return (memory.id, memory.api_key_id, memory.session_id, memory.type.value, memory.key, memory.content,
            jsonb(memory.metadata), memory.created_at, memory.updated_at, memory.expires_at, memory.access_count,
            memory.last_accessed_at)


_TERM = re.compile(r"[^\W_]+")


def keyword_terms(text: str) -> list[str]:
    """The searchable terms of arbitrary user text: the SQLite leg's rule (runs of letters and digits in the
    first 4096 characters, de-duplicated case-insensitively, at most 32). Each term reaches PostgreSQL as a
    bound parameter of ``plainto_tsquery``, which never parses operators: no user text is read as syntax."""
    seen: dict[str, str] = {}
    for term in _TERM.findall(text[:MAX_QUERY_CHARS]):
        folded = term.casefold()
        if folded not in seen:
            seen[folded] = term
            if len(seen) == MAX_QUERY_TERMS:
                break
    return list(seen.values())


def or_query_sql(count: int) -> str:
    """A tsquery expression OR-ing ``count`` bound terms (``plainto_tsquery`` each, joined with ``||``)."""
    return " || ".join(["plainto_tsquery('simple'::regconfig, %s)"] * count)
