"""The embedding cache: true LRU, TTL with an injected clock, counters, keys, batching of misses."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from memroute.embedding import CachedEmbeddingSource, cache_key
from memroute.errors import ValidationError
from memroute.testing.fakes import HashingEmbeddingSource


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Counting(HashingEmbeddingSource):
    def __init__(self) -> None:
        super().__init__(16)
        self.seen: list[list[str]] = []

    def embed_batch(self, texts):
        self.seen.append(list(texts))
        return super().embed_batch(texts)


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def inner():
    return Counting()


def make(inner, clock, max_entries=3, ttl_ms=10_000):
    return CachedEmbeddingSource(inner, max_entries=max_entries, ttl_ms=ttl_ms, clock=clock)


def test_key_is_source_model_dim_sha256():
    digest = hashlib.sha256(b"hello").hexdigest()
    assert cache_key("static", "potion", 256, "hello") == f"static:potion:256:{digest}"
    assert cache_key("remote", "", None, "hello") == f"remote:unknown:0:{digest}"


def test_hit_returns_the_same_vector_without_calling_the_source(inner, clock):
    cached = make(inner, clock)
    first = cached.embed_batch(["a"])
    second = cached.embed_batch(["a"])
    assert np.array_equal(first, second)
    assert inner.seen == [["a"]]
    assert cached.stats() == {"hits": 1, "misses": 1, "size": 1, "max": 3}


def test_only_misses_reach_the_source_in_one_batch_with_duplicates_once(inner, clock):
    cached = make(inner, clock, max_entries=10)
    cached.embed_batch(["a", "b"])
    out = cached.embed_batch(["b", "c", "a", "c", "d"])
    assert inner.seen[-1] == ["c", "d"]
    assert out.shape == (5, 16)
    assert np.array_equal(out[1], out[3])
    assert np.array_equal(out[0], inner.embed_batch(["b"])[0])


def test_lru_read_refreshes_recency(inner, clock):
    cached = make(inner, clock, max_entries=2)
    cached.embed_batch(["a"])
    cached.embed_batch(["b"])
    cached.embed_batch(["a"])          # a is now most recent
    cached.embed_batch(["c"])          # evicts b (least recently used), not a (oldest inserted)
    inner.seen.clear()
    cached.embed_batch(["a"])
    assert inner.seen == []
    cached.embed_batch(["b"])
    assert inner.seen == [["b"]]


def test_ttl_expiry(inner, clock):
    cached = make(inner, clock, ttl_ms=5_000)
    cached.embed_batch(["a"])
    clock.now += 4.9
    cached.embed_batch(["a"])
    assert len(inner.seen) == 1
    clock.now += 0.2
    cached.embed_batch(["a"])
    assert len(inner.seen) == 2
    assert cached.stats()["misses"] == 2 and cached.stats()["hits"] == 1


def test_disabled_cache_always_embeds(inner, clock):
    cached = make(inner, clock, max_entries=0)
    cached.embed_batch(["a"])
    cached.embed_batch(["a"])
    assert len(inner.seen) == 2 and cached.stats()["size"] == 0


def test_caller_cannot_poison_the_cache(inner, clock):
    cached = make(inner, clock)
    out = cached.embed_batch(["a"])
    out[0, :] = 0.0
    again = cached.embed_batch(["a"])
    assert np.linalg.norm(again[0]) == pytest.approx(1.0, abs=1e-5)
    single = cached.embed("a")
    single[:] = 5.0
    assert np.linalg.norm(cached.embed("a")) == pytest.approx(1.0, abs=1e-5)


def test_invalidate_clears_entries_and_counters(inner, clock):
    cached = make(inner, clock)
    cached.embed_batch(["a", "b"])
    cached.invalidate()
    assert cached.stats() == {"hits": 0, "misses": 0, "size": 0, "max": 3}


def test_identity_is_the_inner_sources(inner, clock):
    cached = make(inner, clock)
    assert (cached.source, cached.model, cached.dimensions) == ("hashing", "hashing-v1", 16)
    assert cached.signature() == inner.signature()
    assert cached.describe()["cache"]["max"] == 3


def test_bad_input_never_reaches_the_source(inner, clock):
    cached = make(inner, clock)
    with pytest.raises(ValidationError):
        cached.embed_batch(["ok", 3])
    with pytest.raises(ValidationError):
        cached.embed_batch("abc")
    assert inner.seen == []


def test_empty_batch(inner, clock):
    assert make(inner, clock).embed_batch([]).shape == (0, 16)


def test_different_sources_do_not_share_entries(clock):
    a, b = Counting(), Counting()
    b.model = "hashing-v2"
    cache_a, cache_b = make(a, clock), make(b, clock)
    cache_a.embed_batch(["x"])
    cache_b.embed_batch(["x"])
    assert a.seen == [["x"]] and b.seen == [["x"]]
