"""The ``qdrant`` vector store (``pip install 'memroute[qdrant]'``).

Local mode (``path`` on disk, or ``location = ":memory:"``) for the embedded case and tests; ``url`` and
``api_key`` for a Qdrant server or cluster. One collection with cosine distance, sized from the bound
signature, which is recorded in the collection's metadata: a different signature recreates the collection.
Points are keyed by the memory's canonical UUID; every query filters by owner, expiry, retention and
(when given) session through ``query_points``.

With ``center = true`` (the default) a query ranks by each memory's cosine with the **centred query**, the
query minus the tenant's mean vector (as the sqlite-vec store does; :func:`~memroute_builtins.vectors.common.
centered_probe`): the mean is computed by scrolling the tenant's vectors and cached
(:class:`~memroute_builtins.vectors.common.TenantCenters`), and each hit carries its plain cosine too.

Local mode performs exact search and ignores payload indexes, quantisation and search parameters; the
arguments are still passed (so a server gets them) and unit tests observe them with a recording client.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import numpy as np

import memroute
from memroute.errors import ConfigError, MemrouteError, VectorStoreError
from memroute.interfaces import ComponentContext, EmbeddingSignature, VectorHit, VectorItem, VectorStore
from memroute.models import HealthResult, SearchQuery
from memroute.specs import VectorStoreSpec
from memroute_builtins.vectors.common import (
    TenantCenters,
    canonical_uuid,
    centered_probe,
    check_items,
    check_k,
    check_vector,
    unix_seconds,
)

__all__ = ["QdrantSettings", "QdrantStore"]

INSTALL_HINT = "pip install 'memroute[qdrant]'"
QUANTIZATIONS = ("none", "int8", "binary")
# The signature quantisation names memroute uses, mapped to this store's.
_FROM_SIGNATURE = {"float32": "none", "none": "none", "int8": "int8", "binary": "binary"}
META_SIGNATURE = "memroute_signature"
META_QUANTIZATION = "memroute_quantization"
UPSERT_BATCH = 256


def _choice(*allowed: str | None) -> Any:
    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value not in allowed:
            names = ", ".join(str(a) for a in allowed if a is not None)
            raise ConfigError(f"must be one of {names}, got {value!r}", [(attribute.name, "invalid")])

    return check


def _positive(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"must be a positive number, got {value!r}", [(attribute.name, "range")])


@attrs.frozen(kw_only=True)
class QdrantSettings:
    """Options of ``[vectors] store = "qdrant"`` (under ``[vectors.options.qdrant]``). At most one of
    ``url``, ``location`` and ``path``; none means local mode in ``<data_dir>/qdrant``."""

    url: str | None = None
    """A Qdrant server or cluster, e.g. ``http://127.0.0.1:6333``."""
    api_key: str | None = attrs.field(default=None, repr=False)
    location: str | None = None
    """``":memory:"`` for an in-process, non-persistent index (tests)."""
    path: str | None = None
    """Local mode on disk (one process at a time: Qdrant locks the folder)."""
    collection: str = "memroute_memories"
    timeout: int = attrs.field(default=10, validator=_positive)
    """Seconds per request to a server."""
    quantization: str | None = attrs.field(default=None, validator=_choice(None, *QUANTIZATIONS))
    """``none`` | ``int8`` | ``binary``; unset means the bound signature's (``[vectors] quantization``).
    Quantised searches rescore with the original vectors."""
    oversampling: float = attrs.field(default=2.0, validator=_positive)
    """Candidates fetched per result before rescoring a quantised search."""
    shard_key_by_api_key: bool = False
    """Cluster only: a custom shard key per API key (``sharding_method=custom``), so one tenant's data lives
    on one shard and its searches touch only that shard. Not available in local mode."""
    center: bool = True
    """Rank by the cosine with the centred query (the query minus the tenant's mean vector), as the
    sqlite-vec store does (docs/vectors.md); ``false``: plain cosine."""
    center_check_seconds: float = attrs.field(default=30.0, validator=attrs.validators.ge(0))
    """How often a cached tenant mean is checked against the tenant's vector count (other processes' writes)."""

    def __attrs_post_init__(self) -> None:
        given = [name for name in ("url", "location", "path") if getattr(self, name)]
        if len(given) > 1:
            raise ConfigError(f"give one of url, location, path, not {' and '.join(given)}",
                              [(given[1], "conflict")])
        if self.location is not None and self.location != ":memory:":
            raise ConfigError('location must be ":memory:" (use url for a server)', [("location", "invalid")])
        if self.shard_key_by_api_key and not self.url:
            raise ConfigError("shard_key_by_api_key needs a Qdrant cluster (url)",
                              [("shard_key_by_api_key", "invalid")])
        if not self.collection or not all(c.isalnum() or c in "-_." for c in self.collection):
            raise ConfigError(f"collection must be a plain name, got {self.collection!r}", [("collection", "invalid")])


class QdrantStore(VectorStore):
    """Qdrant vector store. Thread-safe: local mode serialises calls (it is one SQLite-backed process
    store); a server client is used concurrently."""

    store_name = "qdrant"

    def __init__(self, settings: QdrantSettings, context: ComponentContext,
                 client_factory: Callable[..., Any] | None = None) -> None:
        try:
            from qdrant_client import QdrantClient, models
            from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse
        except ImportError as exc:
            raise VectorStoreError(f"the qdrant vector store needs qdrant-client: {INSTALL_HINT}") from exc
        self._m = models
        self._errors: tuple[type[BaseException], ...] = (
            ValueError, RuntimeError, UnexpectedResponse, ResponseHandlingException, OSError,
        )
        self.settings = settings
        self.collection = settings.collection
        self.local = not settings.url
        factory = client_factory or QdrantClient
        if settings.url:
            kwargs: dict[str, Any] = {"url": settings.url, "api_key": settings.api_key, "timeout": settings.timeout}
            self.target = settings.url
        elif settings.location:
            kwargs = {"location": settings.location}
            self.target = settings.location
        else:
            folder = Path(settings.path).expanduser() if settings.path else context.data_dir / "qdrant"
            folder.mkdir(parents=True, exist_ok=True)
            kwargs = {"path": str(folder)}
            self.target = str(folder)
        # Local mode is a single-process store; a server client talks HTTP and takes concurrent calls.
        self._lock: Any = threading.RLock() if self.local else _NoLock()
        try:
            self.client = factory(**kwargs)
        except RuntimeError as exc:  # the local folder is locked by another client
            raise VectorStoreError(f"cannot open Qdrant at {self.target}: {exc}") from exc
        except self._errors as exc:
            raise VectorStoreError(f"cannot create a Qdrant client for {self.target}: {exc}") from exc
        self._signature: str | None = None
        self._quantization = "none"
        self._dimensions: int | None = None
        self._shard_keys: set[str] = set()
        self._closed = False
        self.centers = TenantCenters(self._tenant_mean, self.count, check_seconds=settings.center_check_seconds)
        with self._call("read the collection"):
            self._load_existing()

    # -- plumbing ---------------------------------------------------------------------------------------

    @contextmanager
    def _call(self, what: str) -> Iterator[None]:
        """Serialise local-mode calls and map client errors to :class:`VectorStoreError`."""
        if self._closed:
            raise VectorStoreError("the qdrant store is closed")
        with self._lock, warnings.catch_warnings():
            # Local mode warns that it ignores payload indexes and search params; that is documented.
            warnings.filterwarnings("ignore", category=UserWarning)
            try:
                yield
            except MemrouteError:
                raise
            except self._errors as exc:
                raise VectorStoreError(f"qdrant failed to {what} ({self.target}): {exc}") from exc

    def _load_existing(self) -> None:
        if not self.client.collection_exists(self.collection):
            return
        config = self.client.get_collection(self.collection).config
        metadata = getattr(config, "metadata", None) or {}
        self._signature = metadata.get(META_SIGNATURE)
        self._quantization = metadata.get(META_QUANTIZATION, "none")
        vectors = config.params.vectors
        self._dimensions = getattr(vectors, "size", None)

    # -- lifecycle --------------------------------------------------------------------------------------

    def bind(self, signature: EmbeddingSignature) -> bool:
        if not isinstance(signature, EmbeddingSignature):
            raise VectorStoreError(f"bind() takes an EmbeddingSignature, got {type(signature).__name__}")
        if signature.dimensions < 1 or signature.dimensions > 65_536:
            raise VectorStoreError(f"cannot index {signature.dimensions}-d vectors")
        quantization = self.settings.quantization or _FROM_SIGNATURE.get(signature.quantization)
        if quantization not in QUANTIZATIONS:
            raise VectorStoreError(f"qdrant cannot quantise to {signature.quantization!r} (none, int8, binary)")
        wanted = str(signature)
        with self._call("bind the collection"):
            exists = self.client.collection_exists(self.collection)
            if exists:
                self._load_existing()
                if self._signature is None:
                    raise VectorStoreError(
                        f"collection {self.collection!r} exists but was not created by memroute; "
                        "set [vectors.options.qdrant] collection to another name"
                    )
                if (self._signature == wanted and self._quantization == quantization
                        and self._dimensions == signature.dimensions):
                    return True
                self.client.delete_collection(self.collection)
                self._shard_keys.clear()
                self.centers.clear()
            self._create(wanted, quantization, signature.dimensions)
            return not exists

    def _create(self, signature: str, quantization: str, dimensions: int) -> None:
        m = self._m
        quantization_config: Any = None
        if quantization == "int8":
            quantization_config = m.ScalarQuantization(
                scalar=m.ScalarQuantizationConfig(type=m.ScalarType.INT8, quantile=0.99, always_ram=True))
        elif quantization == "binary":
            quantization_config = m.BinaryQuantization(binary=m.BinaryQuantizationConfig(always_ram=True))
        extra: dict[str, Any] = {}
        if self.settings.shard_key_by_api_key:
            extra["sharding_method"] = m.ShardingMethod.CUSTOM
        self.client.create_collection(
            self.collection,
            vectors_config=m.VectorParams(size=dimensions, distance=m.Distance.COSINE),
            quantization_config=quantization_config,
            metadata={META_SIGNATURE: signature, META_QUANTIZATION: quantization},
            **extra,
        )
        # Indexes before any data (Qdrant's advice); api_key_id is the tenant key: every query filters on it.
        self.client.create_payload_index(
            self.collection, "api_key_id",
            field_schema=m.KeywordIndexParams(type=m.KeywordIndexType.KEYWORD, is_tenant=True))
        self.client.create_payload_index(self.collection, "session_id", field_schema=m.PayloadSchemaType.KEYWORD)
        for field in ("created_at", "expires_at"):
            self.client.create_payload_index(self.collection, field, field_schema=m.PayloadSchemaType.FLOAT)
        self._signature, self._quantization, self._dimensions = signature, quantization, dimensions

    def signature(self) -> str | None:
        return self._signature

    def describe(self) -> dict[str, Any]:
        """A JSON-able description for ``memroute status`` (no api key)."""
        return {"store": self.store_name, "mode": "local" if self.local else "server", "target": self.target,
                "collection": self.collection, "signature": self._signature, "quantization": self._quantization}

    def close(self) -> None:
        if self._closed:
            return
        with self._lock:
            self._closed = True
            try:
                self.client.close()
            except Exception:  # closing is best effort; the store is unusable either way
                pass

    def _bound(self) -> int:
        if self._signature is None or self._dimensions is None:
            raise VectorStoreError("the qdrant store is not bound to an embedding signature: call bind() first")
        return self._dimensions

    # -- writes -----------------------------------------------------------------------------------------

    def _ensure_shard_key(self, api_key_id: str) -> None:
        if api_key_id in self._shard_keys:
            return
        try:
            self.client.create_shard_key(self.collection, api_key_id)
        except self._errors as exc:
            if "already exists" not in str(exc):
                raise
        self._shard_keys.add(api_key_id)

    def upsert(self, items: Sequence[VectorItem]) -> None:
        dimensions = self._bound()
        checked = check_items(items, dimensions)
        m = self._m
        points_by_shard: dict[str | None, list[Any]] = {}
        for item, memory_id, vector in checked:
            payload = {
                "api_key_id": item.api_key_id,
                "session_id": item.session_id,
                "created_at": unix_seconds(item.created_at),
                "expires_at": None if item.expires_at is None else unix_seconds(item.expires_at),
            }
            shard = item.api_key_id if self.settings.shard_key_by_api_key else None
            points_by_shard.setdefault(shard, []).append(
                m.PointStruct(id=memory_id, vector=vector.tolist(), payload=payload))
        self.centers.wrote([item.api_key_id for item, _, _ in checked])
        with self._call("upsert vectors"):
            if not self.settings.shard_key_by_api_key:
                # A memory that changed owner must leave its old place: upsert by id replaces the point.
                for start in range(0, len(points_by_shard.get(None, [])), UPSERT_BATCH):
                    self.client.upsert(self.collection, points=points_by_shard[None][start:start + UPSERT_BATCH],
                                       wait=True)
                return
            # With shard keys a point lives in its owner's shard: remove the id everywhere first.
            self.client.delete(self.collection, points_selector=m.PointIdsList(points=[c[1] for c in checked]),
                               wait=True)
            for shard, points in points_by_shard.items():
                assert shard is not None
                self._ensure_shard_key(shard)
                self.client.upsert(self.collection, points=points, wait=True, shard_key_selector=shard)

    def delete(self, memory_ids: Sequence[str]) -> None:
        if isinstance(memory_ids, str):
            raise VectorStoreError("delete() takes a sequence of ids, not one string")
        ids = [canonical_uuid(m) for m in memory_ids]
        if not ids or self._signature is None:
            return
        self.centers.wrote([None] * len(ids))
        with self._call("delete vectors"):
            self.client.delete(self.collection, points_selector=self._m.PointIdsList(points=list[Any](ids)), wait=True)

    def delete_expired(self, now: Any, retention_days: int | None = None) -> int:
        """Remove every vector that expired by ``now`` or (with ``retention_days``) was created before the
        retention cutoff; the number removed. The retention cleanup calls it, so no vector is orphaned."""
        from datetime import timedelta

        self._bound()
        m = self._m
        should: list[Any] = [m.FieldCondition(key="expires_at", range=m.Range(lte=unix_seconds(now)))]
        if retention_days is not None:
            cutoff = unix_seconds(now - timedelta(days=retention_days))
            should.append(m.FieldCondition(key="created_at", range=m.Range(lt=cutoff)))
        flt = m.Filter(should=should)
        with self._call("delete expired vectors"):
            found = self.client.count(self.collection, count_filter=flt, exact=True).count
            if found:
                self.client.delete(self.collection, points_selector=m.FilterSelector(filter=flt), wait=True)
            return int(found)

    # -- reads ------------------------------------------------------------------------------------------

    def _owner_filter(self, api_key_id: str) -> Any:
        m = self._m
        return m.FieldCondition(key="api_key_id", match=m.MatchValue(value=api_key_id))

    def query(self, vector: Any, query: SearchQuery, k: int) -> list[VectorHit]:
        if not isinstance(query, SearchQuery):
            raise VectorStoreError(f"query() takes a SearchQuery, got {type(query).__name__}")
        k = check_k(k)
        unit = check_vector(vector, self._bound(), "query vector")
        m = self._m
        must: list[Any] = [
            self._owner_filter(query.api_key_id),
            m.Filter(should=[
                m.IsNullCondition(is_null=m.PayloadField(key="expires_at")),
                m.FieldCondition(key="expires_at", range=m.Range(gt=unix_seconds(query.now))),
            ]),
        ]
        if query.session_id is not None:
            must.append(m.FieldCondition(key="session_id", match=m.MatchValue(value=query.session_id)))
        cutoff = query.created_after
        if cutoff is not None:
            must.append(m.FieldCondition(key="created_at", range=m.Range(gte=unix_seconds(cutoff))))
        params = None
        if self._quantization != "none":
            params = m.SearchParams(quantization=m.QuantizationSearchParams(
                ignore=False, rescore=True, oversampling=self.settings.oversampling))
        extra: dict[str, Any] = {}
        if self.settings.shard_key_by_api_key:
            if query.api_key_id not in self._shard_keys and not self._has_points(query.api_key_id):
                return []
            extra["shard_key_selector"] = query.api_key_id
        if not self.local:
            extra["timeout"] = self.settings.timeout
        middle = self.centers.get(query.api_key_id) if self.settings.center else None
        probe = None if middle is None else centered_probe(unit, middle)
        with self._call("query vectors"):
            response = self.client.query_points(
                self.collection, query=(unit if probe is None else probe).tolist(), query_filter=m.Filter(must=must),
                limit=k, search_params=params, with_payload=False, with_vectors=probe is not None, **extra)
        if probe is None:
            return [VectorHit(memory_id=str(point.id), score=max(-1.0, min(1.0, float(point.score))))
                    for point in response.points]
        hits = []
        for point in response.points:  # the plain cosine, for the relevance floor
            stored = np.asarray(point.vector, dtype=np.float32)
            cosine = float(stored @ unit) / max(float(np.linalg.norm(stored)), 1e-12)
            hits.append(VectorHit(memory_id=str(point.id), score=max(-1.0, min(1.0, float(point.score))),
                                  cosine=max(-1.0, min(1.0, cosine))))
        return hits

    def _tenant_mean(self, api_key_id: str) -> tuple[np.ndarray | None, int]:
        """The mean of the tenant's unit vectors and their count, scrolled from the collection."""
        dimensions = self._bound()
        total = np.zeros(dimensions, dtype=np.float64)
        n = 0
        offset = None
        extra: dict[str, Any] = {}
        if self.settings.shard_key_by_api_key:
            if api_key_id not in self._shard_keys and not self._has_points(api_key_id):
                return None, 0
            extra["shard_key_selector"] = api_key_id
        flt = self._m.Filter(must=[self._owner_filter(api_key_id)])
        with self._call("read the tenant's vectors"):
            while True:
                points, offset = self.client.scroll(self.collection, scroll_filter=flt, limit=1000, offset=offset,
                                                    with_payload=False, with_vectors=True, **extra)
                if points:
                    rows = np.asarray([p.vector for p in points], dtype=np.float32)
                    rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
                    total += rows.sum(axis=0)
                    n += len(points)
                if offset is None:
                    break
        return (None, 0) if n == 0 else ((total / n).astype(np.float32), n)

    def _has_points(self, api_key_id: str) -> bool:
        return self.count(api_key_id) > 0

    def count(self, api_key_id: str | None = None) -> int:
        if self._signature is None:
            return 0
        flt = None if api_key_id is None else self._m.Filter(must=[self._owner_filter(api_key_id)])
        with self._call("count vectors"):
            return int(self.client.count(self.collection, count_filter=flt, exact=True).count)

    def ids(self, api_key_id: str | None = None) -> set[str]:
        if self._signature is None:
            return set()
        flt = None if api_key_id is None else self._m.Filter(must=[self._owner_filter(api_key_id)])
        found: set[str] = set()
        offset = None
        with self._call("list vector ids"):
            while True:
                points, offset = self.client.scroll(self.collection, scroll_filter=flt, limit=1000, offset=offset,
                                                    with_payload=False, with_vectors=False)
                found.update(str(p.id) for p in points)
                if offset is None:
                    return found

    def health(self) -> HealthResult:
        """A real round trip: ``get_collections`` (works in local and server mode; ``readyz`` is server-only)."""
        import time

        started = time.perf_counter()
        try:
            with self._call("answer a health probe"):
                self.client.get_collections()
        except MemrouteError as exc:
            return HealthResult(ok=False, latency_ms=(time.perf_counter() - started) * 1000, error=str(exc),
                                details=self.describe())
        return HealthResult(ok=True, latency_ms=(time.perf_counter() - started) * 1000, details=self.describe())


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _factory(settings: QdrantSettings, context: ComponentContext) -> QdrantStore:
    return QdrantStore(settings, context)


@memroute.hookimpl
def memroute_vector_stores() -> Any:
    yield VectorStoreSpec(name="qdrant", factory=_factory, settings_class=QdrantSettings,
                          description=f"Qdrant (local mode or a server/cluster); {INSTALL_HINT}",
                          quantizations=frozenset(_FROM_SIGNATURE) - {"none"})
