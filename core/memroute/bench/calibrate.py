"""Fit an embedding source's relevance model (:mod:`memroute.retrieval.relevance`) on the dev split of the
quality benchmark, and check it on the test split.

``python -m memroute.bench.calibrate --models static,transformers`` (a source, or ``source:model`` such as
``transformers:all-MiniLM-L6-v2``) loads the quality benchmark's stores
(:mod:`memroute.bench.quality`: facts with and without 2,000 real chat turns per tenant), takes every
question's vector and keyword candidates through the public service (no relevance floor), measures each
candidate's cosine, coverage and gap as the engine does, labels it by whether it is the question's answer,
fits ``(bias, cosine, coverage, gap)`` by logistic regression on the dev split, and prints the coefficients
with, on the test split, how often the hits in each score band were the answer and how many answers the
default floor keeps. The coefficients go in the source's ``relevance_calibration``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from memroute.bench.quality import Query, _memories, chat_distractors, embedding_options, queries, store_name
from memroute.config.serialization import memory_to_dict
from memroute.retrieval.relevance import DEFAULT_MIN_SCORE, Calibration, QueryTerms

__all__ = ["candidates", "fit", "main", "reliability"]

Rows = list[tuple[str, list[tuple[float, float, float]], list[bool]]]
"""Per question: its split, each candidate's ``(cosine, coverage, gap)`` and whether it is the answer."""


def candidates(mem: Any, keyword_only: Any, selected: Iterable[Query], depth: int = 100) -> Rows:
    """Each question's candidates (the vector leg's and the keyword leg's ``depth`` best) with the engine's
    measurements: a keyword-only find gets the lowest cosine and score of the vector candidates."""
    rows: Rows = []
    for query in selected:
        terms = QueryTerms(query.text)
        vector = mem.search(query.text, api_key_id=query.tenant, strategy="semantic", limit=depth,
                            min_score=0.0, record_access=False).hits
        keyword = keyword_only.search(query.text, api_key_id=query.tenant, strategy="hybrid", limit=depth,
                                      min_score=0.0, record_access=False).hits
        if not vector:
            continue
        best = vector[0].leg_scores["vector"]
        low_cosine = min(hit.leg_scores["cosine"] for hit in vector)
        low_score = min(hit.leg_scores["vector"] for hit in vector)
        found = {hit.memory.key: (hit.leg_scores["cosine"], hit.leg_scores["vector"], hit.memory) for hit in vector}
        for hit in keyword:
            found.setdefault(hit.memory.key, (low_cosine, low_score, hit.memory))
        features = [(cosine, terms.coverage(memory), best - score) for cosine, score, memory in found.values()]
        rows.append((query.split, features, [key == query.answer_key for key in found]))
    return rows


def fit(rows: Rows, split: str = "dev", l2: float = 1e-2) -> Calibration:
    """Logistic regression of "is the answer" on ``(cosine, coverage, gap)`` over ``split``'s candidates
    (Newton's method, a small L2 penalty)."""
    x = np.array([f for s, features, _ in rows if s == split for f in features], dtype=np.float64)
    y = np.array([label for s, _, labels in rows if s == split for label in labels], dtype=np.float64)
    design = np.hstack([np.ones((len(x), 1)), x])
    weights = np.zeros(design.shape[1])
    for _ in range(60):
        p = 1.0 / (1.0 + np.exp(-(design @ weights)))
        gradient = design.T @ (p - y) + l2 * weights
        hessian = (design * (p * (1 - p))[:, None]).T @ design + l2 * np.eye(len(weights))
        weights -= np.linalg.solve(hessian, gradient)
    return Calibration.of(tuple(round(float(w), 2) for w in weights))


def reliability(rows: Rows, calibration: Calibration, split: str = "test",
                floor: float = DEFAULT_MIN_SCORE) -> dict[str, Any]:
    """On ``split``: per score band (fifths of [0, 1]), how many candidates and the share that were the
    answer; and the share of answers scored at least ``floor``."""
    bands = [[0, 0] for _ in range(5)]
    kept = answers = 0
    for s, features, labels in rows:
        if s != split:
            continue
        for (cosine, coverage, gap), label in zip(features, labels, strict=True):
            score = calibration.relevance(cosine=cosine, coverage=coverage, gap=gap)
            band = bands[min(4, int(score * 5))]
            band[0] += 1
            band[1] += label
            if label:
                answers += 1
                kept += score >= floor
    return {"bands": [{"scores": f"{i / 5:.1f}-{(i + 1) / 5:.1f}", "candidates": n,
                       "answers": round(a / n, 3) if n else None} for i, (n, a) in enumerate(bands)],
            "answers_among_candidates_kept_by_floor": round(kept / answers, 3) if answers else None, "floor": floor}


def calibrate(open_service: Callable[..., Any], model: str, root: Path, per_tenant: int = 2000) -> dict[str, Any]:
    """Fit and check ``model``'s calibration on the quality benchmark with and without ``per_tenant`` chat
    turns (the stores are built under ``root``)."""
    distractors = chat_distractors(per_tenant) if per_tenant else {}
    rows: Rows = []
    for count in sorted({0, per_tenant}):
        chosen = {tenant: turns[:count] for tenant, turns in distractors.items()}
        lines = [json.dumps(memory_to_dict(m)) for m in _memories(chosen)]
        data_dir = root / f"{store_name(model)}-{count}"
        with open_service(data_dir, embedding_options(model)) as mem:
            mem.import_jsonl(lines)
            if not mem.flush(timeout=3600):
                raise RuntimeError("indexing did not finish")
            with open_service(data_dir, {"source": "none"}) as keyword_only:
                rows += candidates(mem, keyword_only, queries())
    calibration = fit(rows)
    return {"model": model, "calibration": [calibration.bias, calibration.cosine, calibration.coverage,
                                            calibration.gap], "test": reliability(rows, calibration)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m memroute.bench.calibrate", description=__doc__)
    parser.add_argument("--models", default="static,transformers")
    parser.add_argument("--distractors", type=int, default=2000)
    args = parser.parse_args(argv)
    from memroute.service import Memroute

    def open_service(path: Path, embedding: dict[str, Any]) -> Any:
        return Memroute.open({}, data_dir=str(path), embedding=embedding, vectors={"store": "sqlite-vec"})

    with tempfile.TemporaryDirectory(prefix="memroute-calibrate-") as tmp:
        for model in (m.strip() for m in args.models.split(",") if m.strip()):
            print(json.dumps(calibrate(open_service, model, Path(tmp), args.distractors), indent=2))


if __name__ == "__main__":
    main()
