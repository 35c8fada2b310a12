"""Retrieval quality on the bundled data set (run with ``pytest -m bench tests/bench``): fusion must be at
least as good as its best single leg on R@5, for lexical and for semantic queries."""

from __future__ import annotations

import pytest

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
