"""The relevance fit (memroute.bench.calibrate) recovers a known logistic model, reports its bands and what its
floor hides, and chooses the floor on the dev split only."""

from __future__ import annotations

import math

import numpy as np

from memroute.bench.calibrate import Scored, asked, choose_floor, fit, reliability
from memroute.bench.facts import FACTS
from memroute.retrieval.relevance import Calibration


def _rows(truth: Calibration, count: int = 3000, seed: int = 7) -> list[Scored]:
    rng = np.random.default_rng(seed)
    rows = []
    for index in range(count):
        features = [(float(rng.uniform(-0.1, 0.8)), float(rng.choice([0.0, 0.5, 1.0]))) for _ in range(5)]
        labels = [bool(rng.random() < truth.relevance(cosine=c, coverage=v, gap=0.0)) for c, v in features]
        rows.append(Scored(split="dev" if index % 2 else "test", kind="lexical", features=features, labels=labels))
    return rows


def test_the_fit_recovers_the_slopes_of_the_model_that_labelled_the_data() -> None:
    truth = Calibration(bias=-2.0, cosine=5.0, coverage=1.5, gap=0.0)
    rows = _rows(truth)
    fitted = fit(rows, l2=0.0)
    # Answers and non-answers are weighted equally: the slopes are the truth's, the bias moves by the log-odds
    # of the classes' sizes.
    for got, want in ((fitted.cosine, truth.cosine), (fitted.coverage, truth.coverage)):
        assert abs(got - want) < 0.25 * abs(want), (fitted, truth)
    labels = [label for row in rows if row.split == "dev" for label in row.labels]
    shift = math.log((len(labels) - sum(labels)) / sum(labels))
    assert abs(fitted.bias - (truth.bias + shift)) < 0.3 and fitted.gap == 0.0
    keyword = fit(rows, l2=0.0, keyword=True)
    assert keyword.cosine == 0.0 and keyword.coverage > 0


def test_the_report_counts_bands_hidden_answers_and_kept_others() -> None:
    rows = [Scored(split="test", kind="mixed", features=[(0.9, 1.0), (0.0, 0.0), (0.9, 0.0)],
                   labels=[True, True, False])]
    calibration = Calibration(bias=-5.0, cosine=10.0, coverage=0.0, gap=0.0)
    report = reliability(rows, calibration, floor=0.5)
    assert report["by_kind"] == {"facts: mixed": {"questions": 1, "top5_answers_hidden": "1/2",
                                           "others_in_top10_kept_per_question": 1.0}}
    assert sum(band["candidates"] for band in report["bands"]) == 3
    shares = [band["answers"] for band in _report_bands(_rows(Calibration(bias=-2.0, cosine=5.0, coverage=1.5,
                                                                               gap=0.0)))]
    assert shares == sorted(shares)  # a higher band holds more answers


def _report_bands(rows: list[Scored]) -> list[dict]:
    return [band for band in reliability(rows, fit(rows), floor=0.0)["bands"] if band["candidates"] > 100]


def test_the_floor_is_chosen_on_the_dev_split_within_its_budget() -> None:
    calibration = Calibration(bias=0.0, cosine=1.0, coverage=0.0, gap=0.0)
    # 100 dev answers, their relevances 0.004 apart from 0.5; the test split's would allow any floor
    dev = [Scored(split="dev", kind="lexical", features=[(math.log(p / (1 - p)), 0.0)], labels=[True])
           for p in (0.5 + i * 0.004 for i in range(100))]
    test = [Scored(split="test", kind="lexical", features=[(5.0, 0.0)], labels=[True])]
    assert choose_floor([(calibration, dev + test)], budget=0.02) == 0.5
    assert choose_floor([(calibration, dev + test)], budget=0.10) == 0.54  # hides 0.500 to 0.536: ten


def test_the_calibration_questions_name_real_facts_and_keep_their_answers_in_one_split() -> None:
    questions = asked()
    kinds = {q.kind for q in questions}
    assert {"lexical", "paraphrased", "task", "indirect", "mixed", "off-topic"} == kinds
    for question in questions:
        keys = {key for key, *_ in FACTS[question.tenant]}
        assert set(question.answers) <= keys, question
    assert {q.split for q in questions if q.kind == "mixed"} == {"dev", "test"}
    assert all(q.answers == () for q in questions if q.kind == "off-topic")
