"""The retrieval engine: keyword, vector and hybrid search over one tenant's memories, with every path
applying the same filters (owner, expiry, retention, session) and saying how it was served.

Tiers, best first: hybrid (keyword + vector, fused) → vector → keyword → recency. When a tier cannot serve
(no embedding source, no vector store, an index being rebuilt after a signature change, an embedding error)
the search degrades to the next one **visibly**: the result's provenance names the legs that ran and why it
is degraded.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from memroute.config.settings import MemorySettings
from memroute.embedding.cache import uncached
from memroute.errors import MemrouteError
from memroute.interfaces import EmbeddingSignature, EmbeddingSource, Reranker, VectorHit, VectorStore
from memroute.models import Memory, Provenance, SearchHit, SearchQuery, SearchResult
from memroute.retrieval.budget import fit_budget
from memroute.retrieval.fusion import DEFAULT_KEYWORD_WEIGHT, fuse, fuse_scores, keyword_query
from memroute.retrieval.gil import checkpoint
from memroute.retrieval.indexer import Indexer, IndexQueue, store_identity
from memroute.retrieval.ordering import order_hits, order_pairs, recency_key
from memroute.retrieval.question import QuestionCues, fitting, prefer, read_question
from memroute.retrieval.relevance import Calibration, iter_scored
from memroute.routing.manager import ManagedSearch, MemoryManager

__all__ = [
    "BUDGET_TOKENS_PER_MEMORY", "CANDIDATE_CAP", "CUE_SCAN_DEPTH", "MIN_CANDIDATES", "RECENT_MATCH_DEPTH",
    "RetrievalEngine",
]

log = logging.getLogger("memroute.retrieval")

CANDIDATE_CAP = 100
"""Most candidates per leg for an ordinary search (see :meth:`RetrievalEngine.candidate_depth`)."""
MIN_CANDIDATES = 50
"""Fewest candidates per leg (see :meth:`RetrievalEngine.candidate_depth`)."""
BUDGET_TOKENS_PER_MEMORY = 16
"""The memory size a budgeted search assumes when it sizes its candidate lists (see
:meth:`RetrievalEngine.budget_depth`): a one-sentence fact, ``ceil(len / 4)`` of about 64 characters."""
RECENT_MATCH_DEPTH = 200
"""Keyword matches the ``exact`` strategy puts in recency order (at least; ten times the limit when larger)."""
CUE_SCAN_DEPTH = 1000
"""The newest memories an open-ended question of time or people ("what did I say yesterday?") looks through for
the ones that fit it (:mod:`memroute.retrieval.question`)."""
DEEPER_AT = 0.5
"""A tenant whose budgeted searches went to the full depth at least this often (running average) has its
candidates fetched at the full depth at once (see :meth:`RetrievalEngine.search`)."""
DEEPER_WEIGHT = 0.25
"""The weight of the latest budgeted search in that running average."""
DEEPER_TENANTS = 10_000
"""Tenants whose average is kept (the least recently searched ones are forgotten first)."""


@attrs.define
class _Legs:
    """One fetch of both legs' candidates, ranked at any depth up to ``depth`` (:meth:`RetrievalEngine._rank`)."""

    depth: int
    keyword: ManagedSearch | None = None
    vector: list[VectorHit] | None = None
    """The vector store's candidates, best first (``None``: the vector tier could not serve; see ``reasons``)."""
    reasons: list[str] = attrs.Factory(list)
    known: dict[str, Memory] = attrs.Factory(dict)
    """The keyword leg's memories by id (what every ranking of these legs need not read again)."""
    read: dict[str, Memory] = attrs.Factory(dict)
    """Memories of vector candidates read so far (a deeper ranking reads only the ones it adds)."""
    unread: set[str] = attrs.Factory(set)
    """Vector candidates that were asked for and are gone (deleted since they were indexed)."""


class RetrievalEngine:
    """Searches through the :class:`MemoryManager` (keyword / recency legs, served by the primary or a
    fallback) and the vector store (vector leg), and keeps the vector index in step with writes."""

    def __init__(
        self,
        manager: MemoryManager,
        *,
        memory_settings: MemorySettings | None = None,
        embedder: EmbeddingSource | None = None,
        vector_store: VectorStore | None = None,
        index_path: str | Path = ":memory:",
        resolution: dict[str, Any] | None = None,
        prepare: Callable[[Any], None] | None = None,
        background: bool = True,
        lazy_budget: int = 256,
        quantization: str = "float32",
        reranker: Reranker | None = None,
        rerank_candidates: int = 30,
    ) -> None:
        self.manager = manager
        self.reranker = reranker
        self.rerank_candidates = rerank_candidates
        self.settings = memory_settings or MemorySettings()
        self.embedder = embedder
        self.vector_store = vector_store
        self.lazy_budget = lazy_budget
        self.resolution = resolution or {
            "source": getattr(embedder, "source", None), "model": getattr(embedder, "model", None),
            "dimensions": getattr(embedder, "dimensions", None),
            "reason": None if embedder else "no embedding source configured",
        }
        self.indexer: Indexer | None = None
        self.vector_reason: str | None = None
        self._index_path, self._prepare, self._background = index_path, prepare, background
        self._quantization = quantization
        self._swap_lock = threading.Lock()
        self._deeper: dict[str, float] = {}
        """Per tenant, how often its budgeted searches went to the full depth (see :meth:`search`)."""
        self._deeper_lock = threading.Lock()
        if embedder is None:
            self.vector_reason = str(self.resolution.get("reason") or "no embedding source configured")
        elif vector_store is None:
            self.vector_reason = "no vector store configured"
        else:
            try:
                self.indexer = self._make_indexer(vector_store, IndexQueue(index_path, prepare=prepare))
            except Exception as exc:
                self.vector_reason = f"vector index unavailable: {type(exc).__name__}: {exc}"
                log.warning("memroute: %s", self.vector_reason)

    def _make_indexer(self, store: VectorStore, queue: IndexQueue) -> Indexer:
        assert self.embedder is not None
        return Indexer(
            fetch=self.manager.get_many,
            enumerate_memories=lambda: self.manager.iter_all(),
            count_memories=self._count_memories,
            embedder=self.embedder,
            store=store,
            queue=queue,
            markers=self.manager.reindex_markers(),
            quantization=self._quantization,
            background=self._background,
            target=store_identity(store),
        )

    def index_signature(self) -> EmbeddingSignature:
        """The signature the vector index is bound to (the embedder's, with ``[vectors] quantization``)."""
        assert self.embedder is not None
        return self.embedder.signature().with_quantization(self._quantization)

    def replace_vector_store(self, store: VectorStore | None) -> None:
        """Index into ``store`` from now on (a vector-store switch at run time: ``PUT /api/settings/qdrant``).
        The old indexer stops (its in-flight batch finishes), a new one on the same durable queue binds the new
        store: a store the index was not built in is emptied and every memory enqueued again (the rebuild,
        done in the background; searches degrade to keyword for a tenant until its memories are indexed),
        the same store is healed. The old store is closed. When the new one cannot be bound, the old indexer
        is restarted and the error raised (the caller's store is closed)."""
        with self._swap_lock:
            old_indexer, old_store = self.indexer, self.vector_store
            if old_indexer is not None:
                old_indexer.close()
                with old_indexer.process_lock:  # a lazy backfill running on a request thread finishes first
                    pass
            queue = old_indexer.queue if old_indexer is not None else None
            if store is None or self.embedder is None:
                self.indexer, self.vector_store = None, store
                self.vector_reason = "no vector store configured" if self.embedder is not None else self.vector_reason
                if queue is not None:
                    queue.close()
            else:
                try:
                    indexer = self._make_indexer(store, queue or IndexQueue(self._index_path, prepare=self._prepare))
                except Exception:
                    store.close()
                    if old_indexer is not None and old_store is not None:
                        self.indexer = self._make_indexer(old_store, old_indexer.queue)
                    raise
                self.indexer, self.vector_store, self.vector_reason = indexer, store, None
            if old_store is not None and old_store is not store:
                old_store.close()

    def _count_memories(self) -> int:
        from memroute.models import ListFilter

        return self.manager.list(ListFilter(limit=1)).total

    # --- writes ----------------------------------------------------------------------------------------
    def on_written(self, memories: Sequence[Memory]) -> None:
        """Queue the vectors of created / updated memories (embedded in the background)."""
        if self.indexer is not None and memories:
            self.indexer.enqueue(memories)

    def on_deleted(self, memory_id: str, api_key_id: str = "") -> None:
        if self.indexer is not None:
            self.indexer.enqueue_delete(memory_id, api_key_id)

    # --- search ----------------------------------------------------------------------------------------
    @property
    def keyword_weight(self) -> float:
        """The keyword leg's weight in score fusion: ``[memory] keyword_weight``, else the embedding source's
        calibrated value, else the default."""
        if self.settings.keyword_weight is not None:
            return self.settings.keyword_weight
        calibrated = getattr(self.embedder, "fusion_keyword_weight", None)
        return float(calibrated) if isinstance(calibrated, (int, float)) else DEFAULT_KEYWORD_WEIGHT

    def candidate_depth(self, limit: int) -> int:
        """How many candidates each leg returns for a search of ``limit`` results: three times the limit (so
        fusion has the other leg's near misses to promote) and at least :data:`MIN_CANDIDATES` (score fusion
        measures each leg against its median candidate, calibrated at this depth) and ``vec_top_k``; at most
        :data:`CANDIDATE_CAP` unless the limit itself is larger."""
        return max(limit, min(max(3 * limit, MIN_CANDIDATES), CANDIDATE_CAP), self.settings.vec_top_k)

    def budget_depth(self, limit: int, max_tokens: int) -> int:
        """The candidates per leg a budgeted search starts with: what ``max_tokens`` holds at
        :data:`BUDGET_TOKENS_PER_MEMORY` tokens a memory (and at least :data:`MIN_CANDIDATES` and
        ``vec_top_k``), never more than :meth:`candidate_depth`. Candidates past what the budget can take cost
        reading, filtering and fusing (about 15 us each) and are never injected; when the memories turn out
        smaller than that, :meth:`search` looks deeper."""
        fits = -(-max_tokens // BUDGET_TOKENS_PER_MEMORY)
        return min(self.candidate_depth(limit), max(fits, MIN_CANDIDATES, self.settings.vec_top_k))

    def search(self, query: SearchQuery, *, max_tokens: int | None = None,
               min_score: float | None = None) -> SearchResult:
        """Ranked memories for ``query``, at most ``query.limit`` of them, within ``max_tokens`` when given.

        Every hit of a semantic or hybrid search is scored with its relevance
        (:mod:`memroute.retrieval.relevance`) and those below ``min_score`` (default ``[memory] min_score``)
        are left out, with or without a budget: the same floor for ``search``, ``augment`` and the preview.
        With a reranker, the floor applies before it re-scores. A budgeted search also sizes its candidate
        lists to the budget (:meth:`budget_depth`); when a leg came back full and the budget still has room
        for another memory of the size of those chosen, it ranks again at the full depth, so small memories
        still fill the budget.

        A question that names a time or a person (``[memory] question_cues``) is searched without its time
        words, and the memories said then, or by that person, move up the fused ranking
        (:mod:`memroute.retrieval.question`); one of nothing but a time or a person lists what fits.

        Which depth answers is decided on the ranking at the budget's depth, always; what is learned per
        tenant is only how the candidates are fetched. A tenant whose recent budgeted searches mostly went
        to the full depth (:data:`DEEPER_AT` of an average over :data:`DEEPER_WEIGHT`) has both legs fetched
        at the full depth at once, and the budget-depth ranking is the top of those lists (a leg's best ``d``
        of ``n`` are its ``d`` best), so the same memories are chosen with one search instead of two."""
        with self.manager.read_scope():
            return self._search(query, max_tokens, self.settings.min_score if min_score is None else min_score)

    def _search(self, query: SearchQuery, max_tokens: int | None, floor: float) -> SearchResult:
        if not query.text.strip():
            return self._recency(query, max_tokens)
        if query.strategy == "exact":
            return self._recent_matching(query, max_tokens)
        cues = read_question(query.text, query.now) if self.settings.question_cues else None
        if cues is not None and cues.open_ended:
            answered = self._fitting(query, cues, max_tokens)
            if answered.hits:
                return answered
            cues = None  # nothing was said then, or by them: the question's words as asked ("what's due in June?")
        if cues is not None and cues.text != query.text:
            query = attrs.evolve(query, text=cues.text)  # the legs match the topic, not "yesterday"
        full = self.candidate_depth(query.limit)
        depth = full if max_tokens is None else self.budget_depth(query.limit, max_tokens)
        walk = max_tokens is not None and depth < full
        ahead = walk and self.reranker is None and self._deeper.get(query.api_key_id, 0.0) >= DEEPER_AT
        legs = self._fetch(query, full if ahead else depth, max_tokens)
        hits, provenance, saturated = self._rank(query, legs, depth, max_tokens, floor, cues)
        chosen = fit_budget(hits, max_tokens, query.limit)
        if walk and saturated and max_tokens is not None and len(chosen) < query.limit:
            sizes = sorted(hit.tokens for hit in chosen)
            deeper = max_tokens - sum(sizes) >= (sizes[len(sizes) // 2] if sizes else 1)
            if deeper:
                if not ahead:
                    legs = self._fetch(query, full, max_tokens)
                hits, provenance, _ = self._rank(query, legs, full, max_tokens, floor, cues)
                chosen = fit_budget(hits, max_tokens, query.limit)
            self._learn(query.api_key_id, deeper)
        elif walk:
            self._learn(query.api_key_id, False)
        return SearchResult(hits=tuple(chosen), provenance=provenance)

    def _learn(self, tenant: str, deeper: bool) -> None:
        """Fold whether a budgeted search of ``tenant`` went to the full depth into its running average."""
        with self._deeper_lock:
            seen = self._deeper.pop(tenant, None)
            self._deeper[tenant] = float(deeper) if seen is None else (
                seen + DEEPER_WEIGHT * (float(deeper) - seen))
            if len(self._deeper) > DEEPER_TENANTS:
                del self._deeper[next(iter(self._deeper))]

    def _vector_depth(self, query: SearchQuery, depth: int, max_tokens: int | None) -> int:
        rerank = self.rerank_candidates if self.reranker is not None else 0
        # Semantic search returns the vector ranking itself: no fusion needs the deeper candidate list.
        vector_depth = depth if query.strategy == "hybrid" else max(query.limit, self.settings.vec_top_k, rerank)
        return vector_depth if max_tokens is None else min(vector_depth, max(depth, rerank))

    def _fetch(self, query: SearchQuery, depth: int, max_tokens: int | None) -> _Legs:
        """Both legs' candidates at ``depth`` (the vector leg's memories are read by :meth:`_rank`, only those
        a ranking uses)."""
        # The legs run one after the other: measured, running the keyword leg on a second thread made hybrid
        # slower (8.1 ms against 6.6 ms at 10k memories), the two legs contending for the GIL. Measured again
        # once the keyword leg was mostly its FTS5 statement (which runs without the GIL): still 0.3-0.5 ms
        # slower at 500 and 2,000 memories, since the helper needs the GIL to start and to take its rows while
        # the vector leg holds it (round eleven of docs/performance.md's history). The keyword leg
        # runs first so the vector leg reads only the memories it did not already return (reading and
        # building memory rows is most of a hybrid search's cost).
        legs = _Legs(depth=depth)
        if query.strategy == "hybrid":
            legs.keyword = self._keyword_leg(query, depth)
            legs.known = {h.memory.id: h.memory for h in legs.keyword.hits}
            checkpoint()  # stage boundaries: where the async API's workers let the event loop in (retrieval.gil)
        legs.vector = self._vector_candidates(query, self._vector_depth(query, depth, max_tokens), legs.reasons)
        checkpoint()
        if legs.vector is None and legs.keyword is None:
            legs.keyword = self._keyword_leg(query, depth)
            legs.known = {h.memory.id: h.memory for h in legs.keyword.hits}
        return legs

    def _rank(self, query: SearchQuery, legs: _Legs, depth: int, max_tokens: int | None,
              floor: float, cues: QuestionCues | None = None) -> tuple[Iterator[SearchHit], Provenance, bool]:
        """The fused (or single-leg) ranking from the best ``depth`` candidates of each leg (at most what
        ``legs`` fetched), the memories that fit the question's time and people (``cues``) moved up, each hit
        scored with its relevance as it is taken and those below ``floor`` left out; how it was served; and
        whether a leg returned all ``depth`` it was asked for (so there may be more)."""
        reasons = list(legs.reasons)
        served = legs.keyword
        keyword_hits: list[tuple[Memory, float]] = []
        if served is not None:
            keyword_hits = order_pairs((h.memory, h.score) for h in served.hits[:depth] if query.admits(h.memory))
        vector_depth = self._vector_depth(query, depth, max_tokens)
        vector_hits = None
        if legs.vector is not None:
            known = {} if served is None else legs.known
            # Fetched ahead (a ranking at the budget's depth first, most likely one at the full depth next): the
            # memories of every candidate are read at once, one read instead of two.
            ahead = legs.vector if legs.depth > depth else None
            vector_hits = self._vector_hits(query, legs, legs.vector[:vector_depth], known=known, read_ahead=ahead)
        saturated = (served is not None and len(served.hits) >= depth) or (
            legs.vector is not None and len(legs.vector) >= vector_depth)
        if vector_hits is None:
            hits = fuse(keyword_hits, [], k=self.settings.rrf_k)
            legs_used: tuple[str, ...] = ("keyword",)
            used = "keyword"
        elif query.strategy == "semantic":
            hits = fuse([], vector_hits, k=self.settings.rrf_k)
            hits = order_hits(attrs.evolve(h, score=h.leg_scores["vector"]) for h in hits)
            legs_used, used = ("vector",), "semantic"
        elif self.settings.fusion == "rrf":
            hits = fuse(keyword_hits, vector_hits, k=self.settings.rrf_k, query=query.text)
            legs_used, used = ("keyword", "vector"), "hybrid"
        else:
            hits = fuse_scores(keyword_hits, vector_hits, keyword_weight=self.keyword_weight)
            legs_used, used = ("keyword", "vector"), "hybrid"
        if cues is not None:
            hits = prefer(hits, cues)
        candidates = legs.vector[:vector_depth] if legs.vector is not None and vector_hits is not None else None
        scored = self._scored(query, hits, candidates, fused=used == "hybrid", floor=floor)
        reranked = rerank_error = None
        if self.reranker is not None and vector_hits is not None:
            head = list(itertools.islice(scored, self.rerank_candidates))
            if head:
                head, reranked, rerank_error = self._rerank(query.text, head)
                if rerank_error is not None:
                    reasons.append(f"rerank failed ({rerank_error}): fused order kept")
            scored = itertools.chain(head, scored)
        backend, fallback = self._served_by(served)
        if fallback and served is not None:
            reasons.append(f"primary unavailable ({served.error}); served by fallback {backend}")
        provenance = Provenance(
            backend=backend, strategy_requested=query.strategy, strategy_used=used, legs=legs_used,
            degraded=bool(reasons), reason="; ".join(reasons) or None, fallback=fallback,
            vector_store=getattr(self.vector_store, "store_name", None) if vector_hits is not None else None,
            rerank=reranked, rerank_error=rerank_error,
        )
        return scored, provenance, saturated

    def _rerank(self, text: str, hits: list[SearchHit]) -> tuple[list[SearchHit], str | None, str | None]:
        """The top ``rerank_candidates`` hits re-scored by the reranker, best first (``score`` is the
        reranker's relevance; ``ranks`` / ``leg_scores`` gain ``rerank``), then the rest in fused order.
        A failing reranker leaves ``hits`` as they were and says why (like the reference: fail open, but
        visibly)."""
        assert self.reranker is not None
        head, tail = hits[:self.rerank_candidates], hits[self.rerank_candidates:]
        try:
            results = self.reranker.rerank(text, [hit.memory.content for hit in head], top_n=len(head))
        except Exception as exc:
            log.warning("memroute: reranker failed, fused order kept: %s", exc)
            return hits, None, f"{type(exc).__name__}: {exc}"
        scored = {r.index: r.score for r in results if 0 <= r.index < len(head)}
        if not scored:
            return hits, None, "the reranker returned no results"
        lowest = min(scored.values())
        rescored = []
        for index, hit in enumerate(head):
            # A document the reranker left out follows the ones it scored (ties: recency, then id).
            score = scored.get(index, lowest - 1.0)
            rescored.append(attrs.evolve(hit, score=score, leg_scores={**hit.leg_scores, "rerank": score}))
        ordered = order_hits(rescored)
        ordered = [attrs.evolve(hit, ranks={**hit.ranks, "rerank": rank}) for rank, hit in enumerate(ordered, 1)]
        name = f"{self.reranker.name}:{self.reranker.model}" if self.reranker.model else self.reranker.name
        return ordered + tail, name, None

    def _keyword_leg(self, query: SearchQuery, depth: int) -> ManagedSearch:
        """The keyword leg's ``depth`` best matches, best first (the backend's order: its best ``d`` of
        these are what a search at depth ``d`` returns)."""
        return self.manager.search(attrs.evolve(query, text=keyword_query(query.text), strategy="hybrid",
                                                limit=depth))

    def _served_by(self, served: ManagedSearch | None) -> tuple[str, bool]:
        if served is None:
            return self.manager.primary.name, False
        return served.backend, served.fallback

    def _recency(self, query: SearchQuery, max_tokens: int | None) -> SearchResult:
        served = self.manager.search(attrs.evolve(query, strategy="exact"))
        admitted = sorted((h.memory for h in served.hits if query.admits(h.memory)), key=recency_key)
        hits = [
            SearchHit(memory=memory, score=1.0 / rank, tier="recency", ranks={"recency": rank},
                      leg_scores={"recency": 1.0 / rank})
            for rank, memory in enumerate(admitted, start=1)
        ]
        reasons = []
        if query.strategy != "exact":
            reasons.append("empty query: most recent memories")
        return SearchResult(hits=tuple(fit_budget(hits, max_tokens, query.limit)),
                            provenance=self._recency_provenance(query, served, ("recency",), reasons))

    def _fitting(self, query: SearchQuery, cues: QuestionCues, max_tokens: int | None) -> SearchResult:
        """An open-ended question of time or people ("what did I say yesterday?", "what did Maria say?"): the
        memories that fit it among the newest :data:`CUE_SCAN_DEPTH`, newest event first (there is no topic to
        rank them by)."""
        served = self.manager.search(attrs.evolve(query, text="", strategy="exact", limit=CUE_SCAN_DEPTH))
        found = fitting((h.memory for h in served.hits if query.admits(h.memory)), cues)
        marks = {**({"time": 1.0} if cues.window is not None else {}), **({"person": 1.0} if cues.names else {})}
        hits = [
            SearchHit(memory=memory, score=1.0 / rank, tier="recency", ranks={"recency": rank},
                      leg_scores={"recency": 1.0 / rank, **marks})
            for rank, memory in enumerate(found, start=1)
        ]
        return SearchResult(hits=tuple(fit_budget(hits, max_tokens, query.limit)),
                            provenance=self._recency_provenance(query, served, ("recency",), []))

    def _recent_matching(self, query: SearchQuery, max_tokens: int | None) -> SearchResult:
        """Strategy ``exact`` with a query (the reference's behaviour): only memories that match it (a
        keyword score above 0), newest first. The matches come from the keyword leg, ranked by it and cut at
        :data:`RECENT_MATCH_DEPTH` (or ten times the limit), then put in recency order."""
        depth = min(1000, max(RECENT_MATCH_DEPTH, 10 * query.limit))
        served = self.manager.search(
            attrs.evolve(query, text=keyword_query(query.text), strategy="hybrid", limit=depth))
        matched = [(h.memory, h.score) for h in served.hits if h.score > 0 and query.admits(h.memory)]
        keyword_rank = {memory.id: rank for rank, (memory, _) in enumerate(order_pairs(matched), start=1)}
        matched.sort(key=lambda pair: recency_key(pair[0]))
        hits = [
            SearchHit(memory=memory, score=1.0 / rank, tier="recency",
                      ranks={"recency": rank, "keyword": keyword_rank[memory.id]},
                      leg_scores={"recency": 1.0 / rank, "keyword": float(score)})
            for rank, (memory, score) in enumerate(matched, start=1)
        ]
        return SearchResult(hits=tuple(fit_budget(hits, max_tokens, query.limit)),
                            provenance=self._recency_provenance(query, served, ("keyword", "recency"), []))

    @staticmethod
    def _recency_provenance(query: SearchQuery, served: ManagedSearch, legs: tuple[str, ...],
                            reasons: list[str]) -> Provenance:
        if served.fallback:
            reasons.append(f"primary unavailable ({served.error}); served by fallback {served.backend}")
        return Provenance(
            backend=served.backend, strategy_requested=query.strategy, strategy_used="exact", legs=legs,
            degraded=(bool(reasons) and query.strategy != "exact") or served.fallback,
            reason="; ".join(reasons) or None, fallback=served.fallback,
        )

    def _vector_candidates(self, query: SearchQuery, k: int, reasons: list[str]) -> list[VectorHit] | None:
        """The vector store's ``k`` best candidates, best first, or ``None`` (with a reason) when the vector
        tier cannot serve this query."""
        indexer, store, embedder = self.indexer, self.vector_store, self.embedder  # one view across a switch
        if indexer is None or embedder is None or store is None:
            reasons.append(f"{self.vector_reason}: degraded to keyword")
            return None
        ready, pending = indexer.tenant_ready(query.api_key_id, self.lazy_budget)
        if not ready:
            reasons.append(f"vector index rebuilding ({pending} memories pending): degraded to keyword")
            return None
        try:
            text = keyword_query(query.text) if embedder.query_content_words else query.text
            vector = embedder.embed_query(text)
            checkpoint()
            return list(store.query(vector, query, k))
        except Exception as exc:
            reasons.append(f"vector leg failed ({type(exc).__name__}: {exc}): degraded to keyword")
            return None

    def _vector_hits(self, query: SearchQuery, legs: _Legs, candidates: list[VectorHit], *,
                     known: dict[str, Memory], read_ahead: list[VectorHit] | None = None) -> list[tuple[Memory, float]]:
        """The vector ranking from ``candidates``. Memories in ``known`` (the keyword leg's) or read before for
        ``legs`` are not read again (``query.admits`` is applied to every memory, whoever read it). The
        memories of ``read_ahead`` are read along with those ``candidates`` need (for a deeper ranking to
        come)."""
        memories = {**legs.read, **known}
        wanted = candidates if read_ahead is None else read_ahead
        missing = [hit.memory_id for hit in wanted if hit.memory_id not in memories
                   and hit.memory_id not in legs.unread]
        if missing:
            checkpoint()
            found = self.manager.get_many(missing, api_key_id=query.api_key_id)
            legs.read.update(found)
            legs.unread.update(m for m in missing if m not in found)
            memories.update(found)
        admits = query.admits
        pairs = [(memory, hit.score) for hit in candidates
                 if (memory := memories.get(hit.memory_id)) is not None and admits(memory)]
        return order_pairs(pairs)

    def _scored(self, query: SearchQuery, hits: list[SearchHit], candidates: list[VectorHit] | None, *,
                fused: bool, floor: float) -> Iterator[SearchHit]:
        """``hits`` in their order, each scored with its relevance (:mod:`memroute.retrieval.relevance`) as
        it is taken, those below ``floor`` left out. ``candidates``: the vector leg's (``None``: the keyword
        leg alone served)."""
        if candidates is None:
            return iter_scored(hits, query.text, None, cosines={}, vector_best=None, floor=floor)
        cosines = {c.memory_id: c.score if c.cosine is None else c.cosine for c in candidates}
        best = max((c.score for c in candidates), default=0.0)
        calibration = getattr(self.embedder, "relevance_calibration", None)
        return iter_scored(hits, query.text, Calibration.of(calibration) if calibration else None,
                           cosines=cosines, vector_best=best, fused=fused, floor=floor)

    # --- operations ------------------------------------------------------------------------------------
    def warm_up(self) -> bool:
        """Load an in-process embedding source now (its model, tokenizer and first-call paths) by embedding
        one text past the cache, instead of on the first write or search. True when it did. A source that
        works elsewhere (a remote API) is left alone: warming it would be a network call. Failures are left
        for the first real call to report."""
        embedder = self.embedder
        if embedder is None or getattr(embedder, "in_process", None) is not True:
            return False
        try:
            uncached(embedder).embed_batch(["memroute warm-up"])
        except Exception as exc:
            log.warning("memroute: warming up the embedding source failed (%s): the first call will retry", exc)
            return False
        return True

    def flush(self, timeout: float | None = None) -> bool:
        return True if self.indexer is None else self.indexer.flush(timeout)

    def reindex(self, *, force: bool = False, progress: Callable[[int, int], None] | None = None,
                batch: int = 256, api_key_id: str | None = None) -> dict[str, Any]:
        """Rebuild missing vectors now (all of them with ``force``); resumable, since the queue is durable.
        ``progress(done, remaining)`` is called after each batch. With ``api_key_id``, only that tenant's: its
        vectors are replaced one by one (never dropped first) and no other tenant's index is touched."""
        if self.indexer is None:
            return {"processed": 0, "errors": 0, "pending": 0, "reason": self.vector_reason}
        if api_key_id is None:
            enqueued = self.indexer.reset() if force else self.indexer.heal()
        else:
            enqueued = self.indexer.enqueue_tenant(api_key_id, self.manager.iter_all(api_key_id), force=force)
        done = errors = 0
        while True:
            processed, failed = self.indexer.process(batch, api_key_id)
            done += processed
            errors += failed
            remaining = self.indexer.depth(api_key_id)
            if progress is not None:
                progress(done, remaining)
            if remaining == 0 or failed or processed == 0:
                break
        return {"processed": done, "errors": errors, "pending": self.indexer.depth(api_key_id), "enqueued": enqueued,
                "last_error": self.indexer.last_error}

    def status(self) -> dict[str, Any]:
        embedding: dict[str, Any] = {**self.resolution, "available": self.embedder is not None}
        stats = getattr(self.embedder, "stats", None)
        if callable(stats):
            embedding["cache_stats"] = stats()
        vector: dict[str, Any] = {
            "backend": getattr(self.vector_store, "store_name", "none") if self.vector_store else "none",
            "available": self.indexer is not None,
            "reason": self.vector_reason,
        }
        if self.indexer is not None and self.vector_store is not None:
            try:
                rows: int | None = self.vector_store.count()
            except MemrouteError as exc:  # a store that does not answer is reported, not a failed status
                rows = None
                vector.update(available=False, reason=f"the vector store does not answer: {exc}")
            vector.update(
                rows=rows, pending_reindex=self.indexer.depth(),
                signature=self.indexer.signature, failing=self.indexer.queue.failing(),
                last_error=self.indexer.last_error,
            )
            dead, sample = self.indexer.queue.dead_letters()
            vector.update(dead_letters=dead, dead_letter_sample=sample)
        describe = getattr(self.vector_store, "describe", None)
        if callable(describe):  # the store's own account of itself (collection, mode, target; never secrets)
            vector["store"] = describe()
        return {
            "keyword": self._keyword_status(),
            "embedding": embedding,
            "vector_store": vector,
            "rerank": self._rerank_status(),
            "fusion": {"method": "score-aware" if self.settings.fusion == "score" else "weighted RRF",
                       "keyword_weight": self.keyword_weight, "rrf_k": self.settings.rrf_k,
                       "min_score": self.settings.min_score},
        }

    def _keyword_status(self) -> dict[str, Any]:
        """The keyword tier, probed for real: one keyword search (for a tenant that holds nothing) through
        the manager, so a primary that is down shows as a fallback serving, or as unavailable."""
        primary = self.manager.primary
        report: dict[str, Any] = {"backend": f"{primary.type_name} keyword search",
                                  "ranking": primary.capabilities.keyword_ranking}
        probe = SearchQuery(api_key_id="memroute-status-probe", text="status probe", strategy="hybrid", limit=1)
        try:
            served = self.manager.search(probe)
        except MemrouteError as exc:
            return {**report, "available": False, "reason": str(exc)}
        report.update(available=True, served_by=served.backend)
        if served.fallback:
            report["reason"] = served.error
        return report

    def _rerank_status(self) -> dict[str, Any]:
        if self.reranker is None:
            return {"enabled": False, "available": False, "reranker": None, "model": None,
                    "reason": "reranking disabled ([memory] rerank_enabled)"}
        return {"enabled": True, "available": True, "reranker": self.reranker.name,
                "model": self.reranker.model or None, "candidates": self.rerank_candidates, "reason": None}

    def close(self) -> None:
        if self.reranker is not None:
            self.reranker.close()
        if self.indexer is not None:
            self.indexer.close()
            self.indexer.queue.close()
        if self.vector_store is not None:
            self.vector_store.close()
        if self.embedder is not None:
            self.embedder.close()
