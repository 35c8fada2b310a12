"""The dev-split tuning of the conversation set (memroute.bench.conversation_tuning): the grid covers every
setting once, stores load once and are reused, and a setting's figures are the recall of the dev questions
only, through the real service with the static model."""

from __future__ import annotations

import json

import attrs

from memroute.bench import conversation_tuning
from memroute.bench.conversation_tuning import Variant, dev_recall, grid, load_stores
from memroute.bench.conversations import KS, questions
from memroute.bench.embedding_cache import VectorCache


def test_the_grid_covers_each_setting_once() -> None:
    variants = grid()
    assert len(variants) == 2 * 4 * 2 * 5 == len(set(variants))
    assert Variant(center=False, hub_penalty=0.0, content_words=False, keyword_weight=1.0) in variants
    assert "center=off hub=0 query=whole keyword_weight=1" in {v.label() for v in variants}


def test_stores_load_once_and_a_setting_is_measured_on_dev_only(tmp_path, capsys) -> None:
    cache = VectorCache(tmp_path / "cache")
    said = []
    paths = load_stores(cache, "static", tmp_path / "root", 60, said.append)
    assert set(paths) == {"dated", "bare"} and len(said) == 2
    assert json.loads((paths["bare"] / "memroute-bench-loaded.json").read_text()) == {
        "model": "static", "form": "bare", "per_tenant": 60}
    assert load_stores(cache, "static", tmp_path / "root", 60, said.append) == paths and len(said) == 2
    assert len(load_stores(cache, "static", tmp_path / "root", 61, said.append)) == 2 and len(said) == 4

    dev = [q for q in questions() if q.category == "facts" and q.split == "dev"]
    plain = Variant(center=False, hub_penalty=0.0, content_words=False, keyword_weight=1.0)
    figures = dev_recall(cache, "static", paths["bare"], plain, dev)
    for leg in ("hybrid", "vector"):
        recalls = [figures[leg][f"R@{k}"] for k in KS]
        assert recalls == sorted(recalls) and recalls[0] > 0.0 and recalls[-1] <= 1.0
    # The same setting measures the same; the keyword weight moves the hybrid only.
    assert dev_recall(cache, "static", paths["bare"], plain, dev) == figures
    heavy = dev_recall(cache, "static", paths["bare"], attrs.evolve(plain, keyword_weight=50.0), dev)
    assert heavy["vector"] == figures["vector"]

    conversation_tuning.main(["--model", "static", "--turns", "61", "--root", str(tmp_path / "root"),
                              "--cache-dir", str(tmp_path / "cache"), "--hubs", "0", "--keyword-weights", "1",
                              "--output", str(tmp_path / "rows.json")])
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert len(rows) == 4 and [r["hybrid_mean"] for r in rows] == sorted((r["hybrid_mean"] for r in rows),
                                                                          reverse=True)
    assert "dev split, 52 facts questions, static" in capsys.readouterr().out


def test_a_trial_sets_what_the_model_does_not_declare(tmp_path) -> None:
    """multilingual-e5-small declares the centred query, the calibrated default hub penalty, the whole question
    and keyword weight 1.0; a trial of the other settings reaches the store, the embedder and fusion anyway
    (opening does not embed, so the model is not loaded)."""
    e5 = "transformers:multilingual-e5-small"
    cache = VectorCache(tmp_path / "cache")
    declared = Variant(center=True, hub_penalty=0.3, content_words=False, keyword_weight=1.0)
    for variant in (declared, Variant(center=False, hub_penalty=0.75, content_words=True, keyword_weight=1.5)):
        with conversation_tuning.open_trial(cache, e5, tmp_path / "store", variant) as mem:
            status = mem.status()
            store = status.vector_store["store"]
            assert store["center"] is variant.center
            assert store["hub_penalty"]["weight"] == variant.hub_penalty and store["hub_penalty"]["source"] == "set"
            assert status.fusion["keyword_weight"] == variant.keyword_weight
            assert mem._engine.embedder.query_content_words is variant.content_words
