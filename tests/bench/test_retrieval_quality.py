"""Retrieval quality (run with ``pytest -m bench tests/bench``).

* The bundled synthetic set (``quality.py``): fusion is at least as good as its best single leg on R@5, for
  lexical and for semantic queries (static and transformers).
* The held-out production-like set (``memroute bench --quality``: 246 questions over 4 tenants, 2,000 real
  chat turns per tenant): on the **test** split, hybrid R@5 is at least each leg's in every cell (static and
  transformers; lexical, paraphrased and task questions; with and without distractors) but the one
  docs/retrieval.md names (MiniLM's paraphrased questions among chat turns).
"""

from __future__ import annotations

import pytest

import memroute
from memroute.bench.quality import run_quality, tables
from tests.bench import quality

pytestmark = pytest.mark.bench


@pytest.mark.parametrize("source", ["static", "transformers"])
def test_hybrid_is_at_least_as_good_as_the_best_leg(source, tmp_path):
    if source == "transformers":
        pytest.importorskip("onnxruntime")
    report = quality.run(source, tmp_path)
    print(f"\n{source}\n{quality.table(report)}")
    for kind in ("lexical", "semantic"):
        legs = report[kind]
        best_single = max(legs["keyword"]["R@5"], legs["vector"]["R@5"])
        assert legs["hybrid"]["R@5"] >= best_single, (kind, legs)


@pytest.mark.timeout(1800)  # indexing 8,103 memories with MiniLM takes minutes on two loaded cores
@pytest.mark.parametrize("source", ["static", "transformers"])
def test_held_out_set_hybrid_beats_each_leg_in_every_cell(source, tmp_path):
    if source == "transformers":
        pytest.importorskip("onnxruntime")

    def open_service(path, embedding, vector_options=None):
        return memroute.open({}, data_dir=str(path), embedding=embedding,
                             vectors={"store": "sqlite-vec", **(vector_options or {})})

    report = run_quality(open_service, models=(source,), per_tenant=2000, root=tmp_path)
    print(f"\n{tables(report)}")
    below = set()
    for count, result in report["results"][source].items():
        for kind in ("lexical", "paraphrased", "task"):
            cell = result["test"][kind]
            if cell["hybrid"]["R@5"] < max(cell["keyword"]["R@5"], cell["vector"]["R@5"]):
                below.add((count, kind))
    # The one cell docs/retrieval.md names: MiniLM's paraphrased questions among chat turns, where the keyword
    # leg can only lift a chat turn sharing one rare word with the question (one question below the vector
    # leg). Any other cell below a leg, or this one mended, fails here.
    assert below == ({("2000", "paraphrased")} if source == "transformers" else set()), below
