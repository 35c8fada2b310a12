"""The service object ``memroute.open()`` returns: the Python API every surface (CLI, REST, MCP) wraps.

Data flows one way: surface → this service → MemoryManager → backend plugins. The service validates input,
scopes every operation to its tenant, generates ids and keys, returns typed reports
(:mod:`memroute.reports`), and is the composition root: it builds the backends, the manager, the retrieval
engine and the conversation pipeline (which works against the narrow
:class:`~memroute.pipeline.ports.MemoryStore` port this class satisfies). The whole public API lives here
with its docstrings, which is why this module runs a little past 600 lines.
"""

from __future__ import annotations

import builtins
import hashlib
import re
import threading
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

import attrs

from memroute.components import build_backend
from memroute.errors import ConfigError, ValidationError
from memroute.interfaces import EmbeddingSource, ExtractedFact, MemoryBackend, VectorStore
from memroute.limits import InputLimits
from memroute.manager import MemoryManager
from memroute.models import (
    ListFilter,
    ListPage,
    Memory,
    MemoryPatch,
    MemoryType,
    NewMemory,
    SearchHit,
    SearchQuery,
    SearchResult,
    check_storable,
    is_memory_id,
    require_key,
    require_memory_id,
    require_session,
    require_tenant,
    require_type,
    resolve_strategy,
    utcnow,
)
from memroute.plugins import MemroutePluginManager, get_plugin_manager
from memroute.reports import (
    AugmentReport,
    BackendsStatus,
    CacheStats,
    ClearReport,
    HealthReport,
    MaintenanceReport,
    MemoryStats,
    MemoryStatus,
    ReindexReport,
    RetrievalPreview,
    StatusReport,
)
from memroute.retrieval.build import build_retrieval
from memroute.settings import MemrouteSettings, load_settings
from memroute.transfer import ImportReport, import_memories, parse_jsonl
from memroute.verify import VerifyReport, verify_replicas

if TYPE_CHECKING:
    from memroute.keys import KeyStore
    from memroute.pipeline.conversation import Conversation
    from memroute.pipeline.requests import ApiShape
    from memroute.retrieval.engine import RetrievalEngine
    from memroute.runtime_vectors import VectorSwitch
    from memroute.settings import MemorySettings
    from memroute.state import RuntimeMemorySettings, StateStore
    from memroute.storage_api import StorageAPI

__all__ = ["Memroute", "derive_key"]

_PATCHABLE = ("content", "key", "type", "session_id", "metadata", "expires_at")


def derive_key(content: str) -> str:
    """A stable key for content added without one: a readable slug plus a short hash of the normalised
    text, so the same content upserts and different content (in any script) never collides."""
    normalised = " ".join(unicodedata.normalize("NFKC", content).casefold().split())
    slug = re.sub(r"[^\w]+", "_", normalised, flags=re.UNICODE).strip("_")[:40].rstrip("_")
    digest = hashlib.sha256(normalised.encode("utf-8")).hexdigest()[:12]
    return f"note:{slug}:{digest}" if slug else f"note:{digest}"


class Memroute:
    """memroute's Python API. Use as a context manager, or call :meth:`close`."""

    def __init__(
        self,
        settings: MemrouteSettings,
        *,
        plugins: MemroutePluginManager | None = None,
        embedder: EmbeddingSource | None = None,
        vector_store: VectorStore | None = None,
    ) -> None:
        """Prefer :func:`memroute.open`. ``embedder`` / ``vector_store`` replace the configured ones (for
        components built in code rather than named in configuration)."""
        self.settings = settings
        self.plugins = plugins or get_plugin_manager()
        self.data_dir = settings.data_path
        self._limits = InputLimits(settings.limits)
        self._closed = False
        self._lock = threading.RLock()
        self._pipeline: Conversation | None = None
        self._state: StateStore | None = None
        self._runtime: RuntimeMemorySettings | None = None
        backends = settings.backends
        built = []
        try:
            for name in [backends.primary, *backends.fallbacks]:
                built.append(build_backend(self.plugins, name, backends.instances[name], self.data_dir))
            self.state_dir = state_dir_for(self.data_dir, built[0])
            outbox = settings.manager.outbox_path or str(self.state_dir / "outbox.db")
            self._manager = MemoryManager(
                built[0], built[1:], settings=settings.manager, outbox_path=outbox,
                prepare_connection=self.plugins.prepare_connection,
            )
            self._manager.initialize()
        except BaseException:
            for backend in built:
                try:
                    backend.close()
                except Exception:
                    pass
            raise
        self._vector_switch: VectorSwitch | None = None
        try:
            if vector_store is not None:  # a store given in code is never switched
                self._engine = build_retrieval(self._manager, settings, self.plugins, self.state_dir,
                                               embedder=embedder, vector_store=vector_store)
            else:  # the runtime qdrant settings (PUT /api/settings/qdrant) choose the store
                from memroute.runtime_vectors import open_retrieval

                self._engine, self._vector_switch = open_retrieval(
                    settings, self._manager, self.plugins, self.state_dir, embedder, lambda: self.state)
        except BaseException:
            if self._state is not None:
                self._state.close()
            self._manager.close()
            raise

    @property
    def _retrieval(self) -> RetrievalEngine:
        switch = self._vector_switch
        if switch is not None:
            switch.poll()  # one clock read unless the runtime vector settings are due a re-read
        return self._engine

    @classmethod
    def open(
        cls,
        config: Any = None,
        *,
        plugins: MemroutePluginManager | None = None,
        embedder: EmbeddingSource | None = None,
        vector_store: VectorStore | None = None,
        **overrides: Any,
    ) -> Memroute:
        return cls(load_settings(config, **overrides), plugins=plugins, embedder=embedder, vector_store=vector_store)

    # --- lifecycle -----------------------------------------------------------------------------------
    def __enter__(self) -> Memroute:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            if self._pipeline is not None:
                self._pipeline.close()  # stored extractions first: they write through the manager
            if self._vector_switch is not None:
                self._vector_switch.close()
            self._engine.close()
        finally:
            try:
                self._manager.close()
            finally:
                if self._state is not None:
                    self._state.close()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait for background work (extraction, outbox replication, embedding); True when all of it finished."""
        extracted = self._pipeline.flush(timeout) if self._pipeline is not None else True
        indexed = self._retrieval.flush(timeout) and extracted
        return self._manager.flush(timeout) and indexed

    def runs_in_process(self) -> bool:
        """Whether every component that serves calls (the backends, the embedding source, the vector store,
        the reranker) does its work in this process, holding the GIL (each declares ``in_process``; one that
        does not declare it counts as waiting elsewhere). The async API sizes its pool from this
        (:func:`memroute.aio.auto_workers`)."""
        parts = [*self._manager.backends, self._retrieval.embedder, self._retrieval.vector_store,
                 self._retrieval.reranker]
        return all(getattr(part, "in_process", None) is True for part in parts if part is not None)

    def warm_up(self) -> bool:
        """Load what the first write or search would load lazily (an in-process embedding model), now, on
        the calling thread; True when something was loaded. ``memroute.open_async`` does this in its opening
        thread, so no first call stalls an event loop on a model load."""
        return self._retrieval.warm_up()

    # --- deployment state: keys, runtime settings (memroute.state; docs/server.md) -------------------
    @property
    def state(self) -> StateStore:
        """The deployment's shared state store (keys, runtime settings, leases), opened on first use."""
        with self._lock:
            if self._state is None:
                from memroute.state import open_state_store

                self._state = open_state_store(self.plugins, self._manager.backends[0], self.state_dir)
            return self._state

    @property
    def storage(self) -> StorageAPI:
        """Backend-level, tenant-checked calls for the HTTP storage protocol (``/api/storage``: another
        process's ``http`` backend using this deployment). See :mod:`memroute.storage_api`."""
        from memroute.storage_api import StorageAPI

        return StorageAPI(self)

    @property
    def keys(self) -> KeyStore:
        """The deployment's API keys (``memroute keys``, ``/api/keys``)."""
        return self.state.keys

    def memory_settings(self, *, fresh: bool = False) -> MemorySettings:
        """The ``[memory]`` settings in effect: the configured ones with the runtime overrides stored by
        :meth:`update_memory_settings` (in the shared state store). Search, preview, augment, observe and
        prune read them here; another process's change applies within
        :data:`~memroute.state.RUNTIME_SETTINGS_TTL_S` (1 s), this process's at once. ``fresh`` reads the
        store now instead."""
        return self._runtime_settings.current(fresh=fresh)

    def memory_overrides(self, *, fresh: bool = False) -> dict[str, Any]:
        """The runtime overrides in effect (setting name → value), without the configured values."""
        return self._runtime_settings.overrides(fresh=fresh)

    def update_memory_settings(self, changes: Mapping[str, Any]) -> MemorySettings:
        """Change runtime memory settings (wire names: ``enabled``, ``maxTokens``, ``retentionDays``,
        ``strategy``, ``typedDecay*``; ``None`` drops an override), strictly validated: a bad value raises
        :class:`~memroute.errors.ValidationError` naming the field and stores nothing. Returns the settings now
        in effect."""
        return self._runtime_settings.update(changes)

    def qdrant_settings(self, changes: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The Qdrant settings in effect (``GET /api/settings/qdrant``; never the key, only ``api_key_masked``);
        with ``changes`` (``PUT``: wire names, ``null`` drops an override, ``apiKey: ""`` removes the key) they
        are validated strictly, the new target probed for real, and stored for every process only if it
        works (:class:`~memroute.errors.ValidationError` naming the field otherwise). This process switches
        its vector store at once, the others within about a second. See :mod:`memroute.runtime_vectors`."""
        if self._vector_switch is None:
            raise ConfigError("this service was given its vector store in code; it has no runtime qdrant settings")
        if changes is not None:
            self._vector_switch.update(changes)
        return self._vector_switch.view()

    @property
    def _runtime_settings(self) -> RuntimeMemorySettings:
        with self._lock:
            if self._runtime is None:
                from memroute.state import RuntimeMemorySettings

                self._runtime = RuntimeMemorySettings(self.settings.memory, lambda: self.state)
            return self._runtime

    # --- CRUD ----------------------------------------------------------------------------------------
    def add(
        self,
        *,
        api_key_id: str,
        content: str,
        key: str | None = None,
        type: MemoryType | str = MemoryType.FACTUAL,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        expires_at: datetime | str | None = None,
    ) -> Memory:
        """Store a memory: an upsert on ``(api_key_id, key)``; ``key`` is derived from the content when
        omitted. Returns the stored memory (with its id, kept across upserts)."""
        if not isinstance(content, str):
            raise ValidationError("content: expected a string", [("content", "type")])
        check_storable("content", content)  # before derive_key hashes it
        new = NewMemory(
            api_key_id=api_key_id, key=key if key is not None else derive_key(content), content=content,
            type=type, session_id=session_id, metadata=metadata, expires_at=expires_at,
        )
        self._limits.check(content=new.content, metadata=new.metadata)
        memory = self._manager.create(new)
        self._retrieval.on_written([memory])
        return memory

    def get(self, memory_id: str, *, api_key_id: str) -> Memory | None:
        """The memory ``memory_id`` of tenant ``api_key_id``, or ``None`` when there is no such id **or it
        belongs to another tenant** (the two are indistinguishable). A malformed id (not a string, empty,
        over 256 characters, not a UUID) raises :class:`~memroute.errors.ValidationError`."""
        memory_id = require_memory_id(memory_id)
        tenant = require_tenant(api_key_id)
        return self._owned(memory_id, tenant)

    def _owned(self, memory_id: str, tenant: str) -> Memory | None:
        # An id's owner never changes (no patch can move a memory to another tenant), so checking the owner
        # of what the manager found, then acting on the id, holds on every backend. The tenant goes along: a
        # backend sharded by tenant looks on the tenant's shard only, and another tenant's id is not there.
        memory = self._manager.get(memory_id, api_key_id=tenant)
        return memory if memory is not None and memory.api_key_id == tenant else None

    def get_by_key(self, key: str, *, api_key_id: str) -> Memory | None:
        """The memory of ``api_key_id`` whose upsert key is exactly ``key``, or ``None``: one indexed lookup
        on backends that have one (SQLite, the in-memory test backend), an exact match over the backend's
        key search elsewhere, never a page-capped substring list."""
        tenant = require_tenant(api_key_id)
        key = require_key(key)
        memory = self._manager.get_by_key(tenant, key)
        return memory if memory is not None and memory.api_key_id == tenant and memory.key == key else None

    def update(self, memory_id: str, *, api_key_id: str, **changes: Any) -> Memory | None:
        """Change some of ``content, key, type, session_id, metadata, expires_at`` of a memory of
        ``api_key_id``; returns the updated memory, or ``None`` when there is no such id or it belongs to
        another tenant. ``metadata`` replaces the stored object; ``session_id=None`` / ``expires_at=None``
        clear those fields. Changing ``key`` to one another memory of the tenant holds raises
        :class:`~memroute.errors.ConflictError`."""
        memory_id = require_memory_id(memory_id)
        tenant = require_tenant(api_key_id)
        unknown = sorted(set(changes) - set(_PATCHABLE))
        if unknown:
            raise ValidationError(
                f"update: unknown field(s) {', '.join(unknown)} (allowed: {', '.join(_PATCHABLE)})",
                [(name, "unknown field") for name in unknown],
            )
        if not changes:
            raise ValidationError("update: nothing to change", [("(root)", "empty")])
        patch = MemoryPatch(**changes)
        self._limits.check(content=changes.get("content"), metadata=patch.metadata or None)
        if self._owned(memory_id, tenant) is None:
            return None
        updated = self._manager.update(memory_id, patch, api_key_id=tenant)
        if updated is not None:
            self._retrieval.on_written([updated])
        return updated

    def delete(self, memory_id: str, *, api_key_id: str) -> bool:
        """Delete a memory of ``api_key_id`` (from every backend, through the outbox, and from the vector
        index); ``False`` when there is no such id or it belongs to another tenant."""
        memory_id = require_memory_id(memory_id)
        tenant = require_tenant(api_key_id)
        if self._owned(memory_id, tenant) is None:
            return False
        return self._delete_owned(memory_id, tenant)

    def _delete_owned(self, memory_id: str, tenant: str) -> bool:
        deleted = self._manager.delete(memory_id, api_key_id=tenant)
        if deleted:
            self._retrieval.on_deleted(memory_id, tenant)
        return deleted

    def clear(
        self,
        api_key_id: str,
        *,
        type: MemoryType | str | None = None,
        session_id: str | None = None,
        older_than_days: int | None = None,
        dry_run: bool = False,
    ) -> ClearReport:
        """Delete every memory of ``api_key_id`` matching the filters (all types / sessions / ages when
        omitted): the bulk delete behind MCP ``memory_clear``, with no page cap. Each deletion goes through the
        manager (replicated to fallbacks) and removes the vector. ``older_than_days=N`` keeps memories created
        in the last N days. ``dry_run`` only reports what would be deleted. The report's ``deleted`` is the
        real count."""
        tenant = require_tenant(api_key_id)
        kind = None if type is None else require_type(type)
        session = require_session(session_id)
        if older_than_days is not None:
            older_than_days = _check_range("older_than_days", older_than_days, 0, 36_500)
        cutoff = None if older_than_days is None else utcnow() - timedelta(days=older_than_days)
        matched = [
            m for m in self._iter_tenant(tenant, type=kind, session_id=session)
            if cutoff is None or m.created_at < cutoff
        ]
        deleted = 0
        if not dry_run:
            deleted = sum(1 for m in matched if self._delete_owned(m.id, tenant))
        return ClearReport(
            api_key_id=tenant, dry_run=bool(dry_run), type=kind.value if kind else None, session_id=session,
            older_than_days=older_than_days, matched=len(matched), deleted=deleted,
            ids=tuple(m.id for m in matched), tokens=sum(m.tokens for m in matched),
        )

    def stats(self, api_key_id: str) -> MemoryStats:
        """The list statistics of ``api_key_id``: total, per-type counts (every type, 0 included), tokens used
        (``ceil(len / 4)`` summed) and the embedding cache's hits / misses (process-wide)."""
        tenant = require_tenant(api_key_id)
        page = self._manager.list(ListFilter(api_key_id=tenant, limit=1))
        by_type = {t.value: int(page.by_type.get(t.value, 0)) for t in MemoryType}
        tokens = sum(m.tokens for m in self._iter_tenant(tenant))
        return MemoryStats(api_key_id=tenant, total=page.total, by_type=by_type, tokens_used=tokens,
                           cache=self._cache_stats())

    def _cache_stats(self) -> CacheStats:
        stats = getattr(self._retrieval.embedder, "stats", None)
        counters = stats() if callable(stats) else {}
        return CacheStats(hits=int(counters.get("hits", 0)), misses=int(counters.get("misses", 0)),
                          size=int(counters.get("size", 0)))

    def _iter_tenant(self, tenant: str, *, type: MemoryType | None = None, session_id: str | None = None,
                     batch: int = 1000) -> Iterator[Memory]:
        """Every memory of ``tenant`` matching ``type`` / ``session_id``, oldest first, read page by page
        (through the manager's failover). The pages are read before the caller changes anything."""
        found: builtins.list[Memory] = []
        offset = 0
        while True:
            page = self._manager.list(ListFilter(api_key_id=tenant, type=type, session_id=session_id, limit=batch,
                                                 offset=offset, order_by="created_at", order_dir="asc"))
            found.extend(m for m in page.data if m.api_key_id == tenant)
            offset += len(page.data)
            if not page.data or offset >= page.total:
                return iter(found)

    def list(
        self,
        *,
        api_key_id: str,
        type: MemoryType | str | None = None,
        session_id: str | None = None,
        query: str | None = None,
        limit: int = 50,
        offset: int = 0,
        order_by: str = "created_at",
        order_dir: str = "desc",
    ) -> ListPage:
        """A page of the memories of ``api_key_id`` (newest first by default) with the total and per-type
        counts of every match. ``query`` is a case-insensitive substring over content and key; ``limit`` is
        1..10000; ``order_by`` is ``created_at``, ``updated_at`` or ``last_accessed_at`` (never-accessed
        memories sort as the oldest)."""
        tenant = require_tenant(api_key_id)
        return self._manager.list(
            ListFilter(api_key_id=tenant, type=type, session_id=session_id, query=query, limit=limit,
                       offset=offset, order_by=order_by, order_dir=order_dir)
        )

    # --- search --------------------------------------------------------------------------------------
    def search(
        self,
        query: str,
        *,
        api_key_id: str,
        strategy: str | None = None,
        limit: int | None = None,
        max_tokens: int | None = None,
        session_id: str | None = None,
        type: MemoryType | str | None = None,
        record_access: bool = True,
    ) -> SearchResult:
        """Ranked memories of ``api_key_id`` for ``query``. ``strategy``: ``exact``/``recent`` (newest
        first), ``semantic`` or ``hybrid`` (default: the configured one). Expired memories, memories older
        than ``retention_days`` and (with ``session_id``) other sessions' memories are never returned; with
        ``type``, only memories of that type are (filtered before the token budget is filled).

        Each memory returned counts as an access (``access_count``, ``last_accessed_at``; recorded in the
        background, see :meth:`record_access`), as the reference's retrieval does; ``record_access=False``
        reads without counting (previews do)."""
        if not isinstance(query, str):
            raise ValidationError("query: expected a string", [("query", "type")])
        tenant = require_tenant(api_key_id)
        memory = self.memory_settings()
        chosen = resolve_strategy(strategy if strategy is not None else memory.strategy)
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                       or not 0 <= max_tokens <= 16000):
            raise ValidationError("max_tokens: must be an integer in [0, 16000]", [("max_tokens", "range")])
        search_query = SearchQuery(
            api_key_id=tenant, text=query[:4096], strategy=chosen,
            limit=limit if limit is not None else self.settings.memory.vec_top_k,
            session_id=session_id, retention_days=memory.retention_days, type=type,
        )
        result = self._retrieval.search(search_query, max_tokens=max_tokens)
        if record_access and result.hits:
            self._manager.record_access(tenant, [hit.memory.id for hit in result.hits])
        return result

    def record_access(self, memory_ids: Iterable[str], *, api_key_id: str) -> None:
        """Count one access of each of these memories of ``api_key_id`` (``access_count += 1``,
        ``last_accessed_at = now``): what ``augment`` does for the memories it injects, for an application
        that injects memories itself. Queued and written to the primary in the background, coalesced (see
        :mod:`memroute.access`); ids of another tenant or of no memory are ignored; never raises for the
        backend. A no-op when the primary does not declare ``capabilities.access_tracking``."""
        tenant = require_tenant(api_key_id)
        if isinstance(memory_ids, str):
            raise ValidationError("memory_ids: expected a list of ids, not one string", [("memory_ids", "type")])
        self._manager.record_access(tenant, [require_memory_id(i) for i in memory_ids])

    def preview(
        self,
        query: str,
        *,
        api_key_id: str,
        strategy: str | None = None,
        max_tokens: int | None = None,
        limit: int | None = None,
        session_id: str | None = None,
    ) -> RetrievalPreview:
        """What retrieval returns for ``query`` within a token budget, typed (the reference's
        retrieve-preview, the Playground, ``memroute search``): each memory with its tier, per-leg ranks and
        scores and tokens; how it was served (embedding source and model, vector store, strategy used,
        fallbacks and why); total tokens against the budget. ``max_tokens`` defaults to ``[memory]
        max_tokens`` (1..16000), ``limit`` to 20 (1..100). Always one tenant, with the expiry, retention and
        session filters of :meth:`search` (the reference's preview had none). A preview records no access."""
        budget = self.memory_settings().max_tokens if max_tokens is None else max_tokens
        count = 20 if limit is None else _check_range("limit", limit, 1, 100)
        result = self.search(query, api_key_id=api_key_id, strategy=strategy, max_tokens=budget, limit=count,
                             session_id=session_id, record_access=False)
        return self._preview_of(query, require_tenant(api_key_id), result.hits, result, budget, count)

    def _preview_of(self, query: str, tenant: str, hits: Sequence[SearchHit], result: SearchResult,
                    max_tokens: int | None, limit: int) -> RetrievalPreview:
        return RetrievalPreview.from_hits(query=query, api_key_id=tenant, hits=hits, provenance=result.provenance,
                                          embedding=self._retrieval.resolution, max_tokens=max_tokens, limit=limit)

    # --- operations ----------------------------------------------------------------------------------
    def health(self) -> HealthReport:
        """Probe every backend now: each backend's answer, breaker and outbox backlog, and the outbox."""
        return HealthReport.from_manager(self._manager.health())

    def status(self) -> StatusReport:
        """Engine status (``memroute status``): data and state directories, ``[memory]`` settings, backends,
        keyword tier, embedding, vector store, fusion, and a fresh health probe. ``memory`` is the settings in
        effect (runtime overrides applied)."""
        memory = self.memory_settings()
        engine = self._retrieval.status()
        return StatusReport(
            data_dir=str(self.data_dir), state_dir=str(self.state_dir),
            memory=MemoryStatus(enabled=memory.enabled, strategy=memory.strategy, max_tokens=memory.max_tokens,
                                retention_days=memory.retention_days),
            backends=BackendsStatus(primary=self.settings.backends.primary,
                                    fallbacks=tuple(self.settings.backends.fallbacks),
                                    instances=tuple(b.describe() for b in self._manager.backends)),
            keyword=dict(engine.get("keyword", {})), embedding=dict(engine.get("embedding", {})),
            vector_store=dict(engine.get("vector_store", {})), fusion=dict(engine.get("fusion", {})),
            rerank=dict(engine.get("rerank", {})),
            health=self.health(),
        )

    def verify(self, *, repair: bool = False) -> VerifyReport:
        """Compare every fallback with the primary, memory by memory (the drift check); with ``repair``, replay
        the primary's version of every difference through the outbox. See :mod:`memroute.verify`."""
        return verify_replicas(self._manager, repair=repair)

    def reindex(self, *, force: bool = False, progress: Callable[[int, int], None] | None = None) -> ReindexReport:
        """Embed every memory that has no current vector now (every memory with ``force``); resumable, the
        queue is durable. ``progress(done, remaining)`` is called after each batch."""
        outcome = self._retrieval.reindex(force=force, progress=progress)
        known = {f.name for f in attrs.fields(ReindexReport)}
        return ReindexReport(**{k: v for k, v in outcome.items() if k in known})

    # --- import / export -----------------------------------------------------------------------------
    def export(self, api_key_id: str) -> Iterator[Memory]:
        """Every memory of ``api_key_id``, oldest first (see :meth:`export_all` for every tenant)."""
        tenant = require_tenant(api_key_id)
        return iter(self._manager.iter_all(tenant))

    def tenants(self) -> builtins.list[str]:
        """Every ``api_key_id`` that holds memories, sorted: an all-tenant read for operators and the
        dashboard's tenant picker (the server exposes it to admin keys only)."""
        return self._manager.tenants()

    def export_all(self) -> Iterator[Memory]:
        """Every memory of **every** tenant, oldest first: an operator's backup, never a tenant's call."""
        return iter(self._manager.iter_all(None))

    def import_memories(self, memories: Iterable[Memory]) -> ImportReport:
        """Store memories exactly as given (ids, owners and timestamps kept): an operator's restore. Refused
        whole when an id is not a UUID or exists under another tenant (see :mod:`memroute.transfer`)."""
        checked: builtins.list[tuple[int, Memory]] = []
        for number, memory in enumerate(memories, start=1):
            if not isinstance(memory, Memory):
                raise ValidationError(f"item {number}: expected a Memory", [(f"item {number}", "type")])
            if not is_memory_id(memory.id):
                raise ValidationError(f"item {number}: id: expected a canonical UUID, got {memory.id!r:.60}",
                                      [(f"item {number}", "id")])
            self._limits.check(content=memory.content, metadata=memory.metadata, where=f"item {number}: ")
            checked.append((number, memory))
        return import_memories(self._manager, checked, on_written=self._retrieval.on_written)

    def import_jsonl(self, lines: Iterable[str], *, api_key_id: str | None = None,
                     progress: Callable[[int], None] | None = None) -> ImportReport:
        """Import JSONL (one memory object a line, as ``memroute export`` writes), all or nothing: the whole
        input is validated before the first write (the error names the line), an id that exists under another
        tenant is refused, and the memories are written in one backend call (one transaction on SQLite and
        PostgreSQL). With ``api_key_id``, every line must belong to that tenant or name none. See
        :mod:`memroute.transfer` for what is guaranteed on backends without transactions."""
        parsed = parse_jsonl(lines, api_key_id=api_key_id, limits=self._limits)
        return import_memories(self._manager, parsed, api_key_id=api_key_id, on_written=self._retrieval.on_written,
                               progress=progress)

    # --- conversation pipeline (memroute.pipeline.conversation; docs/pipeline.md) ----------------------
    @property
    def _conversation(self) -> Conversation:
        """The pipeline object (extraction worker, augmentation, maintenance), built on first use."""
        with self._lock:
            if self._pipeline is None:
                from memroute.pipeline.augment_cache import AugmentCache
                from memroute.pipeline.conversation import Conversation, build_extractors

                self._pipeline = Conversation(
                    self, self.settings, lambda: build_extractors(self.settings, self.plugins, self.data_dir),
                    cache=AugmentCache(self._manager.data_version,
                                       lambda ids, tenant: self._manager.get_many(ids, api_key_id=tenant)),
                )
            return self._pipeline

    def augment(self, request: Any, *, api_key_id: str, session_id: str | None = None, provider: str | None = None,
                headers: Any = None, api: ApiShape | None = None, session_scope: bool = False) -> Any:
        """``request`` with relevant memories of ``api_key_id`` injected (never mutated; the same object when
        nothing is injected). ``provider`` picks placement rules, ``api`` the request shape (default:
        detected), ``session_scope=True`` retrieves only ``session_id``'s memories. Never raises for a
        retrieval failure (the request goes out without memory). Each injected memory counts as an access
        (recorded in the background; see :meth:`record_access`). See :meth:`explain_augment`."""
        return self.explain_augment(request, api_key_id=api_key_id, session_id=session_id, provider=provider,
                                    headers=headers, api=api, session_scope=session_scope, preview=False).request

    def explain_augment(self, request: Any, *, api_key_id: str, session_id: str | None = None,
                        provider: str | None = None, headers: Any = None, api: ApiShape | None = None,
                        session_scope: bool = False, preview: bool = True,
                        record_access: bool = True, cached_only: bool = False) -> AugmentReport:
        """Like :meth:`augment`, and also what was retrieved for which query (a :class:`RetrievalPreview` of
        the memories injected, unless ``preview=False``: the proxy's request path needs only the request and the
        count), and why nothing was injected. ``record_access=False`` counts no access (a preview of the block,
        like the dashboard's, rather than a request that is sent). Without the preview, the retrieval for a
        repeated message (an agent's tool loop resends it after every tool call) is reused while the tenant's
        data is unchanged, in this process or any other (:mod:`memroute.pipeline.augment_cache`); a preview
        always retrieves afresh. ``cached_only=True`` never searches (so with a preview it never injects): a
        call that would have to returns at once, the request unchanged and ``skipped == "not cached"`` (the
        proxy answers what needs no search on its event loop and runs only a search in a worker thread)."""
        done = self._conversation.explain_augment(request, api_key_id, session_id, provider, headers, api=api,
                                                  session_scope=session_scope, record_access=record_access,
                                                  reuse=not preview, cached_only=cached_only)
        shown = None
        if preview and done.result is not None:
            shown = self._preview_of(done.query, require_tenant(api_key_id), done.hits, done.result,
                                     done.max_tokens, len(done.result.hits))
        return AugmentReport(request=done.request, query=done.query, block=done.block, skipped=done.skipped,
                             preview=shown, count=done.count)

    def observe(self, request: Any, response: Any = None, *, api_key_id: str, session_id: str | None = None,
                headers: Any = None, wait: bool = False) -> builtins.list[Memory]:
        """Extract facts from a chat turn and store them for ``api_key_id`` (in the background unless
        ``wait``; with ``wait`` the stored memories are returned)."""
        return self._conversation.observe(request, response, api_key_id=api_key_id, session_id=session_id,
                                          headers=headers, wait=wait)

    @overload
    def extract(self, text: str, *, source: str = ..., api_key_id: None = ..., store: Literal[False] = ...,
                session_id: None = ...) -> builtins.list[ExtractedFact]: ...

    @overload
    def extract(self, text: str, *, source: str = ..., api_key_id: str, store: Literal[True],
                session_id: str | None = ...) -> builtins.list[Memory]: ...

    def extract(self, text: str, *, source: str = "user", api_key_id: str | None = None, store: bool = False,
                session_id: str | None = None) -> builtins.list[ExtractedFact] | builtins.list[Memory]:
        """The facts the configured extractors find in ``text`` (``source``: ``user`` or ``assistant``).
        With ``store=True`` they are also stored for ``api_key_id`` (required then; whatever the memory gate
        says) and the stored memories are returned; a fact that names an opposite key (``aversion:x`` for
        ``preference:x``) supersedes that memory."""
        if not isinstance(text, str):
            raise ValidationError("text: expected a string", [("text", "type")])
        if not store:
            if api_key_id is not None:
                raise ValidationError("api_key_id: only applies with store=True", [("api_key_id", "unexpected")])
            return self._conversation.extract(text, source=source)
        tenant = require_tenant(api_key_id)
        facts = self._conversation.extract(text, source=source)
        return self._conversation.store_facts(tenant, facts, session_id=session_id)

    def summarize(self, api_key_id: str, older_than_days: int, *, dry_run: bool = True) -> MaintenanceReport:
        """Replace one tenant's memories older than ``older_than_days`` with summaries (dry run by default)."""
        return self._conversation.summarize(require_tenant(api_key_id), older_than_days, dry_run=dry_run)

    def compact(self, api_key_id: str, session_id: str | None = None, max_tokens: int = 4000, *,
                dry_run: bool = True) -> MaintenanceReport:
        """Summarize what does not fit ``max_tokens`` of one tenant (dry run by default)."""
        return self._conversation.compact(require_tenant(api_key_id), session_id, max_tokens, dry_run=dry_run)

    def prune(self, api_key_id: str, *, dry_run: bool = False) -> MaintenanceReport:
        """Delete one tenant's memories past retention, expired, or decayed (typed decay, when enabled)."""
        return self._conversation.prune(require_tenant(api_key_id), dry_run=dry_run)

    def prune_all(self, *, dry_run: bool = False) -> MaintenanceReport:
        """:meth:`prune` for **every** tenant: operator maintenance (``memroute prune --all-tenants``)."""
        return self._conversation.prune(None, dry_run=dry_run)


def state_dir_for(data_dir: Path, primary: MemoryBackend) -> Path:
    """Where the vector index, its queue and the outbox of this primary live: one directory per primary
    identity, so two databases never share an index."""
    identity = primary.identity()
    slug = re.sub(r"[^A-Za-z0-9]+", "-", identity).strip("-")[-40:] or "store"
    digest = hashlib.sha256(identity.encode("utf-8")).hexdigest()[:10]
    path = data_dir / "state" / f"{slug}-{digest}"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"data_dir: cannot create {path} ({exc.strerror or exc}); set data_dir or MEMROUTE_DATA_DIR to a "
            "writable directory", [("data_dir", "not writable")]
        ) from exc
    return path


def _check_range(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(f"{name}: must be an integer in [{low}, {high}]", [(name, "range")])
    return value
