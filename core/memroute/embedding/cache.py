"""The embedding cache: a true LRU + TTL in front of any source (reference §9.5's names and defaults)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from memroute.embedding.base import validate_texts
from memroute.embedding.ttl_cache import MISSING, TTLCache
from memroute.errors import EmbeddingError
from memroute.interfaces import EmbeddingSignature, EmbeddingSource

__all__ = ["CachedEmbeddingSource", "WrappedEmbeddingSource", "cache_key", "uncached"]


def uncached(source: EmbeddingSource) -> EmbeddingSource:
    """The source behind the cache, if ``source`` is cached. Indexing embeds through this: a memory's text
    is embedded once, so caching it only costs a hash and an insert per memory and evicts the query vectors
    the cache is for (measured: a fifth of static indexing time)."""
    return source.inner if isinstance(source, CachedEmbeddingSource) else source


def cache_key(source: str, model: str, dimensions: int | None, text: str, *, query: bool = False) -> str:
    """``source:model:dim:sha256(text)``: the reference's key (``dim`` 0 while unknown); a search query's
    vector is kept apart, ``source:model:dim:query:sha256(text)`` (a retrieval model embeds a query and a
    memory of the same text differently)."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{source}:{model or 'unknown'}:{dimensions or 0}:{'query:' if query else ''}{digest}"


class WrappedEmbeddingSource(EmbeddingSource):
    """A source in front of another (``inner``) that reports the wrapped source's identity and calibrated values,
    so signatures, cache keys and rankings do not change when the wrapper is switched on or off. Subclasses add
    what they wrap it for (:class:`CachedEmbeddingSource`; the benchmarks' disk cache)."""

    def __init__(self, inner: EmbeddingSource) -> None:
        self.inner = inner

    @property
    def source(self) -> str:  # type: ignore[override]
        return self.inner.source

    @property
    def model(self) -> str:  # type: ignore[override]
        return self.inner.model

    @property
    def dimensions(self) -> int | None:  # type: ignore[override]
        return self.inner.dimensions

    @property
    def fusion_keyword_weight(self) -> float | None:  # type: ignore[override]
        return self.inner.fusion_keyword_weight

    @property
    def relevance_calibration(self) -> tuple[float, float, float, float] | None:  # type: ignore[override]
        return self.inner.relevance_calibration

    @property
    def query_content_words(self) -> bool:  # type: ignore[override]
        return self.inner.query_content_words

    @property
    def in_process(self) -> bool | None:  # type: ignore[override]
        return self.inner.in_process

    def signature(self) -> EmbeddingSignature:
        return self.inner.signature()

    def close(self) -> None:
        self.inner.close()


class CachedEmbeddingSource(WrappedEmbeddingSource):
    """Wraps a source with an LRU + TTL cache of vectors. Only misses reach the wrapped source, in one
    batch, with duplicates embedded once. Cached vectors are read-only; returned arrays are fresh copies."""

    def __init__(self, inner: EmbeddingSource, *, max_entries: int = 1000, ttl_ms: int = 300_000,
                 clock: Callable[[], float] | None = None) -> None:
        super().__init__(inner)
        kwargs: dict[str, Any] = {"clock": clock} if clock is not None else {}
        self.cache: TTLCache[str, np.ndarray] = TTLCache(max_entries, ttl_ms / 1000.0, **kwargs)

    def embed(self, text: str) -> np.ndarray:
        """``embed_batch([text])[0]`` (the same vector, a fresh writable copy, the same cache counts) without the
        batch's bookkeeping: a search embeds one query text, and on a miss the batch path's lists, second key
        and stack were a quarter of the wrapper's cost."""
        return self._one(text, query=False)

    def embed_query(self, text: str) -> np.ndarray:
        """The wrapped source's :meth:`~memroute.interfaces.EmbeddingSource.embed_query`, cached under its own
        key."""
        return self._one(text, query=True)

    def _one(self, text: str, *, query: bool) -> np.ndarray:
        (text,) = validate_texts([text])
        inner = self.inner
        dimensions = inner.dimensions
        key = cache_key(inner.source, inner.model, dimensions, text, query=query)
        cached = self.cache.get(key) if self.cache.enabled else MISSING
        if cached is not MISSING:
            return np.array(cached)
        fresh = inner.embed_query(text)[None] if query else inner.embed_batch([text])
        if len(fresh) != 1:
            raise EmbeddingError(f"{inner.source} returned {len(fresh)} vectors for 1 texts",
                                 reason="request_failed", source=inner.source)
        stored = np.array(fresh[0], dtype=np.float32)
        stored.flags.writeable = False
        if inner.dimensions != dimensions:  # the first call measured it: key by it, so the next lookup hits
            key = cache_key(inner.source, inner.model, inner.dimensions, text, query=query)
        self.cache.set(key, stored)
        return np.array(stored)

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        items = validate_texts(texts)
        keys = [cache_key(self.inner.source, self.inner.model, self.inner.dimensions, t) for t in items]
        rows: list[np.ndarray | None] = [None] * len(items)
        missing: dict[str, list[int]] = {}
        for index, key in enumerate(keys):
            cached = self.cache.get(key) if self.cache.enabled else MISSING
            if cached is MISSING:
                missing.setdefault(key, []).append(index)
            else:
                rows[index] = cached
        if missing:
            order = list(missing)
            fresh = self.inner.embed_batch([items[missing[key][0]] for key in order])
            if len(fresh) != len(order):
                raise EmbeddingError(f"{self.inner.source} returned {len(fresh)} vectors for {len(order)} texts",
                                     reason="request_failed", source=self.inner.source)
            for key, vector in zip(order, fresh, strict=True):
                stored = np.array(vector, dtype=np.float32)
                stored.flags.writeable = False
                # Key by the dimension now known (the first call measures it), so the next lookup hits.
                self.cache.set(cache_key(self.inner.source, self.inner.model, self.inner.dimensions,
                                         items[missing[key][0]]), stored)
                for index in missing[key]:
                    rows[index] = stored
        if not rows:
            dim = self.inner.dimensions or 0
            return np.zeros((0, dim), dtype=np.float32)
        return np.stack([row for row in rows if row is not None]).astype(np.float32, copy=False)

    def stats(self) -> dict[str, int]:
        """``hits``, ``misses``, ``size`` and ``max`` of the cache, for the engine status."""
        return self.cache.stats()

    def invalidate(self) -> None:
        """Drop every cached vector and reset the counters (after a model change)."""
        self.cache.clear()

    def describe(self) -> dict[str, Any]:
        describe = getattr(self.inner, "describe", None)
        info: dict[str, Any] = describe() if callable(describe) else {"source": self.source, "model": self.model}
        info["cache"] = self.stats()
        return info
