"""The ``sqlite-vec`` vector store: the embedded default.

Two tiers, by tenant size. Every tenant starts in a vec0 virtual table partitioned by ``api_key_id`` with
small chunks (a tenant's KNN reads only its own chunks, ``k`` applies after the owner filter, and a tenant
with a few memories reserves a few KB, not a 1,024-slot chunk). A tenant that passes ``promote_at``
vectors moves, once and in one transaction, to a plain SQLite table of vector BLOBs; its queries run on an
in-process numpy matrix loaded from that table (one SELECT), kept in step by this instance's writes and
reloaded when the tenant's generation in SQLite shows another process wrote. vec0 is an exact scan without
SIMD and was ~15x slower than numpy at 10k vectors per key; the matrix is the numpy scan. See
``docs/vectors.md`` for the design and the measurements.

This module also implements ``memroute_prepare_connection``: every apsw connection memroute opens gets the
sqlite-vec extension loaded.
"""

from __future__ import annotations

import logging
import random
import threading
import types
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
from memroute_builtins.vectors.common import (
    MAX_K,
    canonical_uuid,
    check_items,
    check_k,
    check_vector,
    unix_micros,
    uuid_bytes,
)
from memroute_builtins.vectors.hubness import calibrated_penalty
from memroute_builtins.vectors.sqlite_vec.matrix_cache import (
    ID_BYTES,
    MatrixCache,
    TenantMatrix,
    TenantRows,
    centered_scores,
)

__all__ = ["SqliteVecSettings", "SqliteVecStore", "load_sqlite_vec"]

log = logging.getLogger(__name__)

NO_EXPIRY = 2**62
"""vec0 metadata columns cannot hold NULL (0.1.9), so "never expires" is a far-future timestamp."""
NO_SESSION = ""
"""The stored session of a memory without one; memroute never uses ``""`` as a session id."""
SCHEMA_VERSION = "3"
"""3: the large tier is a plain table of BLOBs searched in process (2 had a second vec0 table)."""
SMALL, LARGE = "memroute_vec", "memroute_vec_large"
TABLES = (SMALL, LARGE)
"""Tier 0 (vec0, small chunks, every tenant starts here) and tier 1 (BLOB table, tenants past ``promote_at``)."""
TENANTS = "memroute_vec_tenants"
"""One row per large-tier tenant: its generation, replaced in every transaction that changes its rows."""
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
    promote_at: int = attrs.field(default=64, validator=attrs.validators.ge(1))
    """A tenant whose vector count passes this moves (once, in one transaction) to the large tier: a BLOB
    table searched through an in-process numpy matrix. The matrix is faster at every size (0.17 against 0.38
    ms a query at 64 vectors, 0.21 against 1.9 ms at 512: vec0's scan, plus reading every row's vector for
    the centred ranking); the small tier keeps a tenant with a few memories out of process memory."""
    cache_max_mb: float = attrs.field(default=512, validator=attrs.validators.ge(0))
    """Upper bound on the in-process matrices of large tenants (MB, LRU over tenants). A tenant larger than
    the whole bound is searched from a matrix loaded per query and not kept."""
    int8_calibration: str = attrs.field(default="auto", validator=_check_optional_choice(*INT8_CALIBRATIONS))
    """``auto``: a symmetric scale calibrated from the first vectors stored (recorded in the meta table);
    ``unit``: map [-1, 1] to the int8 range, as ``vec_quantize_int8(v, 'unit')`` does (loses recall)."""
    busy_timeout_ms: int = 5000
    center: bool = True
    """Rank by the cosine with the **centred query**: the query minus the tenant's mean vector (shrunk for
    tenants with few memories), renormalised. Embedding models crowd all texts into a narrow cone, so chat
    turns that only share the cone outrank paraphrased answers; measured on the quality benchmark with
    2,000 real chat turns per tenant (docs/retrieval.md). The Qdrant and pgvector stores rank the same way.
    ``false``: plain cosine. Each hit still carries its plain cosine (``VectorHit.cosine``), which the
    relevance floor uses."""
    hub_penalty: float | None = attrs.field(
        default=None, validator=attrs.validators.optional([attrs.validators.ge(0.0), attrs.validators.le(2.0)]))
    """In the large tier, for tenants of more than ``hub_min_rows`` vectors, subtract this times each memory's
    **hub term** (its mean centred cosine to its ``hub_neighbours`` nearest memories, shrunk for small
    tenants) from its score:
    memories near many others are near many queries, and among chat turns those are the generic ones
    (CSLS; :mod:`memroute_builtins.vectors.hubness`). Unset: the value calibrated on the quality benchmark's
    dev split for the bound embedding model (:func:`~memroute_builtins.vectors.hubness.calibrated_penalty`;
    docs/retrieval.md). ``0`` turns it off."""
    hub_neighbours: int = attrs.field(default=10, validator=[attrs.validators.ge(1), attrs.validators.le(100)])
    hub_min_rows: int = attrs.field(default=512, validator=attrs.validators.ge(0))
    """Tenants with at most this many vectors rank without the hub penalty, whichever tier serves them. It was
    calibrated where it applied until ``promote_at`` moved from 512 to 64 (the large tier, past 512 vectors),
    so tenants rank exactly as they did; for a few dozen memories the neighbours of a fact are the user's
    other facts, not generic chat turns."""
    hub_max_rows: int = attrs.field(default=5000, validator=attrs.validators.ge(0))
    """Tenants with more vectors than this rank without the hub penalty: its exact neighbour term costs
    ``n^2`` dot products to compute (about 230 ms at 5,000 vectors on the reference machine, once per process and
    tenant, then incrementally)."""


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
    """What the meta table says about the current index."""

    signature: str
    quantization: str
    dimensions: int
    chunk_size: int
    int8_scale: float | None


class _Delta:
    """What one write transaction did to one large tenant, to replay on its cached matrix after commit."""

    __slots__ = ("added", "removed")

    def __init__(self) -> None:
        self.removed: list[int] = []
        self.added: list[tuple[int, bytes, bytes, str, int, int]] = []


def _uuid_text(blob: bytes) -> str:
    """``str(uuid.UUID(bytes=blob))`` without building a UUID object (a twentieth of the cost per hit)."""
    h = blob.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _clamped(values: np.ndarray) -> list[float]:
    """``[max(-1.0, min(1.0, float(v))) for v in values]`` (clamping float rounding at the ends of [-1, 1]) in
    two array operations; NaN becomes 1.0 as it does there."""
    below = np.where(values < 1.0, values, 1.0)
    return np.where(below > -1.0, below, -1.0).tolist()


def _hit_setters() -> tuple[Any, Any, Any] | None:
    """The slot setters of :class:`VectorHit`'s three fields, when it is the plain slotted class it is now (no
    validators, converters or post-init): :func:`_hits` fills new objects with them, half the cost of attrs'
    frozen ``__init__`` (0.04 against 0.09 ms for 100 hits). ``None`` if the class ever changes shape: then
    hits are built the ordinary way."""
    fields = attrs.fields(VectorHit)
    names = ("memory_id", "score", "cosine")
    slots = [VectorHit.__dict__.get(name) for name in names]
    if (tuple(field.name for field in fields) != names or hasattr(VectorHit, "__attrs_pre_init__")
            or hasattr(VectorHit, "__attrs_post_init__")
            or any(field.validator is not None or field.converter is not None for field in fields)
            or not all(isinstance(slot, types.MemberDescriptorType) for slot in slots)):
        return None
    return slots[0].__set__, slots[1].__set__, slots[2].__set__


_HIT_SETTERS = _hit_setters()


def _hits(memory_ids: Sequence[str], scores: Sequence[float], cosines: Sequence[float]) -> list[VectorHit]:
    """``VectorHit(memory_id=i, score=s, cosine=c)`` for each triple, in order (a search builds 63-100)."""
    if _HIT_SETTERS is None:
        return [VectorHit(memory_id=i, score=s, cosine=c) for i, s, c in zip(memory_ids, scores, cosines, strict=True)]
    set_id, set_score, set_cosine = _HIT_SETTERS
    new = object.__new__
    hits = []
    add = hits.append
    for memory_id, score, cosine in zip(memory_ids, scores, cosines, strict=True):
        hit = new(VectorHit)
        set_id(hit, memory_id)
        set_score(hit, score)
        set_cosine(hit, cosine)
        add(hit)
    return hits


def _new_generation() -> int:
    # Random, not a counter: a re-bind (from any process) drops and recreates the tenants table, and a
    # counter restarting at 1 could match a generation a cache still holds. 62 random bits do not repeat.
    return random.getrandbits(62) + 1


class SqliteVecStore(VectorStore):
    """sqlite-vec vector store; safe to call from several threads (one apsw connection per thread)."""

    in_process = True  # a SQLite file

    store_name = "sqlite-vec"

    def __init__(self, settings: SqliteVecSettings, context: ComponentContext) -> None:
        from memroute.deployment.db import ThreadConnections

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
        self._cache = MatrixCache(int(settings.cache_max_mb * 1024 * 1024))
        self._index: _Index | None = None
        self._hub_penalty = settings.hub_penalty or 0.0
        """The hub penalty in force: the setting, else the bound model's calibrated value (set by bind)."""
        with self._pool.transaction() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS memroute_vec_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            # vec0 rowids are integers; memories are UUIDs. Ids are stored as 16-byte blobs (half a text
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
        if "signature" not in meta or meta.get("schema_version") != SCHEMA_VERSION:
            return None
        scale = meta.get("int8_scale")
        return _Index(signature=meta["signature"], quantization=meta["quantization"],
                      dimensions=int(meta["dimensions"]), chunk_size=int(meta["chunk_size"]),
                      int8_scale=float(scale) if scale else None)

    @staticmethod
    def _write_meta(conn: Any, index: _Index) -> None:
        values = {"schema_version": SCHEMA_VERSION, "signature": index.signature, "quantization": index.quantization,
                  "dimensions": str(index.dimensions), "chunk_size": str(index.chunk_size),
                  "int8_scale": "" if index.int8_scale is None else repr(index.int8_scale)}
        conn.execute("DELETE FROM memroute_vec_meta")
        conn.executemany("INSERT INTO memroute_vec_meta (key, value) VALUES (?, ?)", list(values.items()))

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
        penalty = self.settings.hub_penalty
        self._hub_penalty = calibrated_penalty(signature.model) if penalty is None else penalty
        with self._lock, self._pool.transaction() as conn:
            had_meta = conn.execute("SELECT 1 FROM memroute_vec_meta WHERE key = 'signature'").fetchone()
            current = self._read_meta(conn)  # None also for an index of an older schema: rebuilt below
            if (current is not None and self._tables_exist(conn) and current.signature == wanted
                    and current.quantization == quantization and current.dimensions == signature.dimensions):
                self._index = current
                return True
            self._cache.clear()
            for table in (*TABLES, TENANTS):
                conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.execute("DELETE FROM memroute_vec_ids")
            scale = 127.0 if quantization == "int8" and self.settings.int8_calibration == "unit" else None
            index = _Index(signature=wanted, quantization=quantization, dimensions=signature.dimensions,
                           chunk_size=self.settings.chunk_size, int8_scale=scale)
            element = "float" if quantization == "float32" else "int8"
            conn.execute(
                f"CREATE VIRTUAL TABLE {SMALL} USING vec0("
                " api_key_id TEXT PARTITION KEY,"
                f" embedding {element}[{index.dimensions}] distance_metric=cosine,"
                " session_id TEXT, created_at INTEGER, expires_at INTEGER,"
                f" chunk_size={index.chunk_size})"
            )
            # The large tier: the same rowids as memroute_vec_ids, the vector as raw float32 / int8 bytes.
            # memory_id is repeated here so loading a tenant's matrix is one indexed SELECT without a join.
            conn.execute(
                f"CREATE TABLE {LARGE} (rowid INTEGER PRIMARY KEY, api_key_id TEXT NOT NULL,"
                " memory_id BLOB NOT NULL, vector BLOB NOT NULL, session_id TEXT NOT NULL,"
                " created_us INTEGER NOT NULL, expires_us INTEGER NOT NULL)"
            )
            conn.execute(f"CREATE INDEX {LARGE}_owner ON {LARGE}(api_key_id)")
            conn.execute(f"CREATE TABLE {TENANTS} (api_key_id TEXT PRIMARY KEY, generation INTEGER NOT NULL)")
            self._write_meta(conn, index)
            self._index = index
            return not had_meta

    @staticmethod
    def _tables_exist(conn: Any) -> bool:
        names = (*TABLES, TENANTS)
        found = conn.execute(f"SELECT count(*) FROM sqlite_master WHERE name IN ({', '.join('?' * len(names))})",
                             names).fetchone()[0]
        return bool(found == len(names))

    def signature(self) -> str | None:
        index = self._index
        return index.signature if index else None

    def describe(self) -> dict[str, Any]:
        """A JSON-able description for ``memroute status``."""
        index = self._index
        return {"store": self.store_name, "path": str(self.path), "signature": index.signature if index else None,
                "quantization": index.quantization if index else None,
                "chunk_size": index.chunk_size if index else self.settings.chunk_size,
                "promote_at": self.settings.promote_at,
                "int8_scale": index.int8_scale if index else None,
                "center": self.settings.center,
                "hub_penalty": {"weight": self._hub_penalty, "neighbours": self.settings.hub_neighbours,
                                "min_rows": self.settings.hub_min_rows, "max_rows": self.settings.hub_max_rows,
                                "source": "set" if self.settings.hub_penalty is not None else "calibrated"},
                "large_tier_cache": self._cache.stats()}

    def close(self) -> None:
        self._cache.clear()
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
            deltas: dict[str, _Delta] = {}
            with self._pool.transaction() as conn:
                if index.quantization == "int8":
                    scale = self._scale_for(conn, index, matrix)
                    blobs = [row.tobytes() for row in self._quantize(matrix, scale)]
                    value_sql = "vec_int8(?)"
                else:
                    blobs = [row.tobytes() for row in matrix]
                    value_sql = "?"
                tiers: dict[str, int] = {}
                small_rows: list[tuple[Any, ...]] = []
                large_rows: list[tuple[Any, ...]] = []
                keys = [uuid_bytes(memory_id) for _, memory_id, _ in checked]
                existing = self._rowids(conn, keys)
                for owner in {item.api_key_id for item, _, _ in checked}:
                    tiers[owner] = self._tier_of(conn, owner)
                # New ids get their rowids in one statement (in order), known ones are moved in place.
                fresh = [(key, item.api_key_id, tiers[item.api_key_id])
                         for (item, _, _), key in zip(checked, keys, strict=True) if key not in existing]
                if fresh:
                    assigned = conn.executemany(
                        "INSERT INTO memroute_vec_ids (memory_id, api_key_id, tier) VALUES (?, ?, ?) RETURNING rowid",
                        fresh).fetchall()
                    existing.update((key, (int(rowid), None, None)) for (key, _, _), (rowid,) in zip(
                        fresh, assigned, strict=True))
                for (item, _, _), key, blob in zip(checked, keys, blobs, strict=True):
                    owner = item.api_key_id
                    rowid, old_tier, old_owner = existing[key]
                    if old_tier is not None:
                        # vec0 cannot move a row to another partition: replace it whole (in either tier).
                        conn.execute(f"DELETE FROM {TABLES[old_tier]} WHERE rowid = ?", (rowid,))
                        if old_tier == 1:
                            deltas.setdefault(old_owner, _Delta()).removed.append(rowid)
                        conn.execute("UPDATE memroute_vec_ids SET api_key_id = ?, tier = ? WHERE rowid = ?",
                                     (owner, tiers[owner], rowid))
                    expires = NO_EXPIRY if item.expires_at is None else unix_micros(item.expires_at)
                    row = (rowid, owner, blob, item.session_id or NO_SESSION, unix_micros(item.created_at), expires)
                    if tiers[owner] == 0:
                        small_rows.append(row)
                    else:
                        large_rows.append((*row, key))
                        deltas.setdefault(owner, _Delta()).added.append(
                            (rowid, key, blob, row[3], row[4], row[5]))
                if small_rows:
                    conn.executemany(
                        f"INSERT INTO {SMALL} (rowid, api_key_id, embedding, session_id, created_at, expires_at)"
                        f" VALUES (?, ?, {value_sql}, ?, ?, ?)", small_rows)
                if large_rows:
                    conn.executemany(
                        f"INSERT INTO {LARGE} (rowid, api_key_id, vector, session_id, created_us, expires_us,"
                        " memory_id) VALUES (?, ?, ?, ?, ?, ?, ?)", large_rows)
                for owner, tier in tiers.items():
                    if tier == 0:
                        self._promote_if_large(conn, owner)
                generations = self._bump(conn, deltas)
            self._replay(deltas, generations)

    @staticmethod
    def _rowids(conn: Any, keys: Sequence[bytes]) -> dict[bytes, tuple[int, int | None, str | None]]:
        """``memory_id`` bytes -> ``(rowid, tier, owner)`` for the ids already indexed, a few queries a batch."""
        found: dict[bytes, tuple[int, int | None, str | None]] = {}
        for start in range(0, len(keys), 500):
            part = keys[start:start + 500]
            marks = ",".join("?" * len(part))
            sql = f"SELECT memory_id, rowid, tier, api_key_id FROM memroute_vec_ids WHERE memory_id IN ({marks})"
            for key, rowid, tier, owner in conn.execute(sql, part):
                found[bytes(key)] = (int(rowid), int(tier), str(owner))
        return found

    @staticmethod
    def _tier_of(conn: Any, api_key_id: str) -> int:
        row = conn.execute(f"SELECT 1 FROM {TENANTS} WHERE api_key_id = ?", (api_key_id,)).fetchone()
        return 0 if row is None else 1

    def _promote_if_large(self, conn: Any, api_key_id: str) -> None:
        """Move a tenant that outgrew the vec0 table to the BLOB table (same transaction, once: a large
        tenant stays large, also when it shrinks)."""
        count = conn.execute("SELECT count(*) FROM memroute_vec_ids WHERE api_key_id = ?", (api_key_id,)).fetchone()[0]
        if count <= self.settings.promote_at:
            return
        # vec0 returns a vector column as its raw bytes: float32 or int8, the large tier's format.
        rows = conn.execute(
            f"SELECT v.rowid, v.api_key_id, v.embedding, v.session_id, v.created_at, v.expires_at, i.memory_id"
            f" FROM {SMALL} v JOIN memroute_vec_ids i ON i.rowid = v.rowid WHERE v.api_key_id = ?",
            (api_key_id,)).fetchall()
        conn.executemany(
            f"INSERT INTO {LARGE} (rowid, api_key_id, vector, session_id, created_us, expires_us, memory_id)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        conn.executemany(f"DELETE FROM {SMALL} WHERE rowid = ?", [(row[0],) for row in rows])
        conn.execute("UPDATE memroute_vec_ids SET tier = 1 WHERE api_key_id = ?", (api_key_id,))
        conn.execute(f"INSERT INTO {TENANTS} (api_key_id, generation) VALUES (?, ?)",
                     (api_key_id, _new_generation()))

    @staticmethod
    def _bump(conn: Any, deltas: dict[str, _Delta]) -> dict[str, tuple[int | None, int]]:
        """Give every changed large tenant a new generation (inside the write transaction): ``(old, new)``."""
        changed: dict[str, tuple[int | None, int]] = {}
        for owner in deltas:
            row = conn.execute(f"SELECT generation FROM {TENANTS} WHERE api_key_id = ?", (owner,)).fetchone()
            new = _new_generation()
            conn.execute(f"INSERT OR REPLACE INTO {TENANTS} (api_key_id, generation) VALUES (?, ?)", (owner, new))
            changed[owner] = (None if row is None else int(row[0]), new)
        return changed

    def _replay(self, deltas: dict[str, _Delta], generations: dict[str, tuple[int | None, int]]) -> None:
        """After commit: apply each large tenant's delta to its cached matrix, if that matrix reflected the
        generation this transaction started from. Otherwise another process wrote in between (or the matrix
        was never loaded): leave it to reload on its next query."""
        index = self._bound()
        for owner, delta in deltas.items():
            matrix = self._cache.peek(owner)
            if matrix is None:
                if delta.added:
                    self._warm(index, owner)
                continue
            old, new = generations[owner]
            with matrix.lock:
                if matrix.generation == new:
                    continue  # a query reloaded it after the commit: already current
                if old is None or matrix.generation != old or matrix.dimensions != index.dimensions:
                    matrix.generation = None
                    continue
                if delta.removed:
                    matrix.remove(delta.removed)
                if delta.added:
                    matrix.append(self._rows(index, delta.added))
                    self._prepare(matrix)
                matrix.generation = new
            if delta.added and not self._cache.account(owner, matrix):
                self._cache.discard(owner)

    def _warm(self, index: _Index, api_key_id: str) -> None:
        """Load a large tenant's matrix that rows were just written to, when it fits the cache's free room
        (it never evicts a tenant that searches use for one that is only written), with its center and hub terms.

        The indexer writes here, in the background: a tenant bulk-imported or chatting is about to be searched,
        and without this its first search paid the load (60 ms at 10k vectors, 0.35 s at 100k, on top of a
        3-35 ms search). Later writes keep the matrix current by :meth:`_replay`."""
        count = self._pool.get().execute("SELECT count(*) FROM memroute_vec_ids WHERE api_key_id = ?",
                                         (api_key_id,)).fetchone()[0]
        if not self._cache.has_room(TenantMatrix.bytes_for(int(count), index.dimensions)):
            return
        matrix = self._cache.entry(api_key_id, index.dimensions)
        with matrix.lock:
            if matrix.generation is None:
                self._load(matrix, index, api_key_id)
                self._prepare(matrix)
        if not self._cache.account(api_key_id, matrix):
            self._cache.discard(api_key_id)

    def _prepare(self, matrix: TenantMatrix) -> None:
        """Compute now what the next search of this matrix would: its center and its rows' hub terms (a full
        recomputation is a product of the tenant's rows with themselves, 0.1 s at 2,000 rows on a busy machine;
        a row added since, one row against all). The writer pays for it, not the search after the write.
        Caller holds ``matrix.lock``."""
        if self.settings.center:
            matrix.prepare_center()
        if self._hub_penalty > 0:
            matrix.hub_terms(self.settings.hub_neighbours, self.settings.hub_max_rows, self.settings.center,
                             self.settings.hub_min_rows)

    def delete(self, memory_ids: Sequence[str]) -> None:
        if isinstance(memory_ids, str):
            raise VectorStoreError("delete() takes a sequence of ids, not one string")
        keys = [uuid.UUID(canonical_uuid(m)).bytes for m in memory_ids]
        deltas: dict[str, _Delta] = {}
        with self._lock:
            with self._pool.transaction() as conn:
                exists = self._tables_exist(conn)
                for key in keys:
                    found = conn.execute("SELECT rowid, tier, api_key_id FROM memroute_vec_ids WHERE memory_id = ?",
                                         (key,)).fetchone()
                    if found is None:
                        continue
                    rowid, tier, owner = found
                    if exists:
                        conn.execute(f"DELETE FROM {TABLES[tier]} WHERE rowid = ?", (rowid,))
                    if tier == 1:
                        deltas.setdefault(owner, _Delta()).removed.append(rowid)
                    conn.execute("DELETE FROM memroute_vec_ids WHERE rowid = ?", (rowid,))
                generations = self._bump(conn, deltas) if exists else {}
            if generations:
                self._replay(deltas, generations)

    # -- the large tier's matrices ----------------------------------------------------------------------

    @staticmethod
    def _rows(index: _Index, rows: Sequence[tuple[int, bytes, bytes, str, int, int]]) -> TenantRows:
        """``(rowid, memory id, vector bytes, session, created_us, expires_us)`` rows as matrix columns.

        int8 rows are dequantised and re-normalised: cosine does not depend on the scale, so the scores are
        the cosine between the query and the stored int8 vector (the query itself is not quantised).
        """
        count = len(rows)
        rowids, ids, blobs, sessions, created, expires = zip(*rows, strict=True) if rows else ((),) * 6
        element = np.float32 if index.quantization == "float32" else np.int8
        try:
            # bytearray.join: one copy into a writable buffer the matrix adopts as is.
            vectors = np.frombuffer(bytearray().join(blobs), dtype=element).reshape(count, index.dimensions)
            memory_ids = np.frombuffer(bytearray().join(ids), dtype=np.uint8).reshape(count, ID_BYTES)
        except ValueError as exc:  # a vector of another size: the file was re-bound under this instance
            raise VectorStoreError(f"the large-tier vectors in {LARGE} do not match the bound index: {exc}") from exc
        if element is np.int8:
            dequantised = vectors.astype(np.float32)
            norms = np.linalg.norm(dequantised, axis=1, keepdims=True)
            vectors = np.divide(dequantised, np.where(norms == 0, 1, norms), out=dequantised)
        return TenantRows(rowids=np.fromiter(rowids, dtype=np.int64, count=count), memory_ids=memory_ids,
                          vectors=vectors, sessions=sessions, created=np.fromiter(created, dtype=np.int64, count=count),
                          expires=np.fromiter(expires, dtype=np.int64, count=count))

    def _load(self, matrix: TenantMatrix, index: _Index, api_key_id: str) -> None:
        """(Re)load a tenant's matrix: its generation and rows from one read snapshot. Caller holds the lock."""
        conn = self._pool.get()
        with conn:  # one transaction, so the rows are exactly those of the generation read with them
            row = conn.execute(f"SELECT generation FROM {TENANTS} WHERE api_key_id = ?", (api_key_id,)).fetchone()
            rows = conn.execute(
                f"SELECT rowid, memory_id, vector, session_id, created_us, expires_us FROM {LARGE}"
                " WHERE api_key_id = ?", (api_key_id,)).fetchall()
        matrix.replace(self._rows(index, rows), None if row is None else int(row[0]))
        self._cache.loads += 1

    def _query_large(self, index: _Index, unit: np.ndarray, query: SearchQuery, k: int,
                     generation: int) -> tuple[list[str], np.ndarray, np.ndarray]:
        matrix = self._cache.entry(query.api_key_id, index.dimensions)
        with matrix.lock:
            if matrix.generation != generation:
                self._load(matrix, index, query.api_key_id)
                if not self._cache.account(query.api_key_id, matrix):
                    log.warning("tenant %r's vectors (%d MB) exceed cache_max_mb; searched without caching",
                                query.api_key_id, matrix.nbytes // 2**20)
            cutoff = query.created_after
            return matrix.search(unit, k, now_us=unix_micros(query.now), session_id=query.session_id,
                                 created_after_us=None if cutoff is None else unix_micros(cutoff),
                                 center=self.settings.center, hub_penalty=self._hub_penalty,
                                 hub_neighbours=self.settings.hub_neighbours,
                                 hub_min_rows=self.settings.hub_min_rows,
                                 hub_max_rows=self.settings.hub_max_rows)

    # -- reads ------------------------------------------------------------------------------------------

    def query(self, vector: Any, query: SearchQuery, k: int) -> list[VectorHit]:
        if not isinstance(query, SearchQuery):
            raise VectorStoreError(f"query() takes a SearchQuery, got {type(query).__name__}")
        k = check_k(k)
        index = self._bound()
        unit = check_vector(vector, index.dimensions, "query vector")
        connection = self._pool.get()
        try:
            large = connection.execute(f"SELECT generation FROM {TENANTS} WHERE api_key_id = ?",
                                       (query.api_key_id,)).fetchone()
            if large is not None:
                texts, scores, cosines = self._query_large(index, unit, query, k, int(large[0]))
                return _hits(texts, _clamped(scores), _clamped(cosines))  # clamped: float rounding at +-1
            found = self._query_small(connection, index, unit, query, k)
        except MemrouteError:
            raise
        except Exception as exc:
            raise VectorStoreError(f"sqlite-vec query failed: {exc}") from exc
        # Clamp float rounding at the ends of [-1, 1].
        return _hits([_uuid_text(blob) for blob, _, _ in found], [max(-1.0, min(1.0, score)) for _, score, _ in found],
                     [max(-1.0, min(1.0, cosine)) for _, _, cosine in found])

    def _query_small(self, connection: Any, index: _Index, unit: np.ndarray, query: SearchQuery,
                     k: int) -> list[tuple[bytes, float, float]]:
        if index.quantization == "int8":
            if index.int8_scale is None:
                stored = self._read_meta(connection)  # another process may have written since
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
        center = self.settings.center
        if center:
            # Centring needs every admitted row of the tenant (at most promote_at in this tier): read them all
            # with their vectors, and rank them here.
            total = connection.execute("SELECT count(*) FROM memroute_vec_ids WHERE api_key_id = ?",
                                       (query.api_key_id,)).fetchone()[0]
            depth = min(MAX_K, max(int(total), k))
        else:
            depth = k
        where = [f"embedding MATCH {match_sql}", "k = ?", "api_key_id = ?", "expires_at > ?"]
        params: list[Any] = [probe, depth, query.api_key_id, unix_micros(query.now)]
        if query.session_id is not None:
            where.append("session_id = ?")
            params.append(query.session_id)
        cutoff = query.created_after
        if cutoff is not None:
            where.append("created_at >= ?")
            params.append(unix_micros(cutoff))
        sql = (
            f"WITH knn AS (SELECT rowid, distance, embedding FROM {SMALL} WHERE {' AND '.join(where)}) "
            "SELECT i.memory_id, knn.distance, knn.embedding FROM knn JOIN memroute_vec_ids i ON i.rowid = knn.rowid "
            "ORDER BY knn.distance"
        )
        rows = connection.execute(sql, params).fetchall()
        # cosine distance = 1 - cosine similarity
        if not center or len(rows) < 2:
            return [(blob, 1.0 - distance, 1.0 - distance) for blob, distance, _ in rows[:k]]
        element = np.float32 if index.quantization == "float32" else np.int8
        vectors = np.frombuffer(b"".join(row[2] for row in rows), dtype=element).reshape(len(rows), index.dimensions)
        vectors = vectors.astype(np.float32)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        scores = centered_scores(vectors, unit)
        order = np.argsort(-scores, kind="stable")[:k]
        return [(rows[i][0], float(scores[i]), 1.0 - rows[i][1]) for i in order]

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
    # auto's vector store: local, no service to run, shipped with memroute
    yield VectorStoreSpec(name="sqlite-vec", factory=_factory, settings_class=SqliteVecSettings,
                          description="sqlite-vec (vec0) in a local SQLite file, partitioned by API key",
                          auto_priority=100, quantizations=frozenset(QUANTIZATIONS))
