"""The service object ``memroute.open()`` returns: the Python API every surface (CLI, REST, MCP) wraps.

Data flows one way: surface → this service → MemoryManager → backend plugins. The service validates input,
scopes every operation to its tenant, generates ids and keys, returns typed reports
(:mod:`memroute.reports`), and is the composition root: it builds the backends, the manager, the retrieval
engine and the conversation pipeline (which works against the narrow
:class:`~memroute.pipeline.ports.MemoryStore` port this class satisfies). The public API is this one class;
its methods are grouped in :mod:`memroute.service.deployment` and :mod:`memroute.service.conversation`
(mixins it inherits) besides the ones here; their shared state is declared in :mod:`memroute.service.base`.
"""

from __future__ import annotations

import builtins
import concurrent.futures
import hashlib
import re
import threading
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from memroute.components import build_backend
from memroute.config.limits import InputLimits
from memroute.config.settings import MemrouteSettings, load_settings
from memroute.deployment.group_commit import GroupCommit
from memroute.errors import ConfigError, ValidationError
from memroute.interfaces import EmbeddingSource, HistoryNote, MemoryBackend, VectorStore
from memroute.models import (
    AGENT_KEY,
    HistoryEvent,
    ListFilter,
    ListPage,
    Memory,
    MemoryPatch,
    MemoryType,
    NewMemory,
    SearchQuery,
    SearchResult,
    as_utc,
    check_storable,
    require_actor,
    require_history_event,
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
    CacheStats,
    ClearReport,
    MemoryStats,
    RetrievalPreview,
)
from memroute.retrieval.build import build_retrieval
from memroute.routing.manager import MemoryManager
from memroute.service.conversation import ConversationMethods
from memroute.service.deployment import DeploymentMethods
from memroute.service.end_users import EndUserMethods
from memroute.service.history import HistoryMethods
from memroute.service.quota import TenantQuotas
from memroute.tenancy import require_agent

if TYPE_CHECKING:
    from memroute.deployment.state import RuntimeMemorySettings, StateStore
    from memroute.pipeline.conversation import Conversation
    from memroute.retrieval.runtime_vectors import VectorSwitch

__all__ = ["Memroute", "derive_key"]

_PATCHABLE = ("content", "key", "type", "session_id", "metadata", "expires_at")


def derive_key(content: str) -> str:
    """A stable key for content added without one: a readable slug plus a short hash of the normalised
    text, so the same content upserts and different content (in any script) never collides."""
    normalised = " ".join(unicodedata.normalize("NFKC", content).casefold().split())
    slug = re.sub(r"[^\w]+", "_", normalised, flags=re.UNICODE).strip("_")[:40].rstrip("_")
    digest = hashlib.sha256(normalised.encode("utf-8")).hexdigest()[:12]
    return f"note:{slug}:{digest}" if slug else f"note:{digest}"


@attrs.frozen
class _PendingAdd:
    """One add waiting in the group commit: the validated memory, who asked, and the history event a
    consolidation chose (``None``: created or updated, from what the upsert finds)."""

    new: NewMemory
    actor: str
    event: HistoryEvent | None = None


class Memroute(DeploymentMethods, ConversationMethods, HistoryMethods, EndUserMethods):
    """memroute's Python API. Use as a context manager, or call :meth:`close`.

    The methods live in four modules: this one (construction, lifecycle, CRUD, search),
    :mod:`memroute.service.deployment` (keys, runtime settings, operations, import / export),
    :mod:`memroute.service.conversation` (augment, observe, extract, maintenance) and
    :mod:`memroute.service.history` (each memory's history) and :mod:`memroute.service.end_users` (an app's end
    users, erasing one)."""

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
        self._quotas = TenantQuotas(
            max_memories=settings.limits.max_memories_per_tenant, max_bytes=settings.limits.max_bytes_per_tenant,
            count=lambda tenant: self._manager.list(ListFilter(api_key_id=tenant, limit=1)).total,
            scan=self._iter_tenant)
        self._closed = False
        self._lock = threading.RLock()
        self._adds: GroupCommit[_PendingAdd, Memory] = GroupCommit(self._write_adds)
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
                from memroute.retrieval.runtime_vectors import open_retrieval

                self._engine, self._vector_switch = open_retrieval(
                    settings, self._manager, self.plugins, self.state_dir, embedder, lambda: self.state)
        except BaseException:
            if self._state is not None:
                self._state.close()
            self._manager.close()
            raise

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
            self._adds.close()  # then the adds already queued are written, and no more are taken
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
        actor: str = "api",
        history_event: HistoryEvent | str | None = None,
        consolidate: bool = False,
        agent: str | None = None,
    ) -> Memory:
        """Store a memory: an upsert on ``(api_key_id, key)``; ``key`` is derived from the content when
        omitted. Returns the stored memory (with its id, kept across upserts). ``actor`` names who made the
        change in the memory's history (:meth:`history`); ``history_event`` the event recorded there (default:
        ``created`` or ``updated``, from what the upsert finds; ``superseded`` says a newer statement replaced
        what the memory said). ``agent`` tags it with an agent (``metadata["agent"]``; :meth:`search` and
        :meth:`list` can keep one agent's memories only).

        ``consolidate=True`` first looks for a memory the new one restates or contradicts, as ``observe`` does
        for extracted facts (docs/pipeline.md, "Consolidation"): the same key with other content is superseded,
        and near-identical content under another key is updated in place instead of stored twice.

        Concurrent adds (from threads, or :meth:`submit_add`) are written together, one transaction for all
        of them (:mod:`memroute.deployment.group_commit`); each caller still gets its own memory or its own error."""
        new = self._new_memory(api_key_id, content, key, type, session_id, metadata, expires_at, agent)
        event = None if history_event is None else require_history_event(history_event)
        if consolidate:
            return self._conversation.consolidate(new, actor=require_actor(actor), explicit_key=key is not None)
        return self._adds.call(_PendingAdd(new, require_actor(actor), event))

    def submit_add(
        self,
        *,
        api_key_id: str,
        content: str,
        key: str | None = None,
        type: MemoryType | str = MemoryType.FACTUAL,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        expires_at: datetime | str | None = None,
        actor: str = "api",
        history_event: HistoryEvent | str | None = None,
        agent: str | None = None,
    ) -> concurrent.futures.Future[Memory]:
        """:meth:`add` without blocking, for an event loop: the input is validated now (a bad one raises
        :class:`~memroute.errors.ValidationError` here, before anything is queued), the write goes with the
        next batch, and the returned future resolves to the stored memory, or to the error the add met.
        ``await asyncio.wrap_future(mem.submit_add(...))`` costs the loop no thread hop of its own."""
        event = None if history_event is None else require_history_event(history_event)
        return self._adds.submit(_PendingAdd(
            self._new_memory(api_key_id, content, key, type, session_id, metadata, expires_at, agent),
            require_actor(actor), event))

    def _new_memory(self, api_key_id: str, content: str, key: str | None, type: MemoryType | str,
                    session_id: str | None, metadata: Mapping[str, Any] | None,
                    expires_at: datetime | str | None, agent: str | None = None) -> NewMemory:
        """An add's input, validated (every check the add makes before the backend sees it)."""
        if agent is not None:
            metadata = {**(metadata if isinstance(metadata, Mapping) else {}), AGENT_KEY: require_agent(agent)}
        if not isinstance(content, str):
            raise ValidationError("content: expected a string", [("content", "type")])
        check_storable("content", content)  # before derive_key hashes it
        new = NewMemory(
            api_key_id=api_key_id, key=key if key is not None else derive_key(content), content=content,
            type=type, session_id=session_id, metadata=metadata, expires_at=expires_at,
        )
        self._limits.check(content=new.content, metadata=new.metadata)
        self._quotas.check(new.api_key_id, [(new.content, new.metadata)])
        return new

    def _write_adds(self, pending: Sequence[_PendingAdd]) -> builtins.list[Memory | Exception]:
        """The group commit's batch (:mod:`memroute.deployment.group_commit`): concurrent adds, already validated,
        in one backend write; then one indexer wake for all of them, and their history: in the same transaction
        when the primary records it there (``MemoryManager.records_in_write``: SQLite, PostgreSQL), else right after."""
        news = [p.new for p in pending]
        if self._manager.records_in_write:
            notes = [HistoryNote(actor=p.actor, event=p.event) for p in pending]
            try:
                outcomes: builtins.list[Memory | Exception] = self._manager.create_recorded(news, notes)
            except Exception as exc:  # a lone add's own error, or one every add of the batch shares
                outcomes = [exc] * len(news)
            self._retrieval.on_written([m for m in outcomes if isinstance(m, Memory)])
            return outcomes
        priors = self._priors_by_key([(n.api_key_id, n.key) for n in news])
        if len(news) == 1:  # a lone add: exactly the single-write path
            try:
                outcomes = [self._manager.create(news[0])]
            except Exception as exc:
                outcomes = [exc]
        else:
            outcomes = self._manager.create_many(news)
        self._retrieval.on_written([m for m in outcomes if isinstance(m, Memory)])
        if priors:
            changes = []
            for item, outcome in zip(pending, outcomes, strict=True):
                if isinstance(outcome, Memory):
                    slot = (outcome.api_key_id, item.new.key)
                    changes.append((priors.get(slot), outcome, item.actor, item.event))
                    priors[slot] = outcome  # a later add of the batch to the same key changes this one
            self._record(changes)
        return outcomes

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

    def update(self, memory_id: str, *, api_key_id: str, actor: str = "api",
               history_event: HistoryEvent | str | None = None, **changes: Any) -> Memory | None:
        """Change some of ``content, key, type, session_id, metadata, expires_at`` of a memory of
        ``api_key_id``; returns the updated memory, or ``None`` when there is no such id or it belongs to
        another tenant. ``metadata`` replaces the stored object; ``session_id=None`` / ``expires_at=None``
        clear those fields. Changing ``key`` to one another memory of the tenant holds raises
        :class:`~memroute.errors.ConflictError`. ``actor`` names who made the change in its history,
        ``history_event`` the event (default ``updated``)."""
        memory_id = require_memory_id(memory_id)
        tenant = require_tenant(api_key_id)
        actor = require_actor(actor)
        event = None if history_event is None else require_history_event(history_event)
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
        before = self._owned(memory_id, tenant)
        if before is None:
            return None
        if self._manager.records_in_write:  # the entry in the update's own transaction
            updated = self._manager.update_recorded(before, patch, HistoryNote(actor=actor, event=event))
            if updated is not None:
                self._retrieval.on_written([updated])
            return updated
        updated = self._manager.update(memory_id, patch, api_key_id=tenant)
        if updated is not None:
            self._retrieval.on_written([updated])
            self._record_one(before, updated, actor, event)
        return updated

    def delete(self, memory_id: str, *, api_key_id: str, actor: str = "api") -> bool:
        """Delete a memory of ``api_key_id`` (from every backend, through the outbox, and from the vector
        index); ``False`` when there is no such id or it belongs to another tenant. Its history keeps what it
        said (``actor``: who deleted it)."""
        memory_id = require_memory_id(memory_id)
        tenant = require_tenant(api_key_id)
        actor = require_actor(actor)
        before = self._owned(memory_id, tenant)
        if before is None:
            return False
        return self._delete_owned(before, actor)

    def _delete_owned(self, memory: Memory, actor: str) -> bool:
        if self._manager.records_in_write:  # the entry in the delete's own transaction
            deleted = self._manager.delete_recorded(memory, HistoryNote(actor=actor))
            if deleted:
                self._retrieval.on_deleted(memory.id, memory.api_key_id)
            return deleted
        deleted = self._manager.delete(memory.id, api_key_id=memory.api_key_id)
        if deleted:
            self._retrieval.on_deleted(memory.id, memory.api_key_id)
            self._record_one(memory, None, actor)
        return deleted

    def clear(
        self,
        api_key_id: str,
        *,
        type: MemoryType | str | None = None,
        session_id: str | None = None,
        older_than_days: int | None = None,
        created_before: datetime | str | None = None,
        dry_run: bool = False,
    ) -> ClearReport:
        """Delete every memory of ``api_key_id`` matching the filters (all types / sessions / ages when
        omitted): the bulk delete behind MCP ``memory_clear``, with no page cap. Each deletion goes through the
        manager (replicated to fallbacks) and removes the vector. ``older_than_days=N`` keeps memories created
        in the last N days; ``created_before`` (a time, as the reference's ``olderThan``) keeps those created at
        or after it. ``dry_run`` only reports what would be deleted. The report's ``deleted`` is the real
        count."""
        tenant = require_tenant(api_key_id)
        kind = None if type is None else require_type(type)
        session = require_session(session_id)
        if older_than_days is not None:
            older_than_days = _check_range("older_than_days", older_than_days, 0, 36_500)
        if older_than_days is not None and created_before is not None:
            raise ValidationError("give older_than_days or created_before, not both",
                                  [("created_before", "exclusive")])
        cutoff = None if older_than_days is None else utcnow() - timedelta(days=older_than_days)
        if created_before is not None:
            cutoff = as_utc(created_before, "created_before")
        matched = [
            m for m in self._iter_tenant(tenant, type=kind, session_id=session)
            if cutoff is None or m.created_at < cutoff
        ]
        deleted = 0
        if not dry_run:
            deleted = sum(1 for m in matched if self._delete_owned(m, "api"))
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
        agent: str | None = None,
    ) -> ListPage:
        """A page of the memories of ``api_key_id`` (newest first by default) with the total and per-type
        counts of every match. ``query`` is a case-insensitive substring over content and key; ``limit`` is
        1..10000; ``order_by`` is ``created_at``, ``updated_at`` or ``last_accessed_at`` (never-accessed
        memories sort as the oldest). ``agent`` keeps the memories tagged with that agent only."""
        tenant = require_tenant(api_key_id)
        listed = ListFilter(api_key_id=tenant, type=type, session_id=session_id, query=query, limit=limit,
                            offset=offset, order_by=order_by, order_dir=order_dir)
        if agent is not None:
            return self._list_agent(listed, require_agent(agent))
        return self._manager.list(listed)

    def _list_agent(self, listed: ListFilter, agent: str) -> ListPage:
        """A page of one agent's memories: the tag is metadata, which no backend filters on, so the tenant's
        matching memories are read in order and the agent's kept (a full read of the tenant per page)."""
        kept: builtins.list[Memory] = []
        offset = 0
        while True:
            page = self._manager.list(attrs.evolve(listed, limit=1000, offset=offset))
            kept.extend(m for m in page.data if m.api_key_id == listed.api_key_id
                        and m.metadata.get(AGENT_KEY) == agent)
            offset += len(page.data)
            if not page.data or offset >= page.total:
                break
        by_type: dict[str, int] = {}
        for memory in kept:
            by_type[memory.type.value] = by_type.get(memory.type.value, 0) + 1
        return ListPage(data=tuple(kept[listed.offset:listed.offset + listed.limit]), total=len(kept),
                        by_type=by_type)

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
        agent: str | None = None,
        min_score: float | None = None,
        now: datetime | str | None = None,
    ) -> SearchResult:
        """Ranked memories of ``api_key_id`` for ``query``. ``strategy``: ``exact``/``recent`` (newest
        first), ``semantic`` or ``hybrid`` (default: the configured one). Expired memories, memories outside
        the retrieval window (``[memory] retention_days``, per type too; none by default) and (with
        ``session_id``) other sessions' memories are never returned; with ``type``, only memories of that type
        are (filtered before the token budget is filled); with ``agent``, only memories tagged with that agent.

        Each memory returned counts as an access (``access_count``, ``last_accessed_at``; recorded in the
        background, see :meth:`record_access`), as the reference's retrieval does; ``record_access=False``
        reads without counting (previews do). ``min_score`` (0..1) overrides ``[memory] min_score``, the
        relevance floor, for this search: ``0`` returns the plain ranking (what a benchmark measures).

        A question that names a time ("what did I say yesterday about the trip") or a person ("what did Maria
        say about the move") prefers the memories said then, or by them (``[memory] question_cues``;
        docs/retrieval.md, "Time and people in questions"); ``now`` (an aware datetime or ISO 8601 text; default
        the clock) is what "yesterday" is relative to, and the moment expiry is judged at. Each hit's
        ``said_at`` says when its memory was said."""
        if not isinstance(query, str):
            raise ValidationError("query: expected a string", [("query", "type")])
        tenant = require_tenant(api_key_id)
        memory = self.memory_settings()
        chosen = resolve_strategy(strategy if strategy is not None else memory.strategy)
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                       or not 0 <= max_tokens <= 16000):
            raise ValidationError("max_tokens: must be an integer in [0, 16000]", [("max_tokens", "range")])
        if min_score is not None and (isinstance(min_score, bool) or not isinstance(min_score, (int, float))
                                      or not 0.0 <= min_score <= 1.0):
            raise ValidationError("min_score: must be a number in [0, 1]", [("min_score", "range")])
        window, type_windows = memory.search_windows()
        search_query = SearchQuery(
            api_key_id=tenant, text=query[:4096], strategy=chosen,
            limit=limit if limit is not None else self.settings.memory.vec_top_k,
            session_id=session_id, retention_days=window, type_windows=type_windows, type=type,
            agent=None if agent is None else require_agent(agent), now=utcnow() if now is None else now,
        )
        result = self._retrieval.search(search_query, max_tokens=max_tokens,
                                        min_score=None if min_score is None else float(min_score))
        if record_access and result.hits:
            self._manager.record_access(tenant, [hit.memory.id for hit in result.hits])
        return result

    def record_access(self, memory_ids: Iterable[str], *, api_key_id: str) -> None:
        """Count one access of each of these memories of ``api_key_id`` (``access_count += 1``,
        ``last_accessed_at = now``): what ``augment`` does for the memories it injects, for an application
        that injects memories itself. Queued and written to the primary in the background, coalesced (see
        :mod:`memroute.routing.access`); ids of another tenant or of no memory are ignored; never raises for the
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
        now: datetime | str | None = None,
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
                             session_id=session_id, record_access=False, now=now)
        return self._preview_of(query, require_tenant(api_key_id), result.hits, result, budget, count)




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
