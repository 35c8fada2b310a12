"""The token budget walk."""

from __future__ import annotations

from collections.abc import Iterable

from memroute.models import SearchHit

__all__ = ["fit_budget"]


def fit_budget(hits: Iterable[SearchHit], max_tokens: int | None, limit: int | None = None) -> list[SearchHit]:
    """Fill ``max_tokens`` in rank order, **skipping** an item that does not fit and going on (the reference
    stopped at the first such item, and always returned one item even when it was oversized). ``hits`` is
    taken only as far as needed: it stops at ``limit``."""
    chosen: list[SearchHit] = []
    used = 0
    for hit in hits:
        if limit is not None and len(chosen) >= limit:
            break
        tokens = hit.tokens
        if max_tokens is not None and used + tokens > max_tokens:
            continue
        chosen.append(hit)
        used += tokens
    return chosen
