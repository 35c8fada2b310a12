"""The ``sqlite-vec`` vector store: the embedded default.

One vec0 virtual table, partitioned by ``api_key_id`` so a tenant's KNN reads only that tenant's chunks and
``k`` applies after the owner filter. Session, expiry and retention are vec0 metadata columns, filtered
inside the KNN scan. vec0's chunk size is one per table and pulls two ways: the default 1,024-slot chunk
makes every small tenant reserve ~1 MB (256-d float32), while small chunks scan about half as fast. So
there are two tables: every tenant starts in one with small chunks and moves, once, to one with large chunks
when it passes ``promote_at`` vectors. See ``docs/vectors.md`` for the measurements.

This module also implements ``memroute_prepare_connection``: every apsw connection memroute opens gets the
sqlite-vec extension loaded.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

import memroute
from memroute.errors import BackendUnavailableError, ConfigError, MemrouteError, VectorStoreError
from memroute.interfaces import ComponentContext, EmbeddingSignature, VectorHit, VectorItem, VectorStore
from memroute.models import HealthResult, SearchQuery
from memroute.specs import VectorStoreSpec
from memroute_builtins._vector_common import canonical_uuid, check_items, check_k, check_vector, unix_micros

__all__ = ["SqliteVecSettings", "SqliteVecStore", "load_sqlite_vec"]

log = logging.getLogger(__name__)

NO_EXPIRY = 2**62
"""vec0 metadata columns cannot hold NULL (0.1.9), so "never expires" is a far-future timestamp."""
NO_SESSION = ""
"""The stored session of a memory without one; memroute never uses ``""`` as a session id."""
SCHEMA_VERSION = "2"
TABLES = ("memroute_vec", "memroute_vec_large")
"""Tier 0 (small chunks, every tenant starts here) and tier 1 (large chunks, tenants past ``promote_at``)."""
QUANTIZATIONS = ("float32", "int8")
INT8_CALIBRATIONS = ("auto", "unit")
INT8_PRIOR = 4.5
"""With too few vectors to calibrate, clip int8 at ``INT8_PRIOR / sqrt(dim)``: a unit vector's components
are about ``N(0, 1/dim)`` and 4.5 standard deviations clip almost none of them."""
INT8_QUANTILE = 0.9999
"""Calibration clips the top 0.01 % of component magnitudes: one outlier must not waste the int8 range."""
MIN_CALIBRATION_VECTORS = 32


def _check_chunk_size(_inst: Any, _attr: Any, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 8 or value > 4096 or value % 8:
        raise ConfigError(f"must be a multiple of 8 in [8, 4096], got {value!r}", [("chunk_size", "invalid")])


def _check_optional_choice(*allowed: str | None) -> Any:
    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value not in allowed:
            names = ", ".join(str(a) for a in allowed if a is not None)
            raise ConfigError(f"must be one of {names}, got {value!r}", [(attribute.name, "invalid")])

    return check


@attrs.frozen(kw_only=True)
class SqliteVecSettings:
    """Options of ``[vectors] store = "sqlite-vec"`` (under ``[vectors.options.sqlite-vec]``)."""

    path: str | None = None
    """The database file (default ``vectors.db`` in the data directory). It may be the backend's file."""
    quantization: str | None = attrs.field(default=None, validator=_check_optional_choice(None, *QUANTIZATIONS))
    """``float32`` or ``int8``; unset means the bound signature's quantisation (``[vectors] quantization``)."""
    chunk_size: int = attrs.field(default=8, validator=_check_chunk_size)
    """vec0 chunk size of the small-tenant table (vectors per chunk, per tenant): small keeps a tenant with a
    few memories from reserving a large chunk. See docs/vectors.md for the measurements."""
    large_chunk_size: int = attrs.field(default=256, validator=_check_chunk_size)
    """vec0 chunk size of the large-tenant table: big chunks scan about twice as fast as small ones."""
    promote_at: int = attrs.field(default=512, validator=attrs.validators.ge(1))
    """A tenant whose vector count passes this moves (once, in one transaction) to the large-chunk table."""
    int8_calibration: str = attrs.field(default="auto", validator=_check_optional_choice(*INT8_CALIBRATIONS))
    """``auto``: a symmetric scale calibrated from the first vectors stored (recorded in the meta table);
    ``unit``: map [-1, 1] to the int8 range, as ``vec_quantize_int8(v, 'unit')`` does (loses recall)."""
    busy_timeout_ms: int = 5000


# --- extension loading ---------------------------------------------------------------------------------

def _vec_loaded(connection: Any) -> bool:
    try:
        connection.execute("SELECT vec_version()").fetchall()
    except Exception:
        return False
    return True


def load_sqlite_vec(connection: Any) -> None:
    """Load sqlite-vec into an apsw connection (once). Raises :class:`BackendUnavailableError` naming the fix."""
    if _vec_loaded(connection):
        return
    try:
        import sqlite_vec
    except ImportError as exc:
        raise BackendUnavailableError("the sqlite-vec vector store needs sqlite-vec: pip install sqlite-vec") from exc
    try:
        connection.enable_load_extension(True)
        try:
            connection.load_extension(sqlite_vec.loadable_path())
        finally:
            # Loading stays off except for this one call: SQL must never load arbitrary libraries.
            connection.enable_load_extension(False)
    except Exception as exc:
        raise BackendUnavailableError(
            f"cannot load the sqlite-vec extension ({exc}); this SQLite build may not allow extensions. "
            "Use [vectors] store = \"qdrant\" or \"none\""
        ) from exc


@memroute.hookimpl
def memroute_prepare_connection(connection: Any) -> None:
    """Load sqlite-vec into every connection memroute opens. A failure only logs: keyword search must keep
    working without vectors, and the vector store reports the error itself when it is used."""
    try:
        load_sqlite_vec(connection)
    except MemrouteError as exc:
        log.warning("sqlite-vec not loaded: %s", exc)


# --- the store -----------------------------------------------------------------------------------------

@attrs.frozen
class _Index:
    """What the meta table says about the current vec0 table."""

    signature: str
    quantization: str
    dimensions: int
    chunk_size: int
    large_chunk_size: int
    int8_scale: float | None


class SqliteVecStore(VectorStore):
    """sqlite-vec vector store; safe to call from several threads (one apsw connection per thread)."""

    store_name = "sqlite-vec"

    def __init__(self, settings: SqliteVecSettings, context: ComponentContext) -> None:
        from memroute.db import ThreadConnections

        self.settings = settings
        self.path = Path(settings.path).expanduser() if settings.path else context.data_dir / "vectors.db"
        if str(settings.path) == ":memory:":
            raise ConfigError("a :memory: database is per-connection; give a file path", [("path", "invalid")])
        prepare = context.prepare_connection

        def on_open(connection: Any) -> None:
            prepare(connection)
            load_sqlite_vec(connection)  # also when built without the plugin manager

        self._pool = ThreadConnections(self.path, busy_timeout_ms=settings.busy_timeout_ms, on_open=on_open)
        self._lock = threading.RLock()
        self._index: _Index | None = None
        with self._pool.transaction() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS memroute_vec_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            # The vec0 rowid is an integer; memories are UUIDs. Ids are stored as 16-byte blobs (half a text
            # UUID); api_key_id is here so count()/ids() need not scan vec0.
            conn.execute(
                "CREATE TABLE IF NOT EXISTS memroute_vec_ids ("
                " rowid INTEGER PRIMARY KEY, memory_id BLOB NOT NULL UNIQUE, api_key_id TEXT NOT NULL,"
                " tier INTEGER NOT NULL DEFAULT 0)"
            )
            conn.execute("CREATE INDEX IF NOT EXISTS memroute_vec_ids_owner ON memroute_vec_ids(api_key_id)")
            self._index = self._read_meta(conn)

    # -- meta -------------------------------------------------------------------------------------------

    @staticmethod
    def _read_meta(conn: Any) -> _Index | None:
        meta = dict(conn.execute("SELECT key, value FROM memroute_vec_meta").fetchall())
        if "signature" not in meta:
            return None
        scale = meta.get("int8_scale")
        return _Index(signature=meta["signature"], quantization=meta["quantization"],
                      dimensions=int(meta["dimensions"]), chunk_size=int(meta["chunk_size"]),
                      large_chunk_size=int(meta.get("large_chunk_size", meta["chunk_size"])),
                      int8_scale=float(scale) if scale else None)

    @staticmethod
    def _write_meta(conn: Any, index: _Index) -> None:
        values = {"schema_version": SCHEMA_VERSION, "signature": index.signature, "quantization": index.quantization,
                  "dimensions": str(index.dimensions), "chunk_size": str(index.chunk_size),
                  "large_chunk_size": str(index.large_chunk_size),
                  "int8_scale": "" if index.int8_scale is None else repr(index.int8_scale)}
        conn.executemany("INSERT OR REPLACE INTO memroute_vec_meta (key, value) VALUES (?, ?)", list(values.items()))

    # -- lifecycle --------------------------------------------------------------------------------------

    def bind(self, signature: EmbeddingSignature) -> bool:
        if not isinstance(signature, EmbeddingSignature):
            raise VectorStoreError(f"bind() takes an EmbeddingSignature, got {type(signature).__name__}")
        if signature.dimensions < 1 or signature.dimensions > 8192:
            raise VectorStoreError(f"cannot index {signature.dimensions}-d vectors (sqlite-vec takes 1..8192)")
        quantization = self.settings.quantization or signature.quantization
        if quantization not in QUANTIZATIONS:
            raise VectorStoreError(
                f"sqlite-vec stores float32 or int8 vectors, not {quantization!r}; use the qdrant store for binary"
            )
        wanted = str(signature)
        with self._lock, self._pool.transaction() as conn:
            current = self._read_meta(conn)
            exists = self._table_exists(conn)
            if (current is not None and exists and current.signature == wanted
                    and current.quantization == quantization and current.dimensions == signature.dimensions):
                self._index = current
                return True
            for table in TABLES:
                conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.execute("DELETE FROM memroute_vec_ids")
            scale = 127.0 if quantization == "int8" and self.settings.int8_calibration == "unit" else None
            index = _Index(signature=wanted, quantization=quantization, dimensions=signature.dimensions,
                           chunk_size=self.settings.chunk_size, large_chunk_size=self.settings.large_chunk_size,
                           int8_scale=scale)
            element = "float" if quantization == "float32" else "int8"
            for table, chunk_size in zip(TABLES, (index.chunk_size, index.large_chunk_size), strict=True):
                conn.execute(
                    f"CREATE VIRTUAL TABLE {table} USING vec0("
                    " api_key_id TEXT PARTITION KEY,"
                    f" embedding {element}[{index.dimensions}] distance_metric=cosine,"
                    " session_id TEXT, created_at INTEGER, expires_at INTEGER,"
                    f" chunk_size={chunk_size})"
                )
            self._write_meta(conn, index)
            self._index = index
            return current is None

    @staticmethod
    def _table_exists(conn: Any) -> bool:
        found = conn.execute("SELECT count(*) FROM sqlite_master WHERE name IN (?, ?)", TABLES).fetchone()[0]
        return bool(found == len(TABLES))

    def signature(self) -> str | None:
        index = self._index
        return index.signature if index else None

    def describe(self) -> dict[str, Any]:
        """A JSON-able description for ``memroute status``."""
        index = self._index
        return {"store": self.store_name, "path": str(self.path), "signature": index.signature if index else None,
                "quantization": index.quantization if index else None,
                "chunk_size": index.chunk_size if index else self.settings.chunk_size,
                "large_chunk_size": index.large_chunk_size if index else self.settings.large_chunk_size,
                "promote_at": self.settings.promote_at,
                "int8_scale": index.int8_scale if index else None}

    def close(self) -> None:
        self._pool.close()

    def _bound(self) -> _Index:
        index = self._index
        if index is None:
            raise VectorStoreError("the sqlite-vec store is not bound to an embedding signature: call bind() first")
        return index

    # -- int8 -------------------------------------------------------------------------------------------

    def _scale_for(self, conn: Any, index: _Index, vectors: np.ndarray) -> float:
        """The int8 scale; calibrated once, from the first batch, and recorded in the meta table."""
        if index.int8_scale is not None:
            return index.int8_scale
        stored = self._read_meta(conn)  # another process may have calibrated since this one bound
        if stored is not None and stored.signature == index.signature and stored.int8_scale is not None:
            self._index = stored
            return stored.int8_scale
        prior = INT8_PRIOR / np.sqrt(index.dimensions)
        if len(vectors) >= MIN_CALIBRATION_VECTORS:
            clip = float(np.quantile(np.abs(vectors), INT8_QUANTILE))
        else:
            clip = max(prior, float(np.abs(vectors).max()))
        scale = float(127.0 / min(max(clip, 1e-6), 1.0))
        index = attrs.evolve(index, int8_scale=scale)
        self._write_meta(conn, index)
        self._index = index
        return scale

    @staticmethod
    def _quantize(vectors: np.ndarray, scale: float) -> np.ndarray:
        return np.clip(np.rint(vectors * scale), -127, 127).astype(np.int8)

    # -- writes -----------------------------------------------------------------------------------------

    def upsert(self, items: Sequence[VectorItem]) -> None:
        with self._lock:
            index = self._bound()
            checked = check_items(items, index.dimensions)
            if not checked:
                return
            matrix = np.stack([vector for _, _, vector in checked])
            with self._pool.transaction() as conn:
                if index.quantization == "int8":
                    scale = self._scale_for(conn, index, matrix)
                    blobs = [row.tobytes() for row in self._quantize(matrix, scale)]
                    value_sql = "vec_int8(?)"
                else:
                    blobs = [row.tobytes() for row in matrix]
                    value_sql = "?"
                tiers: dict[str, int] = {}
                rows: list[list[Any]] = [[], []]
                for (item, memory_id, _), blob in zip(checked, blobs, strict=True):
                    owner = item.api_key_id
                    if owner not in tiers:
                        tiers[owner] = self._tier_of(conn, owner)
                    key = uuid.UUID(memory_id).bytes
                    found = conn.execute("SELECT rowid, tier FROM memroute_vec_ids WHERE memory_id = ?",
                                         (key,)).fetchone()
                    if found is not None:
                        rowid, old_tier = found
                        # vec0 cannot move a row to another partition: replace it whole.
                        conn.execute(f"DELETE FROM {TABLES[old_tier]} WHERE rowid = ?", (rowid,))
                        conn.execute("UPDATE memroute_vec_ids SET api_key_id = ?, tier = ? WHERE rowid = ?",
                                     (owner, tiers[owner], rowid))
                    else:
                        rowid = conn.execute(
                            "INSERT INTO memroute_vec_ids (memory_id, api_key_id, tier) VALUES (?, ?, ?)"
                            " RETURNING rowid", (key, owner, tiers[owner])).fetchone()[0]
                    expires = NO_EXPIRY if item.expires_at is None else unix_micros(item.expires_at)
                    rows[tiers[owner]].append((rowid, owner, blob, item.session_id or NO_SESSION,
                                               unix_micros(item.created_at), expires))
                for table, table_rows in zip(TABLES, rows, strict=True):
                    if table_rows:
                        conn.executemany(
                            f"INSERT INTO {table} (rowid, api_key_id, embedding, session_id, created_at, expires_at)"
                            f" VALUES (?, ?, {value_sql}, ?, ?, ?)", table_rows)
                for owner, tier in tiers.items():
                    if tier == 0:
                        self._promote_if_large(conn, owner, value_sql)

    @staticmethod
    def _tier_of(conn: Any, api_key_id: str) -> int:
        row = conn.execute("SELECT tier FROM memroute_vec_ids WHERE api_key_id = ? LIMIT 1", (api_key_id,)).fetchone()
        return 0 if row is None else int(row[0])

    def _promote_if_large(self, conn: Any, api_key_id: str, value_sql: str) -> None:
        """Move a tenant that outgrew the small-chunk table to the large-chunk one (same transaction)."""
        count = conn.execute("SELECT count(*) FROM memroute_vec_ids WHERE api_key_id = ?", (api_key_id,)).fetchone()[0]
        if count <= self.settings.promote_at:
            return
        rows = conn.execute(
            f"SELECT rowid, api_key_id, embedding, session_id, created_at, expires_at FROM {TABLES[0]}"
            " WHERE api_key_id = ?", (api_key_id,)).fetchall()
        conn.executemany(
            f"INSERT INTO {TABLES[1]} (rowid, api_key_id, embedding, session_id, created_at, expires_at)"
            f" VALUES (?, ?, {value_sql}, ?, ?, ?)", rows)
        conn.executemany(f"DELETE FROM {TABLES[0]} WHERE rowid = ?", [(row[0],) for row in rows])
        conn.execute("UPDATE memroute_vec_ids SET tier = 1 WHERE api_key_id = ?", (api_key_id,))

    def delete(self, memory_ids: Sequence[str]) -> None:
        if isinstance(memory_ids, str):
            raise VectorStoreError("delete() takes a sequence of ids, not one string")
        keys = [uuid.UUID(canonical_uuid(m)).bytes for m in memory_ids]
        with self._lock, self._pool.transaction() as conn:
            exists = self._table_exists(conn)
            for key in keys:
                found = conn.execute("SELECT rowid, tier FROM memroute_vec_ids WHERE memory_id = ?",
                                     (key,)).fetchone()
                if found is None:
                    continue
                if exists:
                    conn.execute(f"DELETE FROM {TABLES[found[1]]} WHERE rowid = ?", (found[0],))
                conn.execute("DELETE FROM memroute_vec_ids WHERE rowid = ?", (found[0],))

    # -- reads ------------------------------------------------------------------------------------------

    def query(self, vector: Any, query: SearchQuery, k: int) -> list[VectorHit]:
        if not isinstance(query, SearchQuery):
            raise VectorStoreError(f"query() takes a SearchQuery, got {type(query).__name__}")
        k = check_k(k)
        index = self._bound()
        unit = check_vector(vector, index.dimensions, "query vector")
        if index.quantization == "int8":
            if index.int8_scale is None:
                stored = self._read_meta(self._pool.get())  # another process may have written since
                if stored is None or stored.signature != index.signature or stored.int8_scale is None:
                    return []  # nothing stored yet (the scale is set by the first upsert)
                self._index = index = stored
            assert index.int8_scale is not None
            probe: bytes = self._quantize(unit[None, :], index.int8_scale)[0].tobytes()
            match_sql = "vec_int8(?)"
        else:
            probe = unit.tobytes()
            match_sql = "?"
        # Every filter is a vec0 constraint, so vec0 applies it during the scan and k counts only
        # admitted rows. The partition key keeps the scan to this tenant's chunks.
        where = [f"embedding MATCH {match_sql}", "k = ?", "api_key_id = ?", "expires_at > ?"]
        params: list[Any] = [probe, k, query.api_key_id, unix_micros(query.now)]
        if query.session_id is not None:
            where.append("session_id = ?")
            params.append(query.session_id)
        cutoff = query.created_after
        if cutoff is not None:
            where.append("created_at >= ?")
            params.append(unix_micros(cutoff))
        connection = self._pool.get()
        table = TABLES[self._tier_of(connection, query.api_key_id)]
        sql = (
            f"WITH knn AS (SELECT rowid, distance FROM {table} WHERE {' AND '.join(where)}) "
            "SELECT i.memory_id, knn.distance FROM knn JOIN memroute_vec_ids i ON i.rowid = knn.rowid "
            "ORDER BY knn.distance"
        )
        try:
            rows = connection.execute(sql, params).fetchall()
        except MemrouteError:
            raise
        except Exception as exc:
            raise VectorStoreError(f"sqlite-vec query failed: {exc}") from exc
        # cosine distance = 1 - cosine similarity; clamp float rounding at the ends of [-1, 1].
        return [VectorHit(memory_id=str(uuid.UUID(bytes=blob)), score=max(-1.0, min(1.0, 1.0 - distance)))
                for blob, distance in rows]

    def count(self, api_key_id: str | None = None) -> int:
        conn = self._pool.get()
        if api_key_id is None:
            return int(conn.execute("SELECT count(*) FROM memroute_vec_ids").fetchone()[0])
        return int(conn.execute("SELECT count(*) FROM memroute_vec_ids WHERE api_key_id = ?",
                                (api_key_id,)).fetchone()[0])

    def ids(self, api_key_id: str | None = None) -> set[str]:
        conn = self._pool.get()
        if api_key_id is None:
            rows = conn.execute("SELECT memory_id FROM memroute_vec_ids")
        else:
            rows = conn.execute("SELECT memory_id FROM memroute_vec_ids WHERE api_key_id = ?", (api_key_id,))
        return {str(uuid.UUID(bytes=blob)) for (blob,) in rows}

    def health(self) -> HealthResult:
        result = super().health()
        index = self._index
        details = {"store": self.store_name, "bound": index is not None}
        if result.ok:
            try:
                details["vec_version"] = self._pool.get().execute("SELECT vec_version()").fetchone()[0]
            except Exception as exc:  # the extension vanished: the store cannot answer queries
                return HealthResult(ok=False, latency_ms=result.latency_ms, error=str(exc), details=details)
        return attrs.evolve(result, details=details)


def _factory(settings: SqliteVecSettings, context: ComponentContext) -> SqliteVecStore:
    return SqliteVecStore(settings, context)


@memroute.hookimpl
def memroute_vector_stores() -> Any:
    yield VectorStoreSpec(name="sqlite-vec", factory=_factory, settings_class=SqliteVecSettings,
                          description="sqlite-vec (vec0) in a local SQLite file, partitioned by API key")
