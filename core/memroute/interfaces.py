"""The abstract component interfaces plugins implement: storage backends, embedding sources, vector stores
and fact extractors. Each has a small abstract core and a concrete surface built on it."""

from __future__ import annotations

import abc
import builtins
import contextlib
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

import attrs

from memroute.errors import ConflictError, MemrouteError, ValidationError
from memroute.models import (
    BackendHit,
    HealthResult,
    HistoryEntry,
    HistoryEvent,
    ListFilter,
    ListPage,
    Memory,
    MemoryPatch,
    MemoryType,
    NewMemory,
    SearchQuery,
)

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "AccessRecorder",
    "DataVersions",
    "MemoryAccess",
    "RerankResult",
    "Reranker",
    "BackendCapabilities",
    "ComponentContext",
    "EmbeddingSignature",
    "EmbeddingSource",
    "BackgroundExtractor",
    "ExtractedFact",
    "Extractor",
    "ObservedTurn",
    "TenantMemories",
    "MemoryBackend",
    "MemoryHistory",
    "HistoryNote",
    "RecordedImports",
    "RecordedWrites",
    "ReindexMarkers",
    "TenantRoutedDeletes",
    "TenantRouting",
    "tenant_routed",
    "VectorHit",
    "VectorItem",
    "VectorStore",
]


@attrs.frozen(kw_only=True)
class ComponentContext:
    """What memroute hands a plugin factory besides its own options."""

    instance_name: str
    """The configured instance name (``[backends.NAME]``), or the component name for singletons."""
    data_dir: Path
    """memroute's data directory: where a plugin keeps local files it owns."""
    prepare_connection: Callable[[Any], None] = lambda connection: None
    """Runs every ``memroute_prepare_connection`` hook on an apsw connection the plugin opens."""
    primary: MemoryBackend | None = None
    """The primary backend, for a vector store that can keep its index next to the memories (the ``pgvector``
    store uses the ``postgres`` primary's database and connection pool). ``None`` for backends."""
    settings: Any = None
    """The deployment's whole :class:`~memroute.config.settings.MemrouteSettings`, for an extractor that reuses
    another section (the ``llm`` extractor's ``use_proxy_upstream`` reads ``[proxy.openai]``). ``None`` for
    backends, embedding sources and vector stores."""


# --- storage backends ----------------------------------------------------------------------------------

@attrs.frozen(kw_only=True)
class BackendCapabilities:
    """What a backend can do. The conformance suite skips what a backend declares it cannot do."""

    keyword_ranking: bool = True
    """``search`` ranks by keyword relevance (not just substring presence)."""
    sessions: bool = True
    expiry: bool = True
    ordering: bool = True
    """``list`` honours ``order_by``/``order_dir``."""
    large_content: bool = True
    """Content of 100 KB round-trips."""
    persistent: bool = True
    """Data survives ``close()`` and re-open with the same options."""
    bounded_latency: bool = False
    """Every call returns within a bound the backend enforces itself (a local file with a busy timeout), so
    the manager may call it on the caller's thread instead of a worker thread with a timeout."""
    reindex_markers: bool = False
    """The backend implements :class:`ReindexMarkers` (a ``needs_reindex`` flag set in the write's own
    transaction). As the primary, the indexer then reads its work queue from those flags, through the
    manager (:meth:`~memroute.routing.manager.MemoryManager.reindex_markers`)."""
    access_tracking: bool = False
    """The backend implements :class:`AccessRecorder` (it stores ``access_count`` / ``last_accessed_at``). As
    the primary it then receives the batched access telemetry of ``augment`` and ``search``; a backend
    without it simply keeps 0 / ``None`` (nothing else changes)."""
    data_versions: bool = False
    """The backend implements :class:`DataVersions` (a per-tenant counter every process's writes move). As the
    primary it lets ``augment`` reuse a retrieval for a repeated message (:mod:`memroute.pipeline.augment_cache`)."""
    tenant_routing: bool = False
    """The backend implements :class:`TenantRouting`: by-id operations that also name the tenant. The manager
    then uses them wherever the caller knows the tenant (every service call), so a database sharded by
    ``api_key_id`` (PostgreSQL with Citus) runs each on the tenant's one shard."""
    batch_create: bool = False
    """``create_many`` writes a batch in one transaction: atomic for a failure of the backend (it raises and
    stores none of the batch), per item for an item's own error (returned in its place, the others stored).
    The service's group commit (:mod:`memroute.deployment.group_commit`) then writes concurrent adds in one call; a
    backend without it gets them one ``create`` at a time."""
    history: bool = False
    """The backend implements :class:`MemoryHistory`: it keeps the history of every memory's changes (the
    service records each change through the manager, on the first backend that keeps history; reads merge every
    backend that keeps it). A backend without it keeps none, and ``history`` reads say so."""


class MemoryBackend(abc.ABC):
    """A place memories are stored. Implementations must be safe to call from several threads.

    Every method takes or returns memroute models; errors are memroute errors
    (:class:`~memroute.errors.BackendError` and subclasses). Tenant isolation is the backend's first
    duty: no call for one ``api_key_id`` may return, change or delete another's memory.
    """

    capabilities: BackendCapabilities = BackendCapabilities()
    type_name: str = "backend"
    """The plugin name (the config ``type``)."""
    in_process: bool | None = None
    """``True`` when the component does its work in this Python process, holding the GIL for much of it (a
    SQLite file, sqlite-vec, a local model); ``False`` when it mostly waits on another process or the network
    with the GIL released (an HTTP API, PostgreSQL, a Qdrant server). ``None``: not declared (counts as
    ``False``). The async API sizes its thread pool from it (:func:`memroute.aio.auto_workers`)."""

    def __init__(self, name: str) -> None:
        self.name = name

    # lifecycle
    def initialize(self) -> None:  # noqa: B027 - optional hook
        """Open connections, create schema. Called once before use; must be idempotent."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources. Safe to call twice."""

    # CRUD
    @abc.abstractmethod
    def create(self, new: NewMemory) -> Memory:
        """Upsert on ``(api_key_id, key)`` and return the stored memory (see :class:`NewMemory`)."""

    @abc.abstractmethod
    def put(self, memory: Memory) -> None:
        """Store exactly ``memory`` (id and timestamps included), replacing a memory with the same id or
        the same ``(api_key_id, key)``. Idempotent: replication and import use it."""

    def create_many(self, news: Sequence[NewMemory]) -> builtins.list[Memory | MemrouteError]:
        """``create`` each of ``news`` in order, as if one after another (a later item with an earlier one's
        ``(api_key_id, key)`` upserts into it), and return one outcome per item: the stored memory, or the
        :class:`~memroute.errors.ValidationError` / :class:`~memroute.errors.ConflictError` that item met
        (the others are still stored). A backend that declares ``capabilities.batch_create`` does it in one
        transaction and raises, storing nothing, when it fails itself. This default is ``create`` in a loop
        (not atomic; the manager uses it only for backends with ``batch_create``, so it exists for
        completeness)."""
        outcomes: builtins.list[Memory | MemrouteError] = []
        for new in news:
            try:
                outcomes.append(self.create(new))
            except (ValidationError, ConflictError) as exc:
                outcomes.append(exc)
        return outcomes

    def put_many(self, memories: Sequence[Memory]) -> int:
        """``put`` each memory (bulk import); returns how many were stored. Override to write them in one
        transaction."""
        for memory in memories:
            self.put(memory)
        return len(memories)

    @abc.abstractmethod
    def get(self, memory_id: str) -> Memory | None:
        """The memory with this id, or ``None``."""

    def get_by_key(self, api_key_id: str, key: str) -> Memory | None:
        """The memory of ``api_key_id`` whose key is exactly ``key``, or ``None``. The default reads every
        page of the key search (``list`` with ``query=key``) and keeps the exact match: correct on any
        backend, but override it with an indexed lookup (the upsert needs one anyway)."""
        offset = 0
        while True:
            page = self.list(ListFilter(api_key_id=api_key_id, query=key, limit=500, offset=offset))
            found = next((m for m in page.data if m.key == key and m.api_key_id == api_key_id), None)
            if found is not None:
                return found
            offset += len(page.data)
            if not page.data or offset >= page.total:
                return None

    def get_many(self, memory_ids: Sequence[str]) -> dict[str, Memory]:
        """The memories among ``memory_ids`` that exist, by id. Override for a batched lookup."""
        found = {}
        for memory_id in memory_ids:
            memory = self.get(memory_id)
            if memory is not None:
                found[memory_id] = memory
        return found

    @abc.abstractmethod
    def update(self, memory_id: str, patch: MemoryPatch) -> Memory | None:
        """Apply ``patch``; the updated memory, or ``None`` when there is no such id. Changing ``key`` to
        one another memory of the same owner holds raises :class:`~memroute.errors.ConflictError`."""

    @abc.abstractmethod
    def delete(self, memory_id: str) -> bool:
        """Delete; ``False`` when there was no such id."""

    @abc.abstractmethod
    def list(self, filter: ListFilter) -> ListPage:
        """A page of memories matching ``filter`` with the total and per-type counts of all matches."""

    @abc.abstractmethod
    def search(self, query: SearchQuery) -> builtins.list[BackendHit]:
        """The backend's own retrieval leg, best first, at most ``query.limit`` hits, all passing
        ``query.admits``. Strategy ``exact`` ranks by recency (newest first); any other strategy ranks by
        keyword relevance to ``query.text`` (vector legs are memroute's, above the backend)."""

    def iter_all(self, api_key_id: str | None = None, batch: int = 500) -> Iterable[Memory]:
        """Every memory (of one tenant, or all), oldest first. Export and reindexing use it."""
        offset = 0
        while True:
            page = self.list(
                ListFilter(api_key_id=api_key_id, limit=batch, offset=offset, order_by="created_at", order_dir="asc")
            )
            yield from page.data
            offset += len(page.data)
            if not page.data or offset >= page.total:
                return

    def tenants(self) -> builtins.list[str]:
        """Every ``api_key_id`` that holds at least one memory, sorted (operators and the dashboard). The
        default scans :meth:`iter_all`; override it with an index lookup."""
        return sorted({memory.api_key_id for memory in self.iter_all(None)})

    def health(self) -> HealthResult:
        """Probe the backend for real (no cached answer). The default times a ``get`` of a random id."""
        return HealthResult.timed(lambda: self.get("00000000-0000-4000-8000-000000000000"))

    def describe(self) -> dict[str, Any]:
        """A JSON-able description for ``memroute status`` (no secrets)."""
        return {"name": self.name, "type": self.type_name}

    def identity(self) -> str:
        """A stable string naming the data this backend holds (a file path, a URL + folder, ...). memroute
        keeps the vector index and the outbox of a primary in a state directory derived from it, so two
        databases never share an index. No secrets."""
        return f"{self.type_name}:{self.name}"


@runtime_checkable
class ReindexMarkers(Protocol):
    """What a backend declaring ``capabilities.reindex_markers`` implements: it flags rows needing a vector
    **in the same transaction as the write** (the SQLite backend's ``needs_reindex`` column). With it the
    indexer needs no separate enqueue on the write path, and no crash can separate a write from its flag."""

    def pending_reindex(self, limit: int = 100, api_key_id: str | None = None) -> builtins.list[Memory]: ...

    def count_pending_reindex(self, api_key_id: str | None = None) -> int: ...

    def mark_indexed(self, memories: Iterable[Memory | str]) -> int: ...

    def mark_all_for_reindex(self) -> int: ...


@runtime_checkable
class TenantRouting(Protocol):
    """What a backend declaring ``capabilities.tenant_routing`` implements: :meth:`MemoryBackend.get`,
    ``get_many``, ``update`` and ``delete`` with the tenant named. Each acts only on memories of
    ``api_key_id``: another tenant's memory with the id is "no such id", exactly as if it did not exist."""

    def get_owned(self, api_key_id: str, memory_id: str) -> Memory | None: ...

    def get_many_owned(self, api_key_id: str, memory_ids: Sequence[str]) -> dict[str, Memory]: ...

    def update_owned(self, api_key_id: str, memory_id: str, patch: MemoryPatch) -> Memory | None: ...

    def delete_owned(self, api_key_id: str, memory_id: str) -> bool: ...


_ROUTING_CLASSES: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()
"""Per backend class, whether it implements :class:`TenantRouting` (the check, a runtime protocol's, looks at every
member: 20-40 us a call, paced, on every read of a search)."""


def tenant_routed(backend: MemoryBackend) -> TenantRouting | None:
    """``backend`` as a :class:`TenantRouting` when it declares and implements it, else ``None``. Whether it
    implements it is decided once per class (the protocol's methods are the class's, as with every built-in and
    template backend)."""
    if not backend.capabilities.tenant_routing:
        return None
    kind = type(backend)
    implements = _ROUTING_CLASSES.get(kind)
    if implements is None:
        implements = _ROUTING_CLASSES[kind] = isinstance(backend, TenantRouting)
    return cast(TenantRouting, backend) if implements else None


@runtime_checkable
class TenantRoutedDeletes(Protocol):
    """A :class:`VectorStore` whose delete can also name the tenant. The indexer knows the owner of every id it
    deletes and then uses this, so a store sharded by ``api_key_id`` (pgvector on Citus) deletes on the tenant's
    shard only; vectors of ``memory_ids`` held by another tenant are left alone."""

    def delete_owned(self, api_key_id: str, memory_ids: Sequence[str]) -> None: ...


@runtime_checkable
class MemoryHistory(Protocol):
    """What a backend declaring ``capabilities.history`` implements: an append-only log of history entries per
    memory, kept after the memory is deleted, readable only by the memory's tenant."""

    def append_history(self, entries: Sequence[HistoryEntry]) -> None:
        """Store ``entries`` (idempotent by entry id: appending an entry again changes nothing)."""
        ...

    def history(self, api_key_id: str, memory_id: str) -> builtins.list[HistoryEntry]:
        """The entries of ``memory_id`` **of ``api_key_id``**, oldest first (another tenant's: none)."""
        ...

    def purge_history(self, api_key_id: str | None, *, before: datetime) -> int:
        """Remove the whole history of each memory of ``api_key_id`` (every tenant when ``None``) that no longer
        exists and whose last entry (its deletion) was recorded before ``before``; the history of a memory that
        exists is never touched. Returns how many entries were removed."""
        ...


@attrs.frozen(kw_only=True)
class HistoryNote:
    """What a write records in its memory's history besides the change itself: who made it (``actor``) and the
    event, when not the one the change implies (``None``: created or updated, from what the write finds)."""

    actor: str
    event: HistoryEvent | None = None


@runtime_checkable
class RecordedWrites(Protocol):
    """A backend keeping history (capability ``history``) that records a write's history entry **in the write's
    own transaction**: a crash or a failed statement leaves both the change and its entry, or neither. The
    service adds, updates and deletes through it when the primary backend has it
    (``MemoryManager.create_recorded`` / ``update_recorded`` / ``delete_recorded``); other backends get their
    entries by :meth:`MemoryHistory.append_history` after the write. Each entry is
    :meth:`HistoryEntry.of_change <memroute.models.HistoryEntry.of_change>` of the row as the transaction found it
    and as it left it, with the note's actor and event (none when content, key and type are unchanged)."""

    def create_many_recorded(self, news: Sequence[NewMemory],
                             notes: Sequence[HistoryNote]) -> builtins.list[Memory | MemrouteError]:
        """:meth:`MemoryBackend.create_many`, and in the same transaction each stored item's entry (what the
        upsert replaced, what it stored, ``notes[i]``)."""
        ...

    def update_recorded(self, api_key_id: str, memory_id: str, patch: MemoryPatch,
                        note: HistoryNote) -> Memory | None:
        """:meth:`TenantRouting.update_owned`, and its entry in the same transaction."""
        ...

    def delete_recorded(self, api_key_id: str, memory_id: str, note: HistoryNote) -> bool:
        """:meth:`TenantRouting.delete_owned`, and its entry (what the memory said) in the same transaction."""
        ...


@runtime_checkable
class RecordedImports(Protocol):
    """A backend keeping history that writes a bulk import's history entries **in the import's own transaction**
    (``memroute import``): the memories and their ``import`` entries are committed together, or neither. Other
    backends get the entries by :meth:`MemoryHistory.append_history` after the write."""

    def put_many_recorded(self, memories: Sequence[Memory], entries: Sequence[HistoryEntry]) -> int:
        """:meth:`MemoryBackend.put_many`, and ``entries`` inserted in the same transaction (they were made from
        the rows the import read before writing)."""
        ...


@attrs.frozen(kw_only=True)
class MemoryAccess:
    """Accesses of one memory, coalesced: ``count`` accesses, the latest at ``at`` (aware UTC)."""

    count: int
    at: datetime


@runtime_checkable
class AccessRecorder(Protocol):
    """What a backend declaring ``capabilities.access_tracking`` implements."""

    def record_access(self, api_key_id: str, accesses: Mapping[str, MemoryAccess]) -> int:
        """For each memory id **of ``api_key_id``** in ``accesses``: ``access_count += count`` and
        ``last_accessed_at = at`` unless it already holds a later time (batches from several processes may land
        out of order). Ids that are missing or belong to another tenant are skipped, never touched. Returns the
        rows updated. Must not change ``updated_at``, the keyword index or the vectors (telemetry is not an
        edit)."""
        ...


@runtime_checkable
class DataVersions(Protocol):
    """What a backend declaring ``capabilities.data_versions`` implements."""

    def data_version(self, api_key_id: str) -> int:
        """A number that changes whenever anything a search of ``api_key_id`` depends on changes, whichever
        process wrote it: a memory of the tenant created, deleted, or changed in its content, key, type,
        session, expiry, creation time, owner or vector state (``needs_reindex``). Access telemetry,
        ``updated_at`` and metadata need not move it (a search does not read them). Cheap: it is read on
        every ``augment``."""
        ...


# --- embedding -----------------------------------------------------------------------------------------

@attrs.frozen(kw_only=True)
class EmbeddingSignature:
    """Identifies the vectors an index holds: ``source:model:dim:normalisation:quantisation``."""

    source: str
    model: str
    dimensions: int
    normalization: str = "l2"
    quantization: str = "float32"

    def __str__(self) -> str:
        return f"{self.source}:{self.model}:{self.dimensions}:{self.normalization}:{self.quantization}"

    def with_quantization(self, quantization: str) -> EmbeddingSignature:
        return attrs.evolve(self, quantization=quantization)


class EmbeddingSource(abc.ABC):
    """Turns text into L2-normalised float32 vectors. Implement ``embed_batch``; the rest is built on it."""

    source: str = "embedding"
    model: str = ""
    dimensions: int | None = None
    """Known in advance, or measured from the first vector."""
    fusion_keyword_weight: float | None = None
    """How much hybrid search should trust the keyword leg next to this source's vectors (see
    docs/retrieval.md, "Fusion"), calibrated by the source's author on the quality benchmark's dev split and
    kept only if held-out questions confirm it; ``None`` means memroute's default (1.0)."""
    relevance_calibration: tuple[float, float, float, float] | None = None
    """The coefficients ``(bias, cosine, coverage, gap)`` of the logistic model that turns this source's
    cosines into a relevance in [0, 1] (:mod:`memroute.retrieval.relevance`), as ``python -m
    memroute.bench.calibrate`` fits them on the quality benchmark's dev split (it gives the gap no weight:
    0.0); ``None`` means memroute's default, fitted for all-MiniLM-L6-v2. A cosine means different things
    to different models: a static model's answer may sit at 0.2 where a transformer's sits at 0.5."""
    query_content_words: bool = False
    """Embed only a query's content words (stop words removed, :func:`memroute.retrieval.fusion.keyword_query`).
    Right for a bag-of-tokens model, where "what", "does" and "she" pull a question toward every chat turn
    that has them; wrong for a contextual model, which reads the whole sentence. Memories are embedded whole."""
    in_process: bool | None = None
    """``True`` when the component does its work in this Python process, holding the GIL for much of it (a
    SQLite file, sqlite-vec, a local model); ``False`` when it mostly waits on another process or the network
    with the GIL released (an HTTP API, PostgreSQL, a Qdrant server). ``None``: not declared (counts as
    ``False``). The async API sizes its thread pool from it (:func:`memroute.aio.auto_workers`)."""

    @abc.abstractmethod
    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        """A ``(len(texts), dim)`` float32 array of L2-normalised rows. Raise
        :class:`~memroute.errors.EmbeddingError` on failure."""

    def embed(self, text: str) -> np.ndarray:
        return self.embed_batch([text])[0]

    def embed_query(self, text: str) -> np.ndarray:
        """The vector of a search query, matched against memories embedded by :meth:`embed_batch`.

        The same as :meth:`embed` unless the model was trained to read the two sides differently: a
        retrieval model such as e5 embeds ``"query: ..."`` against ``"passage: ..."``, and a question
        embedded as a passage ranks its answer lower."""
        return self.embed(text)

    def signature(self) -> EmbeddingSignature:
        if self.dimensions is None:
            self.embed("dimension probe")
        assert self.dimensions is not None
        return EmbeddingSignature(source=self.source, model=self.model, dimensions=self.dimensions)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the model or HTTP session."""


# --- vector stores -------------------------------------------------------------------------------------

@attrs.frozen(kw_only=True)
class VectorItem:
    """A vector with the fields every query filters on."""

    memory_id: str
    api_key_id: str
    session_id: str | None
    created_at: datetime
    expires_at: datetime | None
    vector: Any  # a 1-D float32 numpy array


@attrs.frozen(kw_only=True)
class VectorHit:
    memory_id: str
    score: float
    """The store's similarity in [-1, 1] (higher is better): the cosine, or a store's refinement of it (the
    sqlite-vec store's centred cosine, less its hub penalty in the large tier); the ranking follows it."""
    cosine: float | None = None
    """The plain cosine when ``score`` is something else (``None``: ``score`` is the cosine). The relevance
    floor compares this one, so a store's ranking refinement never moves the floor."""


class VectorStore(abc.ABC):
    """An index of memory vectors, partitioned by owner, bound to one embedding signature at a time."""

    store_name: str = "vector-store"
    in_process: bool | None = None
    """``True`` when the component does its work in this Python process, holding the GIL for much of it (a
    SQLite file, sqlite-vec, a local model); ``False`` when it mostly waits on another process or the network
    with the GIL released (an HTTP API, PostgreSQL, a Qdrant server). ``None``: not declared (counts as
    ``False``). The async API sizes its thread pool from it (:func:`memroute.aio.auto_workers`)."""

    @abc.abstractmethod
    def bind(self, signature: EmbeddingSignature) -> bool:
        """Make the index serve ``signature``. Returns ``False`` when the stored index was built under
        another signature and was reset (every vector must be rebuilt); ``True`` when it already matched
        or was new."""

    @abc.abstractmethod
    def signature(self) -> str | None:
        """The signature the index currently holds, or ``None`` before the first ``bind``."""

    @abc.abstractmethod
    def upsert(self, items: Sequence[VectorItem]) -> None: ...

    @abc.abstractmethod
    def delete(self, memory_ids: Sequence[str]) -> None: ...

    @abc.abstractmethod
    def query(self, vector: Any, query: SearchQuery, k: int) -> list[VectorHit]:
        """The ``k`` nearest vectors **of ``query.api_key_id``** that pass the query's filters (session,
        expiry, retention), best first. ``k`` applies after the owner filter."""

    @abc.abstractmethod
    def count(self, api_key_id: str | None = None) -> int: ...

    def ids(self, api_key_id: str | None = None) -> set[str]:
        """Every indexed memory id (of one tenant, or all). Used to find memories missing a vector."""
        raise NotImplementedError

    def health(self) -> HealthResult:
        """Probe the store for real. The default times a ``count``."""
        return HealthResult.timed(lambda: self.count())

    def bulk_load(self, expected: int) -> AbstractContextManager[None]:
        """Optional hook: the indexer is about to upsert a backlog of about ``expected`` vectors (a bulk
        import, a rebuild), inside this context, in many ``upsert`` calls. A store whose index is cheaper to
        build once than to grow vector by vector (an HNSW graph in PostgreSQL) may suspend it here and build
        it on exit; queries meanwhile must still return correct results. The default does nothing."""
        del expected
        return contextlib.nullcontext()

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""


# --- extraction ----------------------------------------------------------------------------------------

@attrs.frozen(kw_only=True)
class ExtractedFact:
    key: str
    content: str
    type: MemoryType
    category: str
    metadata: dict[str, Any] = attrs.field(factory=dict, eq=False)
    extractor: str | None = attrs.field(default=None, eq=False)
    """The name of the extractor that found it (set by the pipeline when the extractor leaves it unset): the
    actor of the history entry its memory gets (``extractor:<name>``)."""


class Extractor(abc.ABC):
    """Finds facts worth remembering in a piece of conversation text."""

    @abc.abstractmethod
    def extract(self, text: str, *, source: str = "user") -> list[ExtractedFact]:
        """Facts found in ``text``; ``source`` is ``user`` or ``assistant``. Must not raise on any text."""


@attrs.frozen(kw_only=True)
class ObservedTurn:
    """One observed chat turn of one tenant, as ``observe`` hands it to a :class:`BackgroundExtractor`."""

    api_key_id: str
    session_id: str | None = None
    texts: tuple[tuple[str, str], ...] = ()
    """``(text, source)`` pairs: the user's message, and the assistant's reply when
    ``[extraction] mine_assistant`` is on."""
    stored: tuple[Memory, ...] = ()
    """What the offline extractors of the chain stored for this turn (already written)."""


class TenantMemories(Protocol):
    """One tenant's memories, as a background extractor may read and change them. Every call goes through the
    service, bound to the turn's tenant (the extractor cannot name another), so vectors, replication and
    access tracking stay right."""

    @property
    def api_key_id(self) -> str: ...

    def search(self, query: str, *, limit: int) -> list[Memory]:
        """The tenant's memories most similar to ``query``, best first (no access is counted)."""

    def add(self, *, content: str, key: str, type: MemoryType | str, metadata: Mapping[str, Any]) -> Memory:
        """Upsert on ``(tenant, key)``, in the turn's session."""

    def update(self, memory_id: str, *, content: str, metadata: Mapping[str, Any]) -> Memory | None:
        """Change a memory of the tenant; ``None`` when it has no such memory."""

    def delete(self, memory_id: str) -> bool:
        """Delete a memory of the tenant; ``False`` when it has no such memory."""


class BackgroundExtractor(Extractor):
    """An extractor whose work needs time and the tenant's existing memories: a model that reads the turn,
    proposes facts and decides against what the tenant already has (add, update, supersede or nothing).

    ``observe`` stores the offline extractors' facts first, then hands the turn to :meth:`submit`, which must
    return at once (the work runs on the extractor's own threads, never on a request's path) and never raise.
    ``extract`` still answers an explicit ``memroute extract`` (without the tenant's memories)."""

    @abc.abstractmethod
    def submit(self, turn: ObservedTurn, memories: TenantMemories) -> None:
        """Queue ``turn``; apply what is decided through ``memories`` later."""

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every submitted turn is done; ``False`` on timeout."""
        del timeout
        return True

    def status(self, api_key_id: str | None = None) -> dict[str, Any]:
        """Counters for ``memroute status`` (requests, tokens per tenant, failures by reason). No secrets. With
        ``api_key_id``: that tenant's counters only, nothing about any other tenant (a tenant key's
        ``engine-status``)."""
        del api_key_id
        return {}

    def close(self) -> None:
        """Finish or abandon queued work (bounded) and release connections."""


# --- reranking -----------------------------------------------------------------------------------------

@attrs.frozen(kw_only=True)
class RerankResult:
    """One document's new relevance: ``index`` into the documents given, ``score`` higher is better."""

    index: int
    score: float


class Reranker(abc.ABC):
    """Re-scores the top fused candidates of a search against the query (a cross-encoder, a rerank API).
    Implement ``rerank``; raise a :class:`~memroute.errors.MemrouteError` on failure (retrieval then keeps
    the fused order and says so in the result's provenance)."""

    name: str = "reranker"
    in_process: bool | None = None
    """``True`` when the component does its work in this Python process, holding the GIL for much of it (a
    SQLite file, sqlite-vec, a local model); ``False`` when it mostly waits on another process or the network
    with the GIL released (an HTTP API, PostgreSQL, a Qdrant server). ``None``: not declared (counts as
    ``False``). The async API sizes its thread pool from it (:func:`memroute.aio.auto_workers`)."""
    model: str = ""

    @abc.abstractmethod
    def rerank(self, query: str, documents: Sequence[str], *, top_n: int | None = None) -> list[RerankResult]:
        """Results best first; a document left out keeps its place after the ones returned."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the model or HTTP session."""
