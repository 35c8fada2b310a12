"""The production-like quality benchmark (memroute.bench.quality): its data is what the docs say it is, and a
bounded smoke run (static embeddings, no distractors) shows hybrid at least as good as each leg. The full run
(2,000 real chat turns per tenant, static and transformers) is tests/bench/test_retrieval_quality.py."""

from __future__ import annotations

from collections import Counter

import pytest

import memroute
from memroute.bench.facts import FACTS
from memroute.bench.quality import LEGS, chat_distractors, queries, run_quality, tables
from memroute.retrieval.fusion import content_terms


def test_the_set_has_200_queries_over_4_tenants_split_in_equal_fixed_halves():
    selected = queries()
    assert len(selected) >= 200 and len({q.tenant for q in selected}) >= 4
    assert Counter(q.kind for q in selected).keys() == {"lexical", "paraphrased", "task"}
    by_fact = {}
    for q in selected:
        assert by_fact.setdefault((q.tenant, q.answer_key), q.split) == q.split  # a fact's questions stay together
    halves = Counter(by_fact.values())
    assert abs(halves["dev"] - halves["test"]) <= len(FACTS)  # each tenant alternates: at most one apart
    assert queries() == selected  # deterministic


def test_paraphrased_questions_share_no_content_word_with_their_fact():
    statements = {(tenant, key): text for tenant, facts in FACTS.items() for key, text, _, _ in facts}
    for q in queries():
        shared = content_terms(q.text) & content_terms(statements[(q.tenant, q.answer_key)])
        if q.kind == "paraphrased":
            assert not shared, q
        elif q.kind == "lexical":
            assert shared, q


def test_chat_distractors_are_real_distinct_and_disjoint_between_tenants():
    turns = chat_distractors(50)
    assert set(turns) == set(FACTS)
    every = [t for tenant in turns.values() for t in tenant]
    assert len(every) == len(set(every)) == 50 * len(FACTS)
    assert chat_distractors(50) == turns


def test_smoke_run_hybrid_is_at_least_as_good_as_each_leg(tmp_path):
    def open_service(path, embedding, vector_options=None):
        return memroute.open({}, data_dir=str(path), embedding=embedding,
                             vectors={"store": "sqlite-vec", **(vector_options or {})})

    report = run_quality(open_service, models=("static",), per_tenant=0, root=tmp_path)
    result = report["results"]["static"]["0"]
    for split in ("dev", "test"):
        for kind in ("lexical", "paraphrased", "task", "all"):
            cell = result[split][kind]
            assert set(cell) == set(LEGS)
            best = max(cell["keyword"]["R@5"], cell["vector"]["R@5"])
            assert cell["hybrid"]["R@5"] >= best, (split, kind, cell)
    assert "| 0 | paraphrased" in tables(report)


@pytest.mark.parametrize("bad", [-1])
def test_cli_refuses_a_negative_distractor_count(bad, tmp_path):
    from click.testing import CliRunner

    from memroute.cli import cli

    result = CliRunner().invoke(cli, ["bench", "--quality", "--distractors", str(bad)])
    assert result.exit_code == 2 and "--distractors" in result.output


def test_the_naive_recipe_finds_what_it_indexed():
    from memroute.bench.speed import NaiveRecipe, chat_turns
    from memroute.testing.fakes import HashingEmbeddingSource

    turns = chat_turns(300)
    embedder = HashingEmbeddingSource(64)
    naive = NaiveRecipe(turns, embedder.embed_batch(turns), embedder.embed)
    assert naive.search(turns[17])[0] == turns[17]
    assert naive.vector_top(turns[42])[0] == 42
    assert naive.match('what is "this"?') == '"what" OR "is" OR "this"'
    # The chat loop's add: the row, its FTS5 entry and its vector, past the matrix's first capacity.
    extra = [f"kept{i}x {i * 7919} qv{i * 31}" for i in range(40)]
    for text in extra:
        naive.add(text)
    assert naive.n == 340 and naive.matrix.shape == (340, 64)
    assert extra[31] in naive.search(extra[31]) and naive.vector_top(extra[5])[0] == 305
    assert turns[17] in naive.search(turns[17])  # the 10 best, read back in row order
