"""memroute against the naive recipe (FTS5 OR query + numpy cosine + RRF) on real chat turns for one tenant, in one
run: the first and warm searches after a bulk import (and numpy brute force), a chat loop, and indexing against the
embedding source's own ``embed_batch`` rate (``pytest -m bench tests/bench/test_hybrid_vs_naive.py -s``;
``memroute bench --naive`` prints the same report). Ratios are printed for docs/performance.md, not asserted:
timings on a shared machine are noisy."""

from __future__ import annotations

import json

import pytest

import memroute
from memroute.bench.speed import run_naive_comparison

pytestmark = pytest.mark.bench


def test_hybrid_against_the_naive_recipe(tmp_path):
    def open_service(path):
        return memroute.open({}, data_dir=str(path), embedding={"source": "static"}, vectors={"store": "sqlite-vec"},
                             memory={"enabled": True})

    def embedder_for(service):
        from memroute.config.settings import load_settings
        from memroute.embedding import build_embedding_source

        embedder, _ = build_embedding_source(load_settings({"embedding": {"source": "static"}}).embedding,
                                             service.plugins, service.data_dir)
        return embedder

    report = run_naive_comparison(open_service, embedder_for, sizes=(10_000, 100_000), root=tmp_path)
    print(json.dumps(report, indent=2))
    for result in report["results"].values():
        assert result["hybrid_vs_naive"] > 0 and result["indexing_vs_embed_batch"] > 0
        assert result["chat_loop"]["memories_injected_per_turn"] >= 1
