"""The relevance model: a score in (0, 1) from measurements that do not depend on the other candidates."""

from __future__ import annotations

import pytest

from memroute.models import Memory, SearchHit, utcnow
from memroute.retrieval.fusion import content_terms, coverage
from memroute.retrieval.relevance import (
    DEFAULT_CALIBRATION,
    DEFAULT_MIN_SCORE,
    KEYWORD_CALIBRATION,
    MAX_PARTS,
    Calibration,
    QueryTerms,
    iter_scored,
    message_parts,
    score_hits,
)


def memory(content: str, key: str = "note") -> Memory:
    now = utcnow()
    return Memory(id=content[:20], api_key_id="t", key=key, content=content, created_at=now, updated_at=now)


@pytest.mark.parametrize(("query", "content"), [
    ("where does the user live?", "Lives in Porto since 2024"),
    ("which language for command line tools", "Prefers Rust for CLIs"),
    ("Porto", "Lives in Porto since 2024"),
    ("cats and dogs", "Has two cats named Miso"),
    ("plan the billing service: database, hosting, libraries, queue, cache", "Uses Postgres for the database"),
])
def test_coverage_matches_the_fusion_rule(query: str, content: str) -> None:
    assert QueryTerms(query).coverage(memory(content)) == coverage(content_terms(query), memory(content))


def test_a_query_of_stop_words_alone_is_no_keyword_evidence() -> None:
    assert QueryTerms("what is it?").coverage(memory("anything at all")) == 0.0  # fusion's rule says 1.0


def test_coverage_reads_the_key_too_and_whole_words_only() -> None:
    assert QueryTerms("deploy pipeline").coverage(memory("We ship on Fridays", key="pattern:deploy")) == 0.5
    assert QueryTerms("live").coverage(memory("She delivers mail")) == 0.0


@pytest.mark.parametrize("z", [-1e6, -5.0, 0.0, 5.0, 1e6])
def test_a_relevance_is_strictly_inside_0_1_and_finite(z: float) -> None:
    value = Calibration(bias=z, cosine=0.0, coverage=0.0, gap=0.0).relevance(cosine=0.3, coverage=0.0, gap=0.0)
    assert 0.0 <= value <= 1.0


def test_relevance_grows_with_cosine_and_coverage_and_does_not_depend_on_the_other_candidates() -> None:
    base = DEFAULT_CALIBRATION.relevance(cosine=0.3, coverage=0.0, gap=0.0)
    assert DEFAULT_CALIBRATION.relevance(cosine=0.6, coverage=0.0, gap=0.0) > base
    assert DEFAULT_CALIBRATION.relevance(cosine=0.3, coverage=1.0, gap=0.0) > base
    # the shipped fits give the gap below the best candidate no weight: a runner-up is not less relevant
    assert DEFAULT_CALIBRATION.relevance(cosine=0.3, coverage=0.0, gap=0.1) == base
    assert KEYWORD_CALIBRATION.gap == 0.0
    assert Calibration.of((-3.34, 11.46, 2.72, 0.0)) == DEFAULT_CALIBRATION
    # a calibration that does weigh it (a third-party source's) is honoured
    assert Calibration.of((-3.0, 10.0, 2.0, -5.0)).relevance(cosine=0.3, coverage=0.0, gap=0.1) < (
        Calibration.of((-3.0, 10.0, 2.0, -5.0)).relevance(cosine=0.3, coverage=0.0, gap=0.0))


def test_scoring_keeps_the_order_and_the_debugging_details() -> None:
    porto, rust = memory("Lives in Porto since 2024"), memory("Prefers Rust for CLIs")
    hits = [SearchHit(memory=porto, score=1.0, tier="hybrid", ranks={"vector": 1, "keyword": 1},
                      leg_scores={"vector": 0.5, "keyword": 2.0}),
            SearchHit(memory=rust, score=0.2, tier="vector", ranks={"vector": 2}, leg_scores={"vector": 0.1})]
    scored = score_hits(hits, "Porto", None, cosines={porto.id: 0.6, rust.id: 0.05}, vector_best=0.5, fused=True)
    assert [h.memory for h in scored] == [porto, rust]
    assert scored[0].score > 0.8 > 0.1 > scored[1].score > 0.0
    assert scored[0].leg_scores == {"vector": 0.5, "keyword": 2.0, "fused": 1.0, "cosine": 0.6, "coverage": 1.0}
    assert scored[0].ranks == {"vector": 1, "keyword": 1}


def test_keyword_only_results_score_by_coverage() -> None:
    full, half = memory("Lives in Porto since 2024"), memory("Porto wine tasting")
    hits = [SearchHit(memory=m, score=s, tier="keyword", ranks={"keyword": r}, leg_scores={"keyword": s})
            for r, (m, s) in enumerate([(full, 3.0), (half, 1.0)], 1)]
    scored = score_hits(hits, "live Porto", None, cosines={}, vector_best=None)
    assert scored[0].score == KEYWORD_CALIBRATION.relevance(cosine=0.0, coverage=1.0, gap=0.0)
    assert scored[1].score == pytest.approx(KEYWORD_CALIBRATION.relevance(cosine=0.0, coverage=0.5, gap=2 / 3))
    assert "fused" not in scored[0].leg_scores


def test_the_settings_default_floor_is_the_documented_one() -> None:
    from memroute.config.settings import MemorySettings
    from memroute.retrieval.relevance import DEFAULT_MIN_SCORE

    assert MemorySettings().min_score == DEFAULT_MIN_SCORE == 0.18


def test_the_floor_leaves_out_hits_and_never_computes_coverage_it_cannot_need(monkeypatch) -> None:
    near, far = memory("Lives in Porto since 2024"), memory("Porto is far away from here")
    hits = [SearchHit(memory=m, score=1.0, tier="vector", ranks={"vector": r}, leg_scores={"vector": s})
            for r, (m, s) in enumerate([(near, 0.5), (far, 0.0)], 1)]
    seen = []
    original = QueryTerms.coverage
    monkeypatch.setattr(QueryTerms, "coverage", lambda self, m: seen.append(m.id) or original(self, m))
    cosines = {near.id: 0.6, far.id: -0.1}
    floored = score_hits(hits, "Porto", None, cosines=cosines, vector_best=0.5)
    assert [h.memory for h in floored] == [near, far] and seen == [near.id, far.id]
    seen.clear()
    kept = list(iter_scored(hits, "Porto", None, cosines=cosines, vector_best=0.5, floor=DEFAULT_MIN_SCORE))
    assert [h.memory for h in kept] == [near] and seen == [near.id]  # the far one: no coverage could lift it
    assert DEFAULT_CALIBRATION.most(cosine=-0.1, gap=0.5) < DEFAULT_MIN_SCORE


@pytest.mark.parametrize(("message", "parts"), [
    ("Which database for this project? I prefer Ubuntu servers.",
     ["Which database for this project?", "I prefer Ubuntu servers."]),
    ("How do we take card payments, and what does a sourdough cost?",
     ["How do we take card payments", "and what does a sourdough cost?"]),
    ("where does the user live?", []),
    ("What is it? What is my job?", []),  # "What is it?" has no content word: one part
    ("Lives in Porto, near the river", []),  # a comma alone does not split
])
def test_a_message_is_split_into_the_parts_it_asks_about(message: str, parts: list[str]) -> None:
    assert message_parts(message) == parts


def test_a_long_message_keeps_its_last_parts() -> None:
    message = " ".join(f"Topic number {i} matters." for i in range(10))
    assert message_parts(message) == [f"Topic number {i} matters." for i in range(10 - MAX_PARTS, 10)]


def test_coverage_is_the_best_of_the_whole_message_and_its_parts() -> None:
    postgres = memory("I'll use Postgres for this project")
    message = "Which database for this project? I prefer Ubuntu servers."
    assert QueryTerms(message).coverage(postgres) == 0.5  # database, project: one of two
    assert coverage(content_terms(message), postgres) == 0.2  # of the whole message's five words


@pytest.mark.parametrize("message", ["", "   ", "?!.;:", ", and , but", "a. the. of?"])
def test_a_message_without_content_words_has_no_parts_and_no_coverage(message: str) -> None:
    assert message_parts(message) == []
    assert QueryTerms(message).coverage(memory("Lives in Porto since 2024")) == 0.0


def test_a_huge_message_is_scored_by_its_last_parts() -> None:
    message = "Tell me about Lisbon. " * 20_000 + "Where does the user live?"
    assert message_parts(message)[-1] == "Where does the user live?" and len(message_parts(message)) == MAX_PARTS
    # "live" of the last part's two words; of the whole message's three (Lisbon, user, live) it would be a third
    assert QueryTerms(message).coverage(memory("Lives in Porto since 2024")) == 0.5
