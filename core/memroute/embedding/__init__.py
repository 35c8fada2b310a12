"""Embedding: choosing a source (``auto`` resolution), the LRU + TTL vector cache, and helpers sources
share. The sources themselves are plugins (``memroute_builtins.embedding.static`` and friends)."""

from __future__ import annotations

from memroute.embedding.base import LazyLoader, fallback_vector, normalize_rows, validate_texts
from memroute.embedding.cache import CachedEmbeddingSource, cache_key
from memroute.embedding.selection import Resolution, build_embedding_source, resolve

__all__ = [
    "CachedEmbeddingSource",
    "LazyLoader",
    "Resolution",
    "build_embedding_source",
    "cache_key",
    "fallback_vector",
    "normalize_rows",
    "resolve",
    "validate_texts",
]
