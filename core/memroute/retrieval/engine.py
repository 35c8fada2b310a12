"""The retrieval engine.

FOUNDATION VERSION: keyword (FTS5 bm25 through the backend) and recency only; ``semantic`` and ``hybrid``
degrade to keyword and say so in the provenance. The retrieval issue adds embedding sources, vector
stores and fusion here.
"""

from __future__ import annotations

from typing import Any

from memroute.manager import MemoryManager
from memroute.models import Provenance, SearchHit, SearchQuery, SearchResult
from memroute.retrieval.budget import fit_budget

__all__ = ["RetrievalEngine"]


class RetrievalEngine:
    def __init__(self, manager: MemoryManager) -> None:
        self.manager = manager

    def search(self, query: SearchQuery, *, max_tokens: int | None = None) -> SearchResult:
        served = self.manager.search(query)
        tier = "recency" if query.strategy == "exact" else "keyword"
        hits = [
            SearchHit(memory=h.memory, score=h.score, tier=tier, ranks={tier: i}, leg_scores={tier: h.score})
            for i, h in enumerate(served.hits, start=1)
        ]
        degraded = query.strategy in ("semantic", "hybrid")
        reasons = []
        if degraded:
            reasons.append("no vector store configured: degraded to keyword")
        if served.fallback:
            reasons.append(f"primary unavailable ({served.error}); served by fallback {served.backend}")
        provenance = Provenance(
            backend=served.backend,
            strategy_requested=query.strategy,
            strategy_used="exact" if query.strategy == "exact" else "keyword",
            legs=(tier,),
            degraded=degraded or served.fallback,
            reason="; ".join(reasons) or None,
            fallback=served.fallback,
        )
        return SearchResult(hits=tuple(fit_budget(hits, max_tokens, query.limit)), provenance=provenance)

    def status(self) -> dict[str, Any]:
        return {
            "keyword": {"available": True, "backend": self.manager.primary.type_name},
            "embedding": {"source": None, "available": False, "reason": "no embedding source configured"},
            "vector_store": {"backend": "none", "available": False},
        }

    def close(self) -> None:
        pass
