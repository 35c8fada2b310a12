"""Embedding throughput of the built-in local sources.

Run: ``pytest -m bench tests/bench/test_embedding_throughput.py -s``."""

from __future__ import annotations

import os
import random
import time

import pytest

from memroute_builtins.embedding.static import StaticEmbeddingSource
from memroute_builtins.embedding.transformers import (
    TransformersEmbeddingSource,
    TransformersSettings,
    missing_dependencies,
)

pytestmark = pytest.mark.bench

_WORDS = (
    "user", "prefers", "dark", "mode", "typescript", "deploy", "friday", "coffee", "meeting", "budget",
    "report", "python", "database", "index", "vacation", "tokyo", "allergic", "peanuts", "standup",
    "project", "deadline", "review", "merge", "release", "customer", "invoice", "password", "rotation",
    "kubernetes", "cluster", "latency", "dashboard", "weekly", "sync",
)


def _texts(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 30))) for _ in range(n)]


def _rate(source, texts, *, batch: int) -> float:
    source.embed_batch(texts[:8])  # load and warm up
    started = time.perf_counter()
    for start in range(0, len(texts), batch):
        source.embed_batch(texts[start:start + batch])
    return len(texts) / (time.perf_counter() - started)


def _single(source, texts) -> float:
    started = time.perf_counter()
    for text in texts:
        source.embed_batch([text])
    return len(texts) / (time.perf_counter() - started)


def test_static_throughput():
    source = StaticEmbeddingSource()
    texts = _texts(20_000)
    print(f"\nstatic: batch(1000) {_rate(source, texts, batch=1000):,.0f} texts/s; "
          f"single {_single(source, texts[:3000]):,.0f} texts/s; load avg {os.getloadavg()[0]:.1f}")


@pytest.mark.skipif(bool(missing_dependencies()), reason="memroute[transformers] not installed")
@pytest.mark.parametrize("model", ["multilingual-e5-small", "all-MiniLM-L6-v2"])
@pytest.mark.parametrize("threads", [1, 2])
def test_transformers_throughput(threads, model):
    # OpenMP (e5's engine) reads its thread count once per process: run one e5 case per process for its figure.
    source = TransformersEmbeddingSource(TransformersSettings(model=model, threads=threads))
    texts = _texts(512)
    print(f"\ntransformers {model} threads={threads}: batch(64) {_rate(source, texts, batch=64):,.0f} texts/s; "
          f"single {_single(source, texts[:100]):,.0f} texts/s; load avg {os.getloadavg()[0]:.1f}")
