"""The relevance fit (memroute.bench.calibrate) recovers a known logistic model and reports its bands."""

from __future__ import annotations

import numpy as np

from memroute.bench.calibrate import fit, reliability
from memroute.retrieval.relevance import Calibration


def test_the_fit_recovers_the_model_that_labelled_the_data() -> None:
    truth = Calibration(bias=-2.0, cosine=5.0, coverage=1.5, gap=-10.0)
    rng = np.random.default_rng(7)
    rows = []
    for index in range(3000):
        features = [(float(rng.uniform(-0.1, 0.8)), float(rng.choice([0.0, 0.5, 1.0])), float(rng.uniform(0, 0.4)))
                    for _ in range(5)]
        labels = [bool(rng.random() < truth.relevance(cosine=c, coverage=v, gap=g)) for c, v, g in features]
        rows.append(("dev" if index % 2 else "test", features, labels))
    fitted = fit(rows, l2=0.0)
    for got, want in zip((fitted.bias, fitted.cosine, fitted.coverage, fitted.gap),
                         (truth.bias, truth.cosine, truth.coverage, truth.gap), strict=True):
        assert abs(got - want) < 0.25 * max(1.0, abs(want)), (fitted, truth)
    report = reliability(rows, fitted, floor=0.0)
    assert report["answers_among_candidates_kept_by_floor"] == 1.0
    assert sum(band["candidates"] for band in report["bands"]) == 1500 * 5
    shares = [band["answers"] for band in report["bands"] if band["candidates"] > 100]
    assert shares == sorted(shares)  # a higher band holds more answers
