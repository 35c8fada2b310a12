"""The REST API's request and response shapes as attrs classes; :func:`memroute.server.schema.wire_model`
turns them (and the service's own models and reports) into the pydantic models FastAPI validates with and
``/openapi.json`` documents. Field constraints sit in each field's ``metadata``."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import attrs

from memroute.models import Memory, MemoryType, Provenance, SearchHit, SearchResult

Strategy = Literal["recent", "exact", "semantic", "hybrid"]
_ID = {"max_length": 256}


@attrs.frozen(kw_only=True)
class MemoryCreate:
    """A memory to store: an upsert on (tenant, ``key``)."""

    content: str = attrs.field(metadata={"min_length": 1, "examples": ["I prefer TypeScript over JavaScript"]})
    key: str | None = attrs.field(default=None, metadata={"min_length": 1, "max_length": 512,
                                                          "examples": ["preference:typescript"]})
    """Stable upsert key; derived from the content when omitted."""
    type: MemoryType = MemoryType.FACTUAL
    session_id: str | None = attrs.field(default=None, metadata=_ID)
    """A session scope (``""`` means none, as in the reference)."""
    api_key_id: str | None = attrs.field(default=None, metadata=_ID)
    """The tenant; only an admin key may name another than its own."""
    end_user: str | None = attrs.field(default=None, metadata={"max_length": 128})
    """For an app key: the end user this request acts for (or the ``x-memroute-user`` header)."""
    metadata: dict[str, Any] = attrs.field(factory=dict)
    expires_at: datetime | None = None
    consolidate: bool = False
    """Update a memory this one restates, or supersede the memory with the same key, instead of adding a
    second one (docs/pipeline.md, "Consolidation")."""
    agent: str | None = attrs.field(default=None, metadata={"max_length": 128, "examples": [None]})
    """Tag the memory with an agent (``metadata.agent``): searches and lists can keep one agent's only."""


@attrs.frozen(kw_only=True)
class MemoryUpdate:
    """Fields to change (``metadata`` replaces the stored object; ``null`` clears session / expiry)."""

    type: MemoryType | None = None
    key: str | None = attrs.field(default=None, metadata={"min_length": 1, "max_length": 512})
    content: str | None = attrs.field(default=None, metadata={"min_length": 1})
    metadata: dict[str, Any] | None = None
    session_id: str | None = attrs.field(default=None, metadata=_ID)
    expires_at: datetime | None = None


@attrs.frozen(kw_only=True)
class MemoryCreated:
    success: bool
    id: str
    """The memory's id (the reference put the whole memory here; it is under ``memory`` now)."""
    memory: Memory


@attrs.frozen(kw_only=True)
class MemoryEnvelope:
    memory: Memory


@attrs.frozen(kw_only=True)
class MemoryUpdated:
    success: bool
    memory: Memory


@attrs.frozen(kw_only=True)
class Success:
    success: bool


@attrs.frozen(kw_only=True)
class CacheCounters:
    hits: int
    misses: int


@attrs.frozen(kw_only=True)
class ListStats:
    """The tenant's statistics (all its memories, not only the filtered page)."""

    total: int
    by_type: dict[str, int]
    tokens_used: int
    hit_rate: float
    """Embedding-cache hit rate of this process (the reference's counter measured an unused cache)."""
    cache_stats: CacheCounters


@attrs.frozen(kw_only=True)
class MemoryPage:
    data: tuple[Memory, ...]
    total: int
    """Memories matching the filters."""
    page: int
    limit: int
    total_pages: int
    stats: ListStats


@attrs.frozen(kw_only=True)
class SearchRequest:
    query: str = attrs.field(metadata={"max_length": 4096, "examples": ["which language do I prefer?"]})
    strategy: Strategy | None = None
    """Default: the configured strategy."""
    limit: int | None = attrs.field(default=None, metadata={"ge": 1, "le": 100})
    max_tokens: int | None = attrs.field(default=None, metadata={"ge": 0, "le": 16000})
    session_id: str | None = attrs.field(default=None, metadata=_ID)
    api_key_id: str | None = attrs.field(default=None, metadata=_ID)
    end_user: str | None = attrs.field(default=None, metadata={"max_length": 128})
    """For an app key: the end user this request acts for (or the ``x-memroute-user`` header)."""
    agent: str | None = attrs.field(default=None, metadata={"max_length": 128})
    """Only memories tagged with this agent."""


SearchResponse = SearchResult


@attrs.frozen(kw_only=True)
class PreviewRequest:
    query: str = attrs.field(metadata={"min_length": 1, "max_length": 4096, "examples": ["typescript"]})
    strategy: Strategy | None = None
    """Default: the ``[memory] strategy`` in effect (runtime settings included)."""
    max_tokens: int | None = attrs.field(default=None, metadata={"ge": 1, "le": 16000})
    """The token budget; default: the ``[memory] max_tokens`` in effect."""
    api_key_id: str | None = attrs.field(default=None, metadata=_ID)
    end_user: str | None = attrs.field(default=None, metadata={"max_length": 128})
    """For an app key: the end user this request acts for (or the ``x-memroute-user`` header)."""
    limit: int = attrs.field(default=20, metadata={"ge": 1, "le": 100})
    session_id: str | None = attrs.field(default=None, metadata=_ID)
    """Only this session's memories (``""`` or absent: every session of the tenant)."""


@attrs.frozen(kw_only=True)
class SummarizeRequest:
    older_than_days: int = attrs.field(default=30, metadata={"ge": 1, "le": 365})
    api_key_id: str | None = attrs.field(default=None, metadata=_ID)
    end_user: str | None = attrs.field(default=None, metadata={"max_length": 128})
    """For an app key: the end user this request acts for (or the ``x-memroute-user`` header)."""
    dry_run: bool = True
    """A dry run by default (the reference's empty body deleted across every key)."""


@attrs.frozen(kw_only=True)
class SummarizeResponse:
    candidates: tuple[str, ...]
    """Ids of the memories that are (or would be) replaced."""
    total_tokens: int
    deleted_count: int
    summary_id: str | None
    summary_ids: tuple[str, ...]
    summary_preview: str
    dry_run: bool


@attrs.frozen(kw_only=True)
class ReindexRequest:
    force: bool = False
    """Re-embed every memory, not only those without a current vector."""
    api_key_id: str | None = attrs.field(default=None, metadata=_ID)
    """The tenant to reindex. A tenant key always reindexes its own tenant only; an admin key reindexes the
    whole deployment unless it names one."""


@attrs.frozen(kw_only=True)
class ReindexStatus:
    """A background reindex: of one tenant, or (admin) of the whole deployment; one at a time for each, readable
    from every process."""

    api_key_id: str | None = None
    """The tenant reindexed; ``None``: the whole deployment."""
    state: Literal["idle", "running", "done", "failed"]
    started: bool
    force: bool
    done: int
    pending: int
    errors: int
    started_at: str | None
    finished_at: str | None
    error: str | None


@attrs.frozen(kw_only=True)
class ClearRequest:
    api_key_id: str | None = attrs.field(default=None, metadata=_ID)
    end_user: str | None = attrs.field(default=None, metadata={"max_length": 128})
    """For an app key: the end user this request acts for (or the ``x-memroute-user`` header)."""
    type: MemoryType | None = None
    session_id: str | None = attrs.field(default=None, metadata=_ID)
    older_than_days: int | None = attrs.field(default=None, metadata={"ge": 0, "le": 36500})
    """Keep memories created in the last N days."""
    dry_run: bool = False


@attrs.frozen(kw_only=True)
class ClearResponse:
    api_key_id: str
    dry_run: bool
    matched: int
    deleted: int
    ids: tuple[str, ...]


@attrs.frozen(kw_only=True)
class ImportResponse:
    imported: int
    """Memories written (all of the file, or none: a bad line is a 422 naming it and nothing is written)."""
    api_key_id: str


@attrs.frozen(kw_only=True)
class EmbeddingModelInfo:
    id: str
    name: str
    dimensions: int | None


@attrs.frozen(kw_only=True)
class EmbeddingModels:
    models: tuple[EmbeddingModelInfo, ...]


@attrs.frozen(kw_only=True)
class EmbeddingProvider:
    provider: str
    has_key: bool
    """Whether the source can run as configured (a remote source needs its key)."""
    active: bool
    models: tuple[EmbeddingModelInfo, ...]


@attrs.frozen(kw_only=True)
class EmbeddingProviders:
    providers: tuple[EmbeddingProvider, ...]


@attrs.frozen(kw_only=True)
class PipelineHealth:
    working: bool
    """Extraction and the primary backend both answer."""
    latency_ms: float
    error: str | None
    backends: tuple[dict[str, Any], ...]


@attrs.frozen(kw_only=True)
class MemorySettingsView:
    """The ``[memory]`` settings in effect (file configuration + runtime overrides), reference names."""

    enabled: bool
    max_tokens: int
    retention_days: int
    """The retrieval window in days (0: none); it hides older memories, never deletes them."""
    delete_after_days: int
    """Memories older than this many days are deleted by prune (0: never)."""
    strategy: str
    typed_decay_enabled: bool
    typed_decay_episodic_days: int
    typed_decay_access_immunity: int
    overrides: tuple[str, ...]
    """The fields set at run time (``PUT``), which win over ``memroute.toml`` in every process."""


@attrs.frozen(kw_only=True)
class MemorySettingsUpdate:
    """Runtime changes; unknown fields are refused, ``null`` drops a field's override. Backends, embedding and vector
    store stay in the file."""

    enabled: bool | None = None
    max_tokens: int | None = attrs.field(default=None, metadata={"ge": 0, "le": 16000})
    retention_days: int | None = attrs.field(default=None, metadata={"ge": 0, "le": 36_500})
    delete_after_days: int | None = attrs.field(default=None, metadata={"ge": 0, "le": 36_500})
    strategy: Literal["recent", "exact", "semantic", "hybrid"] | None = None
    typed_decay_enabled: bool | None = None
    typed_decay_episodic_days: int | None = attrs.field(default=None, metadata={"ge": 1, "le": 3650})
    typed_decay_access_immunity: int | None = attrs.field(default=None, metadata={"ge": 0, "le": 1_000_000})


# --- /api/settings/qdrant --------------------------------------------------------------------------------

@attrs.frozen(kw_only=True)
class QdrantView:
    """The Qdrant settings in effect (``[vectors]`` with the runtime overrides of ``PUT``) and, when this
    process's vector store is Qdrant, where it is and what it holds. Never the API key."""

    enabled: bool
    """Qdrant is the vector store (stored: every process follows within about a second)."""
    active: bool
    """This process's vector store is Qdrant now."""
    switching: bool
    """This process has not yet switched to the stored settings."""
    host: str | None
    port: int | None
    collection: str | None
    embedding_model: str | None
    """The deployment's embedding model (``[embedding]``): memroute embeds for every vector store."""
    quantization: str | None
    has_api_key: bool
    api_key_masked: str | None
    """``"***"`` plus the key's last 4 characters (``"***"`` alone for a key under 12 characters)."""
    mode: str | None
    """``local`` (a folder or ``:memory:``) or ``server`` (``url``)."""
    target: str | None
    signature: str | None
    """The embedding signature the collection was built for."""
    available: bool
    rows: int
    pending_reindex: int
    last_error: str | None
    overrides: tuple[str, ...]
    """The fields set at run time (``PUT``) rather than in ``memroute.toml``."""


@attrs.frozen(kw_only=True)
class QdrantSettingsUpdate:
    """Runtime changes of the Qdrant connection; unknown fields are refused, ``null`` drops a field's override.
    A new target is probed (built, bound and searched) before anything is stored."""

    enabled: bool | None = None
    """Qdrant on (the store becomes ``qdrant``) or off (the configured store, or ``auto``)."""
    host: str | None = attrs.field(default=None, metadata={"min_length": 1, "max_length": 2048,
                                                             "examples": ["qdrant.internal", "https://q.example:6333"]})
    """A host name or an http(s) URL; ``http://`` is assumed and ``port`` (6333) added when it has none."""
    port: int | None = attrs.field(default=None, metadata={"ge": 1, "le": 65535})
    collection: str | None = attrs.field(default=None, metadata={"min_length": 1, "max_length": 255,
                                                                   "pattern": r"^[A-Za-z0-9._-]+$"})
    embedding_model: str | None = attrs.field(default=None, metadata={"min_length": 1, "max_length": 512})
    """Accepted only when it names the deployment's embedding model (memroute embeds for Qdrant)."""
    quantization: Literal["none", "int8", "binary"] | None = None
    api_key: str | None = attrs.field(default=None, metadata={"max_length": 4096})
    """``""`` removes the key (also one set in ``memroute.toml``); never echoed back."""


@attrs.frozen(kw_only=True)
class QdrantSearchRequest:
    query: str = attrs.field(metadata={"min_length": 1, "max_length": 4096, "examples": ["green tea"]})
    top_k: int = attrs.field(default=5, metadata={"ge": 1, "le": 50})
    api_key_id: str | None = attrs.field(default=None, metadata=_ID)
    """The tenant (admin keys only; the reference's test search had no tenant and searched every key)."""
    end_user: str | None = attrs.field(default=None, metadata={"max_length": 128})
    """For an app key: the end user this request acts for (or the ``x-memroute-user`` header)."""


@attrs.frozen(kw_only=True)
class QdrantSearchResponse:
    ok: bool
    """True when the vector leg ran on Qdrant (False: why is in ``error``; nothing fell back silently)."""
    results: tuple[SearchHit, ...]
    provenance: Provenance
    error: str | None


@attrs.frozen(kw_only=True)
class QdrantCleanupRequest:
    api_key_id: str | None = attrs.field(default=None, metadata=_ID)
    end_user: str | None = attrs.field(default=None, metadata={"max_length": 128})
    """For an app key: the end user this request acts for (or the ``x-memroute-user`` header)."""
    dry_run: bool = False


@attrs.frozen(kw_only=True)
class QdrantCleanupResponse:
    ok: bool
    deleted_count: int
    """Memories really deleted, each with its Qdrant point (0 in a dry run)."""
    candidates: tuple[str, ...]
    """Ids past ``deleteAfterDays`` or expired."""
    reasons: dict[str, int]
    retention_days: int
    """The retrieval window in effect (runtime settings included; 0: none). It deletes nothing."""
    dry_run: bool
