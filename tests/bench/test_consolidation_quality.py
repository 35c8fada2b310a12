"""How well ``[extraction] restate_similarity`` tells a restatement from a different fact, on held-out pairs.

The threshold is chosen on the dev split by a rule fixed in advance (false merges hide a fact, duplicates only
repeat one: the highest recall whose precision is at least 0.9, on a 0.05 grid), and reported on the test split
beside two plain baselines: the same text (after case and spacing) and word overlap (Jaccard, its threshold
chosen on dev by the same rule, or by F0.5 when no threshold reaches the precision). The figures are in
docs/pipeline.md, "Consolidation"; run with ``-s`` to print them. The static embedding model memroute ships is the
one the embedded default uses."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import pytest

from memroute.config.settings import ExtractionSettings
from memroute.pipeline.consolidate import same_text
from tests.bench.consolidation_pairs import split

GRID = [round(0.5 + 0.05 * i, 2) for i in range(10)]  # 0.50 .. 0.95
MIN_PRECISION = 0.9


def _metrics(scores: Sequence[float], labels: Sequence[bool], threshold: float) -> tuple[float, float, float]:
    tp = sum(1 for s, label in zip(scores, labels, strict=True) if s >= threshold and label)
    fp = sum(1 for s, label in zip(scores, labels, strict=True) if s >= threshold and not label)
    fn = sum(1 for s, label in zip(scores, labels, strict=True) if s < threshold and label)
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn)
    f_half = 1.25 * precision * recall / (0.25 * precision + recall) if precision + recall else 0.0
    return precision, recall, f_half


def _choose(scores: Sequence[float], labels: Sequence[bool]) -> float:
    precise = [t for t in GRID if _metrics(scores, labels, t)[0] >= MIN_PRECISION and _metrics(scores, labels, t)[1]]
    if precise:
        return max(precise, key=lambda t: (_metrics(scores, labels, t)[1], t))
    return max(GRID, key=lambda t: (_metrics(scores, labels, t)[2], t))


def _jaccard(a: str, b: str) -> float:
    left, right = set(re.findall(r"\w+", a.casefold())), set(re.findall(r"\w+", b.casefold()))
    return len(left & right) / len(left | right)


@pytest.fixture(scope="module")
def cosine() -> Callable[[str, str], float]:
    from memroute_builtins.embedding.static import StaticEmbeddingSource

    source = StaticEmbeddingSource()

    def similarity(a: str, b: str) -> float:
        vectors = source.embed_batch([a, b])
        return float(vectors[0] @ vectors[1])

    return similarity


def _evaluate(score: Callable[[str, str], float]) -> tuple[float, tuple[float, float, float]]:
    dev, test = split("dev"), split("test")
    threshold = _choose([score(a, b) for a, b, _ in dev], [label for *_, label in dev])
    return threshold, _metrics([score(a, b) for a, b, _ in test], [label for *_, label in test], threshold)


def test_the_default_threshold_is_the_one_chosen_on_dev_and_holds_on_test(cosine):
    threshold, (precision, recall, f_half) = _evaluate(cosine)
    print(f"\ncosine (static): threshold {threshold} on dev; test precision {precision:.3f} recall {recall:.3f} "
          f"F0.5 {f_half:.3f}")
    assert ExtractionSettings().restate_similarity == threshold, "the default must be the dev split's choice"
    assert precision >= 0.9 and recall >= 0.7, (precision, recall)

    jaccard_threshold, (j_precision, j_recall, j_f) = _evaluate(_jaccard)
    test = split("test")
    exact_recall = sum(1 for a, b, label in test if label and same_text(a, b)) / sum(1 for *_, lab in test if lab)
    print(f"word overlap: threshold {jaccard_threshold} on dev; test precision {j_precision:.3f} recall "
          f"{j_recall:.3f} F0.5 {j_f:.3f}\nsame text: test recall {exact_recall:.3f}")
    assert f_half > j_f and recall > exact_recall  # the embedding earns its place over the plain baselines
