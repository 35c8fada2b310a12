"""One ordering rule for every retrieval path: **score** (higher first), then **recency** (newer
``created_at`` first), then **id** (ascending). Equal scores are common — a recency rank, two memories with
the same words, an RRF tie between a keyword-only and a vector-only hit — and without the last two keys they
came back in whatever order a dict, a backend or a thread pool produced, differently from run to run."""

from __future__ import annotations

from collections.abc import Iterable

from memroute.models import Memory, SearchHit

__all__ = ["order_hits", "order_key", "order_pairs", "recency_key"]


def order_key(score: float, memory: Memory) -> tuple[float, float, str]:
    """The sort key of a scored memory: best score, then newest, then smallest id."""
    return (-score, -memory.created_at.timestamp(), memory.id)


def recency_key(memory: Memory) -> tuple[float, str]:
    """The sort key of the recency path: newest first, then smallest id."""
    return (-memory.created_at.timestamp(), memory.id)


def order_hits(hits: Iterable[SearchHit]) -> list[SearchHit]:
    """``hits`` in the one deterministic order."""
    return sorted(hits, key=lambda hit: order_key(hit.score, hit.memory))


def order_pairs(pairs: Iterable[tuple[Memory, float]]) -> list[tuple[Memory, float]]:
    """A leg's ``(memory, score)`` ranking in the one deterministic order (a backend or a vector store may
    return equal scores in any order)."""
    return sorted(pairs, key=lambda pair: order_key(pair[1], pair[0]))
