"""The ``pgvector`` vector store: vectors in PostgreSQL next to the memories, an HNSW index, one query per search.

By default the store lives in the ``postgres`` primary's database and schema and borrows its connection pool;
``dsn`` gives it a database of its own. Tables (in the schema):

- ``vector_index``: one row, the embedding signature the index serves, its column type and dimensions.
- ``memory_vectors``: primary key ``(api_key_id, memory_id uuid)`` (the tenant first, so Citus can distribute
  the table by it, docs/deployment.md), the filter fields every query applies (``session_id``,
  ``created_at``, ``expires_at``) and ``embedding`` as ``vector(dim)`` (float32) or
  ``halfvec(dim)`` (float16, half the size: ``quantization = "int8"`` or ``"float16"`` — pgvector has no int8
  type), under an HNSW index on cosine distance. Row-level security by tenant, as on ``memories``.

**k after the owner filter.** A query is one ``ORDER BY embedding <=> q LIMIT k`` with the tenant, expiry,
retention and session filters in its ``WHERE``, run with ``hnsw.iterative_scan = relaxed_order``: when the
filters drop candidates the index scan goes on (up to ``max_scan_tuples``) until k rows pass, instead of
returning fewer. Should a small tenant among many large ones still come back short, the same query runs
exactly over that tenant's rows (its owner index, no HNSW): a tenant never gets fewer than k results because of
its neighbours.

**Centred-query ranking** (``center = true``, the default), as the sqlite-vec and Qdrant stores do: the query
vector is the query minus the tenant's mean vector (``avg(embedding)`` over the tenant's rows, cached in the
process: :class:`~memroute_builtins.vectors.common.TenantCenters`), so the search is the same one ``ORDER BY
embedding <=> q`` on the HNSW index; each hit also carries its plain cosine for the relevance floor.

**The signature rule.** ``bind`` under another signature (or column type, or dimension) drops and recreates the
table: an index built by another embedding model is never queried. Other processes may re-bind the shared
index at any time, so every write checks the stored signature in its own transaction (``FOR SHARE`` on the
index row, which also waits out a concurrent re-bind), and every query carries it as a condition; a process
whose signature no longer matches gets a :class:`VectorStoreError` saying so (and searches degrade to keyword).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

import attrs
import numpy as np

import memroute
from memroute.errors import ConfigError, MemrouteError, VectorStoreError
from memroute.interfaces import ComponentContext, EmbeddingSignature, VectorHit, VectorItem, VectorStore
from memroute.models import HealthResult, SearchQuery
from memroute.specs import VectorStoreSpec
from memroute_builtins.backends.postgres.database import (
    ALL_TENANTS,
    Database,
    DatabaseSettings,
    check_schema_name,
)
from memroute_builtins.vectors.common import (
    TenantCenters,
    canonical_uuid,
    centered_probe,
    check_items,
    check_k,
    check_vector,
)

__all__ = ["PgvectorSettings", "PgvectorStore"]

log = logging.getLogger("memroute.pgvector")

COLUMN_TYPES: Final = {"float32": "vector", "int8": "halfvec", "float16": "halfvec"}
ITERATIVE_SCANS: Final = ("relaxed_order", "strict_order", "off")
MAX_DIMENSIONS: Final = 2000
HNSW_INDEX: Final = "memory_vectors_hnsw"
PRIMARY_KEY: Final = "memory_vectors_pkey"
ID_INDEX: Final = "memory_vectors_memory_id"
BULK_MIN: Final = 1_000
"""Backlogs smaller than this grow the HNSW graph vector by vector (see :meth:`PgvectorStore.bulk_load`)."""
"""HNSW indexes ``vector`` up to 2,000 dimensions (``halfvec`` up to 4,000)."""
_POLICY = ("(current_setting('memroute.all_tenants', true) = 'on' "
           "OR api_key_id = current_setting('memroute.api_key_id', true))")


def _choice(*allowed: str | None) -> Any:
    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value not in allowed:
            names = ", ".join(str(a) for a in allowed if a is not None)
            raise ConfigError(f"{attribute.name}: must be one of {names}, got {value!r}", [(attribute.name, "invalid")])

    return check


def _at_least(low: int) -> Any:
    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{attribute.name}: must be an integer >= {low}, got {value!r}",
                              [(attribute.name, "range")])

    return check


def _optional_dsn(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ConfigError(f"{attribute.name}: must be a PostgreSQL connection string, or left out to use the "
                          "postgres primary's database", [(attribute.name, "invalid")])


def _optional_schema(inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None:
        check_schema_name(inst, attribute, value)


@attrs.frozen(kw_only=True)
class PgvectorSettings(DatabaseSettings):
    """Options of ``[vectors] store = "pgvector"`` (under ``[vectors.options.pgvector]``)."""

    dsn: str | None = attrs.field(default=None, validator=_optional_dsn)  # type: ignore[assignment]
    """A database of its own; unset: the ``postgres`` primary's database (and its connection pool)."""
    schema: str | None = attrs.field(default=None, validator=_optional_schema)
    """Unset: the primary's schema (or ``memroute`` with a dsn of its own)."""
    quantization: str | None = attrs.field(default=None, validator=_choice(None, *COLUMN_TYPES))
    """``float32`` stores ``vector``; ``float16`` (and ``int8``, which pgvector has no type for) ``halfvec``.
    Unset means the bound signature's (``[vectors] quantization``)."""
    hnsw_m: int = attrs.field(default=16, validator=_at_least(2))
    hnsw_ef_construction: int = attrs.field(default=64, validator=_at_least(4))
    ef_search: int = attrs.field(default=100, validator=_at_least(1))
    """``hnsw.ef_search``: candidates the index keeps per scan (recall against speed)."""
    iterative_scan: str = attrs.field(default="relaxed_order", validator=_choice(*ITERATIVE_SCANS))
    """``hnsw.iterative_scan``: keep scanning while filters drop candidates (results are re-sorted)."""
    max_scan_tuples: int = attrs.field(default=20_000, validator=_at_least(1))
    """``hnsw.max_scan_tuples``: where an iterative scan stops (the exact per-tenant query covers the rest)."""
    index_build_memory_mb: int = attrs.field(default=256, validator=_at_least(1))
    """``maintenance_work_mem`` for building the HNSW index after a bulk load: the graph is built fastest when
    it fits (about one and a half times the vectors' size)."""
    center: bool = True
    """Rank by the cosine with the centred query (the query minus the tenant's mean vector), as the
    sqlite-vec store does (docs/vectors.md); ``false``: plain cosine."""
    center_check_seconds: float = attrs.field(default=30.0, validator=attrs.validators.ge(0))
    """How often a cached tenant mean is checked against the tenant's vector count (other processes' writes)."""


@attrs.frozen
class _Index:
    signature: str
    column_type: str
    dimensions: int


class _VectorParam:
    """A vector bound as a query parameter in pgvector's binary form (``vector_recv`` / ``halfvec_recv``): no
    text formatting or parsing (``repr`` of 384 floats cost 0.3 ms a vector). The parameter's type is left to
    the server, which takes it from the ``%s::vector`` cast around it."""

    __slots__ = ("data",)

    def __init__(self, vector: np.ndarray, column_type: str) -> None:
        element = ">f4" if column_type == "vector" else ">f2"
        header = np.array([vector.shape[0], 0], dtype=">u2").tobytes()
        self.data = header + vector.astype(element).tobytes()


def _dumper() -> type:
    from psycopg.adapt import Dumper
    from psycopg.pq import Format

    class VectorParamDumper(Dumper):
        format = Format.BINARY

        def dump(self, obj: Any) -> Any:
            return obj.data

    return VectorParamDumper


class PgvectorStore(VectorStore):
    """Vectors in PostgreSQL with pgvector. Thread-safe: each call is one pooled transaction."""

    store_name = "pgvector"

    def __init__(self, settings: PgvectorSettings, context: ComponentContext) -> None:
        from memroute_builtins.backends.postgres.backend import PostgresBackend

        self.settings = settings
        primary = context.primary
        if settings.dsn is None:
            if not isinstance(primary, PostgresBackend):
                raise ConfigError(
                    "vectors.pgvector: dsn: required unless the primary backend is type = \"postgres\" (the store "
                    "then uses its database)", [("dsn", "missing")])
            self.db = primary.db
            self.schema = settings.schema or primary.schema
        else:
            self.db = Database(settings, component="pgvector store")
            self.schema = settings.schema or "memroute"
        s = f'"{self.schema}"'
        self.meta_table = f"{s}.vector_index"
        self.table = f"{s}.memory_vectors"
        self._opened = False
        self._index: _Index | None = None
        self._dumper = _dumper()
        self.centers = TenantCenters(self._tenant_mean, self.count, check_seconds=settings.center_check_seconds)

    # --- connections and the index row ------------------------------------------------------------------

    def _database(self) -> Database:
        if not self._opened:
            self.db.open()  # shared with the primary: reference-counted
            self._opened = True
            try:
                with self.db.transaction("create the vector index tables", tenant=ALL_TENANTS) as conn:
                    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"memroute.pgvector.{self.schema}",))
                    self._ensure_extension(conn)
                    conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
                    conn.execute(
                        f"CREATE TABLE IF NOT EXISTS {self.meta_table} (only_row boolean PRIMARY KEY DEFAULT true "
                        "CHECK (only_row), signature text NOT NULL, column_type text NOT NULL, "
                        "dimensions integer NOT NULL, bound_at timestamptz NOT NULL DEFAULT now())")
            except BaseException:
                self._opened = False
                self.db.close()
                raise
        return self.db

    def _ensure_extension(self, conn: Any) -> None:
        if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is not None:
            return
        try:
            with conn.transaction():
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except Exception as exc:
            raise VectorStoreError(
                f"{self.db.where}: the pgvector extension is not installed in this database and this role cannot "
                f"install it ({exc}). Run CREATE EXTENSION vector; once as a superuser.") from exc

    @staticmethod
    def _read_index(conn: Any, table: str, lock: str = "") -> _Index | None:
        row = conn.execute(f"SELECT signature, column_type, dimensions FROM {table} {lock}").fetchone()
        return None if row is None else _Index(str(row[0]), str(row[1]), int(row[2]))

    def _bound(self) -> _Index:
        if self._index is None:
            raise VectorStoreError("the pgvector store is not bound to an embedding signature: call bind() first")
        return self._index

    def _stale(self, stored: _Index | None, index: _Index) -> VectorStoreError:
        return VectorStoreError(
            f"the pgvector index in schema {self.schema!r} now serves "
            f"{stored.signature if stored else 'no signature'} ({stored.column_type if stored else '-'}), not "
            f"{index.signature} ({index.column_type}) as this process expects: another memroute process re-bound "
            "it with another embedding configuration. Give every process the same [embedding] and [vectors] "
            "settings and restart this one.")

    # --- binding -------------------------------------------------------------------------------------------

    def bind(self, signature: EmbeddingSignature) -> bool:
        if not isinstance(signature, EmbeddingSignature):
            raise VectorStoreError(f"bind() takes an EmbeddingSignature, got {type(signature).__name__}")
        quantization = self.settings.quantization or signature.quantization
        if quantization not in COLUMN_TYPES:
            raise VectorStoreError(f"pgvector stores float32 or halfvec (float16, int8) vectors, not {quantization!r}")
        column = COLUMN_TYPES[quantization]
        limit = MAX_DIMENSIONS * (2 if column == "halfvec" else 1)
        if not 1 <= signature.dimensions <= limit:
            raise VectorStoreError(f"pgvector's HNSW index holds {column} of 1 to {limit} dimensions, not "
                                   f"{signature.dimensions}")
        wanted = _Index(str(signature), column, signature.dimensions)
        db = self._database()
        try:
            with db.transaction("bind the vector index", tenant=ALL_TENANTS) as conn:
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"memroute.pgvector.{self.schema}",))
                stored = self._read_index(conn, self.meta_table, "FOR UPDATE")
                exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (self.table,)).fetchone()[0]
                if stored == wanted and exists:
                    self._index = wanted
                    self._upgrade_layout(conn)
                    if not self._hnsw_indexes(conn):  # a bulk load was interrupted before it rebuilt the index
                        conn.execute("SET LOCAL statement_timeout = 0")
                        self._create_hnsw(conn, wanted)
                    return True
                self._create_table(conn, wanted)
                conn.execute(f"DELETE FROM {self.meta_table}")
                conn.execute(f"INSERT INTO {self.meta_table} (signature, column_type, dimensions) VALUES (%s, %s, %s)",
                             (wanted.signature, wanted.column_type, wanted.dimensions))
        except MemrouteError as exc:
            raise VectorStoreError(f"pgvector: cannot bind the index: {exc}") from exc
        self._index = wanted
        self.centers.clear()
        return stored is None

    def _create_table(self, conn: Any, index: _Index) -> None:
        conn.execute(f"DROP TABLE IF EXISTS {self.table}")
        conn.execute(
            f"CREATE TABLE {self.table} (memory_id uuid NOT NULL, api_key_id text NOT NULL, session_id text, "
            "created_at timestamptz NOT NULL, expires_at timestamptz, "
            f"embedding {index.column_type}({index.dimensions}) NOT NULL, "
            f'CONSTRAINT "{PRIMARY_KEY}" PRIMARY KEY (api_key_id, memory_id))')
        # Not unique: delete() and the upsert's re-owning step find ids without a tenant.
        conn.execute(f'CREATE INDEX "{ID_INDEX}" ON {self.table} (memory_id)')
        self._create_hnsw(conn, index)
        conn.execute(f"ALTER TABLE {self.table} ENABLE ROW LEVEL SECURITY")
        conn.execute(f"ALTER TABLE {self.table} FORCE ROW LEVEL SECURITY")
        conn.execute(f"CREATE POLICY memory_vectors_tenant ON {self.table} USING {_POLICY} WITH CHECK {_POLICY}")

    def _upgrade_layout(self, conn: Any) -> None:
        """A table made before the tenant led the primary key (memroute 0.x, its key was ``memory_id`` alone):
        re-key it in place, keeping every vector (the table is otherwise rebuilt only on a re-bind, so its
        layout is read from the catalog rather than versioned). The owner index the new key makes redundant
        goes, and an index on ``memory_id`` alone comes (for :meth:`delete`, which names no tenant)."""
        columns = conn.execute(
            "SELECT array_agg(a.attname::text ORDER BY k.ord) FROM pg_index i "
            "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
            "WHERE i.indrelid = to_regclass(%s) AND i.indisprimary", (self.table,)).fetchone()[0]
        if columns == ["api_key_id", "memory_id"]:
            return
        log.info("pgvector: re-keying %s by (api_key_id, memory_id)", self.table)
        conn.execute("SET LOCAL statement_timeout = 0")
        conn.execute(f'ALTER TABLE {self.table} DROP CONSTRAINT IF EXISTS "{PRIMARY_KEY}", '
                     f'ADD CONSTRAINT "{PRIMARY_KEY}" PRIMARY KEY (api_key_id, memory_id)')
        conn.execute(f'DROP INDEX IF EXISTS "{self.schema}"."memory_vectors_api_key_id_idx"')
        conn.execute(f'CREATE INDEX IF NOT EXISTS "{ID_INDEX}" ON {self.table} (memory_id)')

    def _hnsw_indexes(self, conn: Any) -> list[str]:
        rows = conn.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam "
            "WHERE i.indrelid = to_regclass(%s) AND a.amname = 'hnsw'", (self.table,)).fetchall()
        return [str(r[0]) for r in rows]

    def _create_hnsw(self, conn: Any, index: _Index) -> None:
        m, ef_construction = int(self.settings.hnsw_m), int(self.settings.hnsw_ef_construction)
        conn.execute(f"SET LOCAL maintenance_work_mem = '{int(self.settings.index_build_memory_mb)}MB'")
        conn.execute(f'CREATE INDEX IF NOT EXISTS "{HNSW_INDEX}" ON {self.table} USING hnsw '
                     f"(embedding {index.column_type}_cosine_ops) WITH (m = {m}, ef_construction = {ef_construction})")

    @contextmanager
    def bulk_load(self, expected: int) -> Iterator[None]:
        """Index a backlog of ``expected`` vectors without the HNSW index, then build it once.

        Growing pgvector's HNSW graph costs a graph search per inserted vector; building it from the rows is
        about ten times faster (10,000 vectors of 256 dimensions on the project's machine: 63 s of inserts
        into the index against 1.2 s of plain inserts and a 6.6 s build). So when the backlog is at least
        :data:`BULK_MIN` and a quarter of the vectors already stored, the index is dropped here (waiting at
        most 5 s for its lock; otherwise nothing changes) and rebuilt on exit. Queries stay correct meanwhile:
        the per-tenant exact scan serves them. Should the process die first, the next ``bind`` (every start)
        rebuilds the missing index."""
        index = self._index
        suspended = (index is not None and expected >= BULK_MIN and expected * 4 >= self.count()
                     and self._suspend_hnsw())
        try:
            yield
        finally:
            if suspended and index is not None:
                self._build_hnsw(index)

    def _suspend_hnsw(self) -> bool:
        try:
            with self._database().transaction("suspend the HNSW index", tenant=ALL_TENANTS) as conn:
                conn.execute("SET LOCAL lock_timeout = '5s'")
                for name in self._hnsw_indexes(conn):
                    conn.execute(f'DROP INDEX "{self.schema}"."{name}"')
        except MemrouteError as exc:
            log.info("pgvector: indexing the backlog into the HNSW index as it is (%s)", exc)
            return False
        return True

    def _build_hnsw(self, index: _Index) -> None:
        try:
            with self._database().transaction("build the HNSW index", tenant=ALL_TENANTS) as conn:
                conn.execute("SET LOCAL statement_timeout = 0")
                if not self._hnsw_indexes(conn):
                    self._create_hnsw(conn, index)
                # Fresh statistics: with those of the (nearly empty) table before the load, the planner takes
                # a tenant of 100,000 vectors for 100 rows and scans them exactly instead of using the index
                # (measured: 42 ms instead of 3 ms at 20,000 vectors).
                conn.execute(f"ANALYZE {self.table}")
        except MemrouteError as exc:
            log.warning("pgvector: building the HNSW index failed (the next start retries; searches scan each "
                        "tenant's vectors exactly meanwhile): %s", exc)

    def signature(self) -> str | None:
        with self._database().transaction("read the vector index signature", tenant=ALL_TENANTS) as conn:
            stored = self._read_index(conn, self.meta_table)
        return None if stored is None else stored.signature

    # --- writes --------------------------------------------------------------------------------------------

    def _check_current(self, conn: Any, index: _Index) -> None:
        """Inside a write: the stored index is still this one (``FOR SHARE`` also waits out a re-bind)."""
        stored = self._read_index(conn, self.meta_table, "FOR SHARE")
        if stored != index:
            raise self._stale(stored, index)

    def upsert(self, items: Sequence[VectorItem]) -> None:
        index = self._bound()
        checked = check_items(items, index.dimensions)
        if not checked:
            return
        cast = index.column_type
        rows = [(memory_id, item.api_key_id, item.session_id, item.created_at, item.expires_at,
                 _VectorParam(vector, cast)) for item, memory_id, vector in checked]
        self.centers.wrote([item.api_key_id for item, _, _ in checked])
        # The indexer writes for every tenant; the policy's WITH CHECK still holds each row to its own owner.
        # Each row names its owner and conflicts on (owner, id), so on Citus each routes to its tenant's shard;
        # the owner is never updated (a memory never changes tenant).
        by_owner: dict[str, list[str]] = {}
        for row in rows:
            by_owner.setdefault(row[1], []).append(row[0])
        with self._database().transaction("store vectors", tenant=ALL_TENANTS) as conn:
            self._check_current(conn, index)
            # A memory id has one vector: a vector stored under another owner goes (the VectorStoreContract's
            # re-owning rule). The one statement per batch that names no owner to route by: on Citus it asks
            # every shard (an index lookup each).
            for owner, memory_ids in by_owner.items():
                conn.execute(f"DELETE FROM {self.table} WHERE memory_id = ANY(%s::uuid[]) AND api_key_id <> %s",
                             (memory_ids, owner))
            with conn.cursor() as cur:
                cur.adapters.register_dumper(_VectorParam, self._dumper)
                cur.executemany(
                    f"INSERT INTO {self.table} (memory_id, api_key_id, session_id, created_at, expires_at, embedding) "
                    f"VALUES (%s, %s, %s, %s, %s, %s::{cast}) ON CONFLICT (api_key_id, memory_id) DO UPDATE SET "
                    "session_id = EXCLUDED.session_id, "
                    "created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at, "
                    "embedding = EXCLUDED.embedding", rows)

    def delete(self, memory_ids: Sequence[str]) -> None:
        if isinstance(memory_ids, (str, bytes)):
            raise VectorStoreError("delete() takes a sequence of ids, not one string")
        ids = [canonical_uuid(m) for m in memory_ids]
        if not ids or self._index is None:
            return
        self.centers.wrote([None] * len(ids))
        with self._database().transaction("delete vectors", tenant=ALL_TENANTS) as conn:
            if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (self.table,)).fetchone()[0]:
                conn.execute(f"DELETE FROM {self.table} WHERE memory_id = ANY(%s::uuid[])", (ids,))

    def delete_owned(self, api_key_id: str, memory_ids: Sequence[str]) -> None:
        """:meth:`delete` of vectors of ``api_key_id`` (:class:`~memroute.interfaces.TenantRoutedDeletes`): one
        statement naming the tenant, so on Citus it runs on the tenant's shard only."""
        if isinstance(memory_ids, (str, bytes)):
            raise VectorStoreError("delete_owned() takes a sequence of ids, not one string")
        ids = [canonical_uuid(m) for m in memory_ids]
        if not ids or self._index is None:
            return
        with self._database().transaction("delete vectors", tenant=api_key_id) as conn:
            if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (self.table,)).fetchone()[0]:
                conn.execute(f"DELETE FROM {self.table} WHERE api_key_id = %s AND memory_id = ANY(%s::uuid[])",
                             (api_key_id, ids))

    # --- reads ---------------------------------------------------------------------------------------------

    def query(self, vector: Any, query: SearchQuery, k: int) -> list[VectorHit]:
        if not isinstance(query, SearchQuery):
            raise VectorStoreError(f"query() takes a SearchQuery, got {type(query).__name__}")
        k = check_k(k)
        index = self._bound()
        unit = check_vector(vector, index.dimensions, "query vector")
        middle = self.centers.get(query.api_key_id) if self.settings.center else None
        centred = None if middle is None else centered_probe(unit, middle)
        probe = _VectorParam(unit if centred is None else centred, index.column_type)
        plain = _VectorParam(unit, index.column_type)
        where = ["api_key_id = %s", "(expires_at IS NULL OR expires_at > %s)"]
        params: list[Any] = [query.api_key_id, query.now]
        cutoff = query.created_after
        if cutoff is not None:
            where.append("created_at >= %s")
            params.append(cutoff)
        if query.session_id is not None:
            where.append("session_id = %s")
            params.append(query.session_id)
        where.append(f"EXISTS (SELECT 1 FROM {self.meta_table} WHERE signature = %s AND column_type = %s)")
        params += [index.signature, index.column_type]
        distance = f"embedding <=> %s::{index.column_type}"
        # The plain cosine distance too (the relevance floor compares it), once the centred search has chosen.
        sql = (f"WITH nn AS MATERIALIZED (SELECT memory_id, embedding, {distance} AS distance FROM {self.table} "
               f"WHERE {' AND '.join(where)} ORDER BY {{order}} LIMIT %s) "
               f"SELECT memory_id, distance, {distance} FROM nn ORDER BY distance, memory_id")
        s = self.settings
        try:
            with self._database().transaction("search vectors", tenant=query.api_key_id) as conn:
                # SET LOCAL, not set_config(): Citus passes SET LOCAL on to the shard running the query. The
                # three in one round trip (no parameters: one simple-protocol query).
                conn.execute(self._set_local({"hnsw.ef_search": min(max(s.ef_search, k), 1000),
                                              "hnsw.iterative_scan": s.iterative_scan,
                                              "hnsw.max_scan_tuples": s.max_scan_tuples}), prepare=False)
                cur = conn.cursor()
                cur.adapters.register_dumper(_VectorParam, self._dumper)
                values = [probe, *params, probe, k, plain]
                rows = cur.execute(sql.format(order=distance), values).fetchall()
                if len(rows) < k:
                    # Short: either the tenant has fewer than k admitted vectors, or the index scan gave up
                    # among other tenants' neighbours. The exact query over the tenant's own rows settles it
                    # (``+ 0`` keeps the planner off the HNSW index).
                    rows = cur.execute(sql.format(order=f"({distance}) + 0"), values).fetchall()
                    if not rows:
                        stored = self._read_index(conn, self.meta_table)
                        if stored != index:
                            raise self._stale(stored, index)
        except VectorStoreError:
            raise
        except MemrouteError as exc:
            if "different vector dimensions" in str(exc) or "does not exist" in str(exc):
                raise self._stale(None, index) from exc
            raise VectorStoreError(f"pgvector query failed: {exc}") from exc
        return [VectorHit(memory_id=str(memory_id), score=max(-1.0, min(1.0, 1.0 - float(dist))),
                          cosine=None if centred is None else max(-1.0, min(1.0, 1.0 - float(plain_dist))))
                for memory_id, dist, plain_dist in rows]

    def _tenant_mean(self, api_key_id: str) -> tuple[np.ndarray | None, int]:
        """The mean of the tenant's vectors (they are stored unit length) and their count."""
        rows = self._select(f"SELECT avg(embedding::vector)::text, count(*) FROM {self.table}", api_key_id,
                            "average the tenant's vectors")
        if not rows or rows[0][0] is None or not rows[0][1]:
            return None, 0
        mean = np.asarray([float(x) for x in str(rows[0][0]).strip("[]").split(",")], dtype=np.float32)
        return mean, int(rows[0][1])

    @staticmethod
    def _set_local(settings: dict[str, Any]) -> Any:
        from psycopg import sql

        return sql.SQL("; ").join(sql.SQL("SET LOCAL {} = {}").format(sql.SQL(name), sql.Literal(str(value)))
                                  for name, value in settings.items())

    def _select(self, sql: str, api_key_id: str | None, action: str) -> list[tuple[Any, ...]]:
        owner = " WHERE api_key_id = %s" if api_key_id is not None else ""
        tenant = api_key_id if api_key_id is not None else ALL_TENANTS
        with self._database().transaction(action, tenant=tenant) as conn:
            if not conn.execute("SELECT to_regclass(%s) IS NOT NULL", (self.table,)).fetchone()[0]:
                return []  # never bound
            return list(conn.execute(sql + owner, [api_key_id] if api_key_id is not None else []).fetchall())

    def count(self, api_key_id: str | None = None) -> int:
        rows = self._select(f"SELECT count(*) FROM {self.table}", api_key_id, "count vectors")
        return int(rows[0][0]) if rows else 0

    def ids(self, api_key_id: str | None = None) -> set[str]:
        rows = self._select(f"SELECT memory_id FROM {self.table}", api_key_id, "list vector ids")
        return {str(uuid.UUID(str(r[0]))) for r in rows}

    def health(self) -> HealthResult:
        """One round trip: the extension's version and the bound signature (no count over every vector)."""
        import time

        started = time.perf_counter()
        details: dict[str, Any] = {"store": self.store_name, "schema": self.schema,
                                   "bound": None if self._index is None else self._index.signature}
        try:
            with self._database().transaction("check health", tenant=ALL_TENANTS) as conn:
                version = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
                stored = self._read_index(conn, self.meta_table)
                hnsw = self._hnsw_indexes(conn)
        except MemrouteError as exc:
            return HealthResult(ok=False, latency_ms=(time.perf_counter() - started) * 1000, error=str(exc),
                                details=details)
        details.update(pgvector=version[0] if version else None, stored=None if stored is None else stored.signature,
                       hnsw_index="present" if hnsw else "absent (a bulk load is running, or the next start builds it)")
        ok = self._index is None or stored == self._index
        return HealthResult(ok=ok, latency_ms=(time.perf_counter() - started) * 1000, details=details,
                            error=None if ok else str(self._stale(stored, self._index)))  # type: ignore[arg-type]

    def close(self) -> None:
        if self._opened:
            self._opened = False
            self.db.close()


def _factory(settings: PgvectorSettings, context: ComponentContext) -> PgvectorStore:
    return PgvectorStore(settings, context)


@memroute.hookimpl
def memroute_vector_stores() -> Any:
    yield VectorStoreSpec(name="pgvector", factory=_factory, settings_class=PgvectorSettings,
                          description="pgvector in PostgreSQL (HNSW, iterative filtered scans), next to the memories",
                          quantizations=frozenset({"float32", "int8"}))
