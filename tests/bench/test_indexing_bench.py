"""Indexing against the embedding source's own ``embed_batch`` rate, for the static and the transformers
source, on 2,000 real chat turns, side by side in one run (issue 13): ``pytest -m bench
tests/bench/test_indexing_bench.py -s`` (``memroute bench --indexing`` prints the same report). The ratios are
printed for docs/performance.md; the transformers ratio, where the model is the cost, is asserted against the
0.9 target, the static one (bounded by the import's and the vector writes' own CPU, see docs/performance.md)
only for being measured."""

from __future__ import annotations

import json

import pytest

import memroute
from memroute.bench.indexing import TARGET_RATIO, run_indexing_comparison
from memroute.config.settings import load_settings
from memroute.embedding import build_embedding_source
from memroute.plugins import get_plugin_manager
from memroute_builtins.embedding.transformers import missing_dependencies

pytestmark = pytest.mark.bench


def test_indexing_against_embed_batch(tmp_path):
    def build_source(name):
        if name == "transformers" and missing_dependencies():
            return f"memroute[transformers] not installed ({', '.join(missing_dependencies())})"
        source, _ = build_embedding_source(load_settings({"embedding": {"source": name}}, use_env=False).embedding,
                                           get_plugin_manager(), tmp_path)
        return source

    def open_service(path, source):
        return memroute.open({}, data_dir=str(path), embedder=source, vectors={"store": "sqlite-vec"})

    report = run_indexing_comparison(open_service, build_source, count=2000, root=tmp_path)
    print(json.dumps(report, indent=2))
    for name, results in report["results"].items():
        if "skipped" in results:
            continue
        for mode, measured in results.items():
            assert measured["searchable"], (name, mode)
            assert measured["indexing_vs_embed_batch"] > 0
    transformers = report["results"]["transformers"]
    if "skipped" not in transformers:
        for mode, measured in transformers.items():
            assert measured["indexing_vs_embed_batch"] >= TARGET_RATIO, (mode, measured)
