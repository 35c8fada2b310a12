"""What observe learns, at full size (run with ``pytest -m bench tests/bench``): ``memroute bench --learning``'s
run, 500 real chat turns mixed into each user's conversations (4,288 turns). On the held-out test split: recall
through ``observe`` is at least that of storing every turn directly, at R@3 and R@5, and far above the old
regex extractor; the everyday extractor's precision and recall stay where docs/pipeline.md says."""

from __future__ import annotations

import pytest

import memroute
from memroute.bench.learning import extraction_table, learning_table, run_learning
from memroute.bench.learning_data import PEOPLE
from memroute.bench.quality import chat_distractors

pytestmark = pytest.mark.bench


@pytest.mark.timeout(1800)
def test_observe_recalls_at_least_as_much_as_storing_every_turn(tmp_path):
    def open_fresh(path, extraction):
        return memroute.open({"memory": {"enabled": True}, "extraction": extraction}, data_dir=str(path))

    report = run_learning(open_fresh, tmp_path, filler=chat_distractors(500, tuple(PEOPLE)))
    print("\n" + extraction_table(report) + "\n\n" + learning_table(report))
    e2e = {mode: splits["test"] for mode, splits in report["conversations"].items()}
    for k in ("R@3", "R@5"):
        assert e2e["observe"][k] >= e2e["direct"][k], (k, e2e)
        assert e2e["observe"][k] >= e2e["regex (old)"][k] + 0.5, (k, e2e)
    rows = report["extraction"]["test"]["everyday"]
    tp = sum(r["tp"] for c, r in rows.items() if c != "none")
    fp = sum(r["fp"] for r in rows.values())
    fn = sum(r["fn"] for c, r in rows.items() if c != "none")
    assert tp / (tp + fp) >= 0.95 and tp / (tp + fn) >= 0.9
