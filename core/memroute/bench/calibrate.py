"""Fit an embedding source's relevance model (:mod:`memroute.retrieval.relevance`) on the dev split of the
quality benchmark, and check it on the test split.

``python -m memroute.bench.calibrate --models static,transformers`` (a source, or ``source:model`` such as
``transformers:multilingual-e5-small``) loads the quality benchmark's stores
(:mod:`memroute.bench.quality`: facts with and without 2,000 real chat turns per tenant) and asks, through the
public service with no relevance floor, the benchmark's questions plus those with several answers and the
off-topic ones of :mod:`memroute.bench.relevance_questions`. Every candidate of a hybrid search (up to 100)
keeps the measurements the engine made (``leg_scores``: ``cosine``, and ``coverage``, the best over the
message's parts) and is labelled by whether it answers the question. ``(bias, cosine, coverage)`` are fitted
by logistic regression on the dev split, answers and non-answers weighted equally; the keyword-only results
(the same store opened without an embedding source) get their own fit on coverage. It prints, per source,
the coefficients (the fourth, the gap's, is 0: see the relevance module) and, on the test split, how often
the candidates in each score band were an answer, how many answers ranked in the top 5 the floor hides and
how many other memories of a top 10 it lets through, per kind of question; then the floor chosen on the dev
split: the highest that hides at most 3 % of the answers hybrid search ranks in its top 5, for every source
fitted and for the keyword leg. The coefficients go in the source's ``relevance_calibration``, the floor in
:data:`memroute.retrieval.relevance.DEFAULT_MIN_SCORE`.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from memroute.bench.embedding_cache import DEFAULT_CACHE_DIR, VectorCache, bench_opener
from memroute.bench.quality import _memories, chat_distractors, embedding_options, queries, split_of, store_name
from memroute.bench.relevance_questions import INDIRECT, MIXED, OFF_TOPIC
from memroute.config.serialization import memory_to_dict
from memroute.retrieval.relevance import DEFAULT_MIN_SCORE, Calibration

__all__ = ["Asked", "Scored", "asked", "candidates", "choose_floor", "fit", "main", "reliability"]

HIDDEN_BUDGET = 0.03
"""The share of the dev split's top-5 answers the chosen floor may hide."""


@attrs.frozen(kw_only=True)
class Asked:
    """One question of the calibration set: its tenant, kind, split and the keys of every memory that answers
    it (none for an off-topic one)."""

    tenant: str
    text: str
    kind: str
    split: str
    answers: tuple[str, ...]


@attrs.frozen(kw_only=True)
class Scored:
    """One question's candidates, in their ranked order: the engine's ``(cosine, coverage)`` for each and
    whether it answers the question."""

    split: str
    kind: str
    features: list[tuple[float, float]]
    labels: list[bool]
    store: str = "facts"
    """Which store answered: ``facts`` alone, or ``facts + N chat turns`` per tenant."""


def asked() -> list[Asked]:
    """Every question of the calibration set: the quality benchmark's (``lexical``, ``paraphrased``,
    ``task``), then ``indirect``, ``mixed`` and ``off-topic`` ones, each in its facts' split (off-topic
    probes alternate)."""
    out = [Asked(tenant=q.tenant, text=q.text, kind=q.kind, split=q.split, answers=(q.answer_key,))
           for q in queries()]
    for kind, written in (("indirect", INDIRECT), ("mixed", MIXED)):
        out += [Asked(tenant=tenant, text=text, kind=kind, split=split_of(tenant, answers[0]), answers=answers)
                for tenant, questions in written.items() for text, answers in questions]
    out += [Asked(tenant=tenant, text=text, kind="off-topic", split=("dev", "test")[index % 2], answers=())
            for index, text in enumerate(OFF_TOPIC) for tenant in sorted(INDIRECT)]
    return out


def candidates(service: Any, selected: Iterable[Asked], depth: int = 100, store: str = "facts") -> list[Scored]:
    """Each question's hybrid candidates (``depth`` of them, no floor), with the measurements the engine
    made. A service without an embedding source gives the keyword leg's (cosine 0)."""
    rows = []
    for question in selected:
        hits = service.search(question.text, api_key_id=question.tenant, strategy="hybrid", limit=depth,
                              min_score=0.0, record_access=False).hits
        rows.append(Scored(split=question.split, kind=question.kind, store=store,
                           features=[(hit.leg_scores.get("cosine", 0.0), hit.leg_scores["coverage"]) for hit in hits],
                           labels=[hit.memory.key in question.answers for hit in hits]))
    return rows


def fit(rows: Iterable[Scored], split: str = "dev", l2: float = 1e-2, *, keyword: bool = False) -> Calibration:
    """Logistic regression of "answers the question" on ``(cosine, coverage)`` (``keyword``: coverage alone)
    over ``split``'s candidates, answers and non-answers weighted equally (Newton's method, a small L2
    penalty)."""
    chosen = [row for row in rows if row.split == split]
    x = np.array([f for row in chosen for f in row.features], dtype=np.float64).reshape(-1, 2)
    y = np.array([label for row in chosen for label in row.labels], dtype=np.float64)
    if keyword:
        x = x[:, 1:]
    weight = np.where(y > 0, (len(y) - y.sum()) / max(1.0, y.sum()), 1.0)
    design = np.hstack([np.ones((len(x), 1)), x])
    weights = np.zeros(design.shape[1])
    for _ in range(60):
        p = 1.0 / (1.0 + np.exp(-(design @ weights)))
        gradient = design.T @ (weight * (p - y)) + l2 * weights
        hessian = (design * (weight * p * (1 - p))[:, None]).T @ design + l2 * np.eye(len(weights))
        weights -= np.linalg.solve(hessian, gradient)
    values = [round(float(w), 2) for w in weights]
    return Calibration(bias=values[0], cosine=0.0 if keyword else values[1], coverage=values[-1], gap=0.0)


def _relevance(calibration: Calibration, features: tuple[float, float]) -> float:
    return calibration.relevance(cosine=features[0], coverage=features[1], gap=0.0)


def reliability(rows: Iterable[Scored], calibration: Calibration, split: str = "test",
                floor: float = DEFAULT_MIN_SCORE) -> dict[str, Any]:
    """On ``split``: per score band (fifths of [0, 1]), how many candidates and the share that were an
    answer; and per kind of question, how many of the answers ranked in the top 5 score below ``floor``
    (hidden) and how many other memories of the top 10 score at least ``floor``, per question, for each
    store."""
    bands = [[0, 0] for _ in range(5)]
    kinds: dict[str, list[int]] = {}
    for row in rows:
        if row.split != split:
            continue
        # top-5 answers, those hidden, questions, other memories of the top 10 kept
        tally = kinds.setdefault(f"{row.store}: {row.kind}", [0, 0, 0, 0])
        tally[2] += 1
        for rank, (features, label) in enumerate(zip(row.features, row.labels, strict=True), start=1):
            score = _relevance(calibration, features)
            band = bands[min(4, int(score * 5))]
            band[0] += 1
            band[1] += label
            if label and rank <= 5:
                tally[0] += 1
                tally[1] += score < floor
            elif not label and rank <= 10:
                tally[3] += score >= floor
    return {"floor": floor,
            "bands": [{"scores": f"{i / 5:.1f}-{(i + 1) / 5:.1f}", "candidates": n,
                       "answers": round(a / n, 3) if n else None} for i, (n, a) in enumerate(bands)],
            "by_kind": {kind: {"questions": n, "top5_answers_hidden": f"{hidden}/{answers}",
                               "others_in_top10_kept_per_question": round(others / n, 2)}
                        for kind, (answers, hidden, n, others) in sorted(kinds.items())}}


def choose_floor(fitted: Iterable[tuple[Calibration, list[Scored]]], budget: float = HIDDEN_BUDGET) -> float:
    """The highest floor (in steps of 0.01) that hides at most ``budget`` of the dev split's answers ranked in
    the top 5, counted over every ``(calibration, rows)`` pair."""
    scores = [_relevance(calibration, features) for calibration, rows in fitted for row in rows
              if row.split == "dev" for rank, (features, label) in enumerate(zip(row.features, row.labels,
                                                                                 strict=True), start=1)
              if label and rank <= 5]
    best = 0.0
    for step in range(1, 100):
        floor = step / 100
        if sum(score < floor for score in scores) > budget * len(scores):
            break
        best = floor
    return best


def calibrate(open_service: Callable[..., Any], model: str, root: Path,
              per_tenant: int = 2000) -> tuple[list[Scored], list[Scored]]:
    """The candidates of every question for ``model`` and for the keyword leg alone, on the quality
    benchmark's stores with and without ``per_tenant`` chat turns (built under ``root``)."""
    distractors = chat_distractors(per_tenant) if per_tenant else {}
    rows: list[Scored] = []
    keyword: list[Scored] = []
    for count in sorted({0, per_tenant}):
        chosen = {tenant: turns[:count] for tenant, turns in distractors.items()}
        lines = [json.dumps(memory_to_dict(m)) for m in _memories(chosen)]
        data_dir = root / f"{store_name(model)}-{count}"
        with open_service(data_dir, embedding_options(model)) as mem:
            mem.import_jsonl(lines)
            if not mem.flush(timeout=3600):
                raise RuntimeError("indexing did not finish")
            store = f"facts + {count} chat turns" if count else "facts"
            rows += candidates(mem, asked(), store=store)
            with open_service(data_dir, {"source": "none"}) as keyword_only:
                keyword += candidates(keyword_only, asked(), store=store)
    return rows, keyword


def _listed(calibration: Calibration) -> list[float]:
    return [calibration.bias, calibration.cosine, calibration.coverage, calibration.gap]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m memroute.bench.calibrate", description=__doc__)
    parser.add_argument("--models", default="static,transformers")
    parser.add_argument("--distractors", type=int, default=2000)
    parser.add_argument("--cache-dir", default=str(DEFAULT_CACHE_DIR),
                        help="where embedded texts are kept between runs ('' for no cache)")
    args = parser.parse_args(argv)
    open_service = bench_opener(VectorCache(args.cache_dir) if args.cache_dir else None, {})

    fitted: list[tuple[Calibration, list[Scored]]] = []
    keyword_rows: list[Scored] = []
    with tempfile.TemporaryDirectory(prefix="memroute-calibrate-") as tmp:
        for model in (m.strip() for m in args.models.split(",") if m.strip()):
            rows, keyword = calibrate(open_service, model, Path(tmp), args.distractors)
            keyword_rows = keyword_rows or keyword  # the same stored data: one keyword leg
            calibration = fit(rows)
            fitted.append((calibration, rows))
            print(json.dumps({"model": model, "calibration": _listed(calibration)}))
    keyword_calibration = fit(keyword_rows, keyword=True)
    floor = choose_floor([*fitted, (keyword_calibration, keyword_rows)])
    for calibration, rows in fitted:
        print(json.dumps({"calibration": _listed(calibration), "test": reliability(rows, calibration, floor=floor)},
                         indent=2))
    print(json.dumps({"keyword_calibration": _listed(keyword_calibration),
                      "test": reliability(keyword_rows, keyword_calibration, floor=floor)}, indent=2))
    print(json.dumps({"floor_chosen_on_dev": floor}))


if __name__ == "__main__":
    main()
