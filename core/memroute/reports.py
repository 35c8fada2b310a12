"""The typed reports the service returns: frozen attrs values, turned into JSON by one converter
(:func:`memroute.config.serialization.to_jsonable`). Surfaces (the CLI's ``--json``, next the REST API's schemas)
render these; they never build their own dicts of the same facts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from memroute.models import HistoryEntry, Memory

if TYPE_CHECKING:
    from memroute.models import Provenance, SearchHit

__all__ = [
    "AugmentReport",
    "BackendHealth",
    "BackendsStatus",
    "CacheStats",
    "ClearReport",
    "EndUserErasure",
    "HealthReport",
    "HistoryReport",
    "MaintenanceReport",
    "MemoryStats",
    "MemoryStatus",
    "OutboxFailure",
    "OutboxStats",
    "PreviewMemory",
    "PreviewResolution",
    "ReindexReport",
    "RetrievalPreview",
    "StatusReport",
]

# A class lists in ``_json_properties`` the computed properties the converter adds to its JSON
# (``to_jsonable``), so a derived number is written once, here, and never recomputed by a surface.


@attrs.frozen(kw_only=True)
class MaintenanceReport:
    """The outcome of ``summarize``, ``compact``, ``prune`` or ``prune_all``."""

    action: str
    dry_run: bool
    api_key_id: str | None
    """The tenant; ``None`` for ``prune_all`` (every tenant)."""
    candidates: tuple[str, ...] = ()
    """Ids of the memories the action (would) replace or delete."""
    candidate_tokens: int = 0
    deleted: int = 0
    summary_ids: tuple[str, ...] = ()
    summary_preview: str = ""
    reasons: dict[str, int] = attrs.field(factory=dict)
    """For ``prune``: how many candidates each rule found (``retention``: past ``delete_after_days``,
    ``expired``, ``decay``)."""
    tenants: int = 0
    """How many tenants own the candidates (a real run: whose memories were deleted)."""
    history_purged: int = 0
    """For ``prune``: history entries removed, of memories deleted more than ``delete_after_days`` ago."""

    _json_properties: ClassVar[tuple[str, ...]] = ("candidate_count",)

    @property
    def candidate_count(self) -> int:
        return len(self.candidates)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape (``memroute summarize / compact / prune --json``): :func:`to_jsonable` of it."""
        from memroute.config.serialization import to_jsonable

        data: dict[str, Any] = to_jsonable(self)
        return data


@attrs.frozen(kw_only=True)
class HistoryReport:
    """The history of one memory of one tenant (``mem.history``): every recorded change, oldest first, and the
    memory as it is now (``None`` once deleted: its history stays readable, see docs/pipeline.md, "History")."""

    memory_id: str
    api_key_id: str
    current: Memory | None
    entries: tuple[HistoryEntry, ...]
    recorded: bool
    """Whether this deployment keeps history (some backend declares ``capabilities.history``); without it
    ``entries`` is always empty."""


@attrs.frozen(kw_only=True)
class ClearReport:
    """The outcome of ``clear``: which memories of one tenant matched, and how many were really deleted."""

    api_key_id: str
    dry_run: bool
    type: str | None = None
    session_id: str | None = None
    older_than_days: int | None = None
    matched: int = 0
    """How many memories matched the filters (all of them: there is no page cap)."""
    deleted: int = 0
    """How many were deleted (0 in a dry run); a memory deleted concurrently by someone else is not counted."""
    ids: tuple[str, ...] = ()
    """The matching ids, oldest first."""
    tokens: int = 0
    """Their token estimate (``ceil(len / 4)`` each)."""


@attrs.frozen(kw_only=True)
class EndUserErasure:
    """The outcome of erasing one end user of an app (``forget_end_user``; GDPR-style): what was deleted, and
    what is still left in each place the memories lived once the deletions were replicated."""

    tenant: str
    """The app's tenant."""
    end_user: str
    api_key_id: str
    """The end user's composite tenant (``shop/u1``)."""
    dry_run: bool
    matched: int = 0
    deleted: int = 0
    ids: tuple[str, ...] = ()
    """The memories (to be) deleted, oldest first."""
    remaining: dict[str, int | None] = attrs.field(factory=dict)
    """Memories of the end user still held, per backend (primary and fallbacks); ``None`` where a backend did
    not answer (its deletions wait in the outbox and are replayed when it is back)."""
    vectors_remaining: int | None = None
    """Vectors of the end user still in the vector store (``None`` without one)."""
    replication_pending: int = 0
    """Outbox entries for the erased memories not yet applied to a backend when the report was made (never
    dropped: retried until they are)."""
    histories_deleted: int | None = 0
    """Conversation histories of the end user deleted from the state store (the framework sessions'); ``None``
    when the deployment's state store cannot delete by name (a plugin's)."""
    change_history_deleted: int | None = 0
    """Entries of the erased memories' change history (what they said before, :meth:`history`) removed from the
    backends that keep one; ``None`` when a backend keeping history did not answer."""

    _json_properties: ClassVar[tuple[str, ...]] = ("complete",)

    @property
    def complete(self) -> bool:
        """Whether nothing of the end user is left anywhere (always False for a dry run that matched some)."""
        if self.dry_run:
            return self.matched == 0
        return (all(count == 0 for count in self.remaining.values()) and not self.vectors_remaining
                and self.replication_pending == 0 and self.histories_deleted is not None
                and self.change_history_deleted is not None)


@attrs.frozen(kw_only=True)
class CacheStats:
    """The embedding cache's counters (process-wide: the cache is shared by every tenant)."""

    hits: int = 0
    misses: int = 0
    size: int = 0

    _json_properties: ClassVar[tuple[str, ...]] = ("hit_rate",)

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return round(self.hits / total, 4) if total else 0.0


@attrs.frozen(kw_only=True)
class MemoryStats:
    """One tenant's list statistics (the reference's ``GET /api/memory`` ``stats`` block)."""

    api_key_id: str
    total: int
    by_type: dict[str, int] = attrs.field(factory=dict)
    """Every memory type, 0 when the tenant has none of it."""
    tokens_used: int = 0
    """Sum of the token estimate ``ceil(len / 4)`` over the tenant's memories."""
    cache: CacheStats = attrs.field(factory=CacheStats)


# --- operations ------------------------------------------------------------------------------------------

@attrs.frozen(kw_only=True)
class BackendHealth:
    """One backend's answer to a health probe, with its circuit breaker and outbox backlog."""

    name: str
    type: str
    role: str
    """``primary`` or ``fallback``."""
    ok: bool
    latency_ms: float
    error: str | None = None
    breaker: str = "closed"
    """``closed``, ``open`` or ``half-open``."""
    pending: int = 0
    """Outbox entries still owed to this backend."""
    abandoned_writes: int = 0
    """Writes that timed out but may still be running (the backend's replay waits for them)."""


@attrs.frozen(kw_only=True)
class OutboxFailure:
    """An outbox entry that failed at least once and is waiting for its retry."""

    id: int
    target: str
    op: str
    memory_id: str | None
    attempts: int
    last_error: str | None
    next_attempt_in_s: float


@attrs.frozen(kw_only=True)
class OutboxStats:
    """The replication outbox: how much is owed to whom, and what keeps failing."""

    depth: int = 0
    by_target: dict[str, int] = attrs.field(factory=dict)
    oldest_age_s: float | None = None
    failing: tuple[OutboxFailure, ...] = ()
    dead_letters: int = 0
    """Entries set aside after failing with bad input (``Outbox.dead_letters``): never blocking the rest."""


@attrs.frozen(kw_only=True)
class HealthReport:
    """``health()``: every backend probed now, and the outbox."""

    backends: tuple[BackendHealth, ...]
    outbox: OutboxStats = attrs.field(factory=OutboxStats)

    @property
    def primary(self) -> BackendHealth | None:
        return next((b for b in self.backends if b.role == "primary"), None)

    @classmethod
    def from_manager(cls, data: Mapping[str, Any]) -> HealthReport:
        """From the manager's health mapping (its keys are these fields)."""
        outbox = dict(data.get("outbox") or {})
        failing = tuple(OutboxFailure(**f) for f in outbox.pop("failing", ()))
        return cls(backends=tuple(BackendHealth(**b) for b in data.get("backends", ())),
                   outbox=OutboxStats(**outbox, failing=failing))


@attrs.frozen(kw_only=True)
class MemoryStatus:
    """The ``[memory]`` settings that decide what augment does."""

    enabled: bool
    strategy: str
    max_tokens: int
    retention_days: int


@attrs.frozen(kw_only=True)
class BackendsStatus:
    """The configured backends: primary, fallbacks in order, and each instance's own description."""

    primary: str
    fallbacks: tuple[str, ...] = ()
    instances: tuple[dict[str, Any], ...] = ()
    """``MemoryBackend.describe()`` of each (name, type and what the plugin adds; no secrets)."""


@attrs.frozen(kw_only=True)
class StatusReport:
    """``status()`` (``memroute status --json``): where data lives, memory settings, backends, each retrieval
    tier, and a fresh health probe. The engine blocks (``keyword``, ``embedding``, ``vector_store``,
    ``fusion``, ``rerank``) are the retrieval engine's own mappings (docs/retrieval.md lists their keys); a
    new engine block gets a field here."""

    data_dir: str
    state_dir: str
    memory: MemoryStatus
    backends: BackendsStatus
    keyword: dict[str, Any] = attrs.field(factory=dict)
    embedding: dict[str, Any] = attrs.field(factory=dict)
    vector_store: dict[str, Any] = attrs.field(factory=dict)
    fusion: dict[str, Any] = attrs.field(factory=dict)
    rerank: dict[str, Any] = attrs.field(factory=dict)
    health: HealthReport | None = None
    group_commit: dict[str, Any] = attrs.field(factory=dict)
    """How this process's adds were batched since the service opened (:mod:`memroute.deployment.group_commit`):
    ``batches`` and ``items`` written, ``mean_batch`` / ``last_batch`` / ``largest_batch`` (items), the
    ``max_batch`` limit and the adds ``waiting`` now. Per process: a server's ``engine-status`` shows the
    server's."""
    extraction: dict[str, Any] = attrs.field(factory=dict)
    """The extractor chain (``extractors``), background extraction jobs that failed (``failures``) or wait
    (``pending``) in this process, and one block per background extractor (``llm``: requests, tokens per tenant,
    failures by reason, which it keeps in the data directory; docs/extraction.md)."""


@attrs.frozen(kw_only=True)
class ReindexReport:
    """``reindex()``: how many memories were embedded now, what is still pending, and why it stopped."""

    processed: int = 0
    errors: int = 0
    pending: int = 0
    enqueued: int = 0
    """How many memories were queued for this run (all of them with ``force``)."""
    last_error: str | None = None
    reason: str | None = None
    """Why nothing was indexed (no embedding source / vector store), when that is the case."""



# --- retrieval preview -----------------------------------------------------------------------------------

@attrs.frozen(kw_only=True)
class PreviewMemory:
    """One memory retrieval would inject, with how it ranked."""

    id: str
    type: str
    key: str
    content: str
    score: float
    """Its relevance to the query, in [0, 1], calibrated (docs/retrieval.md, "Score and floor")."""
    tokens: int
    tier: str
    """What produced it: ``keyword``, ``vector``, ``hybrid`` or ``recency``."""
    ranks: dict[str, int] = attrs.field(factory=dict)
    """Each leg's 1-based rank, where the memory appeared in that leg."""
    leg_scores: dict[str, float] = attrs.field(factory=dict)
    """For debugging: each leg's raw score (``keyword``: bm25-like, higher is better; ``vector``: the vector
    store's ranking score), and what the relevance was computed from (``cosine``: the plain cosine,
    ``coverage``: the share of the query's content words present, ``fused``: hybrid fusion's score)."""
    metadata: dict[str, Any] = attrs.field(factory=dict)
    """The memory's metadata (``category``, ``polarity``, ``source``, ... for extracted facts)."""
    said_at: datetime | None = None
    """When the memory's message was said (``metadata.said_at``); ``None`` when it records no such time."""

    _json_properties: ClassVar[tuple[str, ...]] = ("vec_score", "fts_score")

    @property
    def vec_score(self) -> float | None:
        """The vector leg's cosine similarity (the reference's ``vecScore``), when that leg found it."""
        return self.leg_scores.get("vector")

    @property
    def fts_score(self) -> float | None:
        """The keyword leg's score (the reference's ``ftsScore``), when that leg found it."""
        return self.leg_scores.get("keyword")


@attrs.frozen(kw_only=True)
class PreviewResolution:
    """How the query was served: embedding source and model, vector store, strategy, fallbacks."""

    embedding_source: str | None
    embedding_model: str | None
    vector_store: str | None
    """The vector store that served the vector leg (``None`` when no vector leg ran)."""
    strategy_requested: str
    strategy_used: str
    legs: tuple[str, ...] = ()
    backend: str = ""
    """The backend instance that served the keyword / recency leg."""
    fallback: bool = False
    """True when the primary could not serve and a fallback did."""
    degraded: bool = False
    rerank_applied: bool = False
    """Whether a reranker re-scored the top candidates."""
    reranker: str | None = None
    """The reranker (``name:model``) that did, when one did."""
    fallback_reason: str | None = None
    """Why a better tier did not serve (the provenance's reason)."""


@attrs.frozen(kw_only=True)
class RetrievalPreview:
    """``preview()``: what retrieval returns for a query within a token budget (the Playground, ``memroute
    search``, and the retrieval part of :class:`AugmentReport`)."""

    query: str
    api_key_id: str
    memories: tuple[PreviewMemory, ...]
    resolution: PreviewResolution
    total_tokens: int = attrs.field(metadata={"wire": "totalTokensUsed"})
    """Tokens of the memories returned (``totalTokensUsed`` over HTTP, the reference's name)."""
    budget_max_tokens: int | None
    """The budget the memories were fitted into (``None``: no budget, only ``limit``)."""
    limit: int

    @classmethod
    def from_hits(cls, *, query: str, api_key_id: str, hits: Sequence[SearchHit], provenance: Provenance,
                  embedding: Mapping[str, Any], max_tokens: int | None, limit: int) -> RetrievalPreview:
        """The preview of ranked ``hits`` (already fitted to the budget) and how they were served;
        ``embedding`` is the engine's embedding resolution (``source``, ``model``)."""
        memories = tuple(
            PreviewMemory(id=h.memory.id, type=h.memory.type.value, key=h.memory.key, content=h.memory.content,
                          score=h.score, tokens=h.tokens, tier=h.tier, ranks=dict(h.ranks),
                          leg_scores=dict(h.leg_scores), metadata=dict(h.memory.metadata), said_at=h.said_at)
            for h in hits
        )
        resolution = PreviewResolution(
            embedding_source=embedding.get("source"), embedding_model=embedding.get("model"),
            vector_store=provenance.vector_store, strategy_requested=provenance.strategy_requested,
            strategy_used=provenance.strategy_used, legs=tuple(provenance.legs), backend=provenance.backend,
            fallback=provenance.fallback, degraded=provenance.degraded,
            rerank_applied=provenance.rerank is not None, reranker=provenance.rerank, fallback_reason=provenance.reason,
        )
        return cls(query=query, api_key_id=api_key_id, memories=memories, resolution=resolution,
                   total_tokens=sum(m.tokens for m in memories), budget_max_tokens=max_tokens, limit=limit)


@attrs.frozen(kw_only=True)
class AugmentReport:
    """``explain_augment()``: the request to send, and what was retrieved and injected, or why nothing was."""

    request: Any
    """The request to send: the input object itself when nothing was injected."""
    query: str = ""
    block: str = ""
    """The memory block injected (empty when none)."""
    skipped: str | None = None
    """Why nothing was injected (``memory disabled``, ``opted out by header``, ``no user message``,
    ``retrieval failed``, ``no memories``, ``nowhere to inject``, ``injection failed``)."""
    preview: RetrievalPreview | None = None
    """The memories retrieval chose (those injected, after typed decay), with ranks and resolution (``None``
    when nothing was retrieved, or when the caller asked for no preview)."""
    count: int = 0
    """How many memories the block holds (0 when nothing was injected)."""
    memory_ids: tuple[str, ...] = ()
    """The ids of the memories injected, best first: those the call counts as accessed (with
    ``record_access=False``, those the caller may count itself with ``record_access``); empty when nothing was
    injected."""
    searched: bool = False
    """Whether this call ran a search: ``False`` when nothing needed one (memory off, opted out, no user message)
    and when the retrieval of an earlier call with the same message was reused (``preview=False``)."""

    _json_properties: ClassVar[tuple[str, ...]] = ("injected",)

    @property
    def injected(self) -> bool:
        return bool(self.block)
