"""The relevance model: a score in (0, 1) from measurements that do not depend on the other candidates."""

from __future__ import annotations

import pytest

from memroute.models import Memory, SearchHit, utcnow
from memroute.retrieval.fusion import content_terms, coverage
from memroute.retrieval.relevance import DEFAULT_CALIBRATION, KEYWORD_CALIBRATION, Calibration, QueryTerms, score_hits


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


def test_relevance_grows_with_cosine_and_coverage_and_falls_with_the_gap() -> None:
    base = DEFAULT_CALIBRATION.relevance(cosine=0.3, coverage=0.0, gap=0.0)
    assert DEFAULT_CALIBRATION.relevance(cosine=0.6, coverage=0.0, gap=0.0) > base
    assert DEFAULT_CALIBRATION.relevance(cosine=0.3, coverage=1.0, gap=0.0) > base
    assert DEFAULT_CALIBRATION.relevance(cosine=0.3, coverage=0.0, gap=0.1) < base
    assert Calibration.of((-1.96, 3.49, 2.03, -23.21)) == DEFAULT_CALIBRATION


def test_scoring_keeps_the_order_and_the_debugging_details() -> None:
    porto, rust = memory("Lives in Porto since 2024"), memory("Prefers Rust for CLIs")
    hits = [SearchHit(memory=porto, score=1.0, tier="hybrid", ranks={"vector": 1, "keyword": 1},
                      leg_scores={"vector": 0.5, "keyword": 2.0}),
            SearchHit(memory=rust, score=0.2, tier="vector", ranks={"vector": 2}, leg_scores={"vector": 0.1})]
    scored = score_hits(hits, "Porto", None, cosines={porto.id: 0.6, rust.id: 0.15}, vector_best=0.5, fused=True)
    assert [h.memory for h in scored] == [porto, rust]
    assert scored[0].score > 0.8 > 0.1 > scored[1].score > 0.0
    assert scored[0].leg_scores == {"vector": 0.5, "keyword": 2.0, "fused": 1.0, "cosine": 0.6, "coverage": 1.0}
    assert scored[0].ranks == {"vector": 1, "keyword": 1}


def test_keyword_only_results_score_by_coverage_and_the_bm25_gap() -> None:
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

    assert MemorySettings().min_score == DEFAULT_MIN_SCORE == 0.02


def test_the_floor_leaves_out_hits_and_never_computes_coverage_it_cannot_need(monkeypatch) -> None:
    near, far = memory("Lives in Porto since 2024"), memory("Porto is far away from here")
    hits = [SearchHit(memory=m, score=1.0, tier="vector", ranks={"vector": r}, leg_scores={"vector": s})
            for r, (m, s) in enumerate([(near, 0.5), (far, 0.0)], 1)]
    seen = []
    original = QueryTerms.coverage
    monkeypatch.setattr(QueryTerms, "coverage", lambda self, m: seen.append(m.id) or original(self, m))
    cosines = {near.id: 0.6, far.id: 0.1}
    floored = score_hits(hits, "Porto", None, cosines=cosines, vector_best=0.5)
    assert [h.memory for h in floored] == [near, far] and seen == [near.id, far.id]
    seen.clear()
    from memroute.retrieval.relevance import iter_scored

    kept = list(iter_scored(hits, "Porto", None, cosines=cosines, vector_best=0.5, floor=0.02))
    assert [h.memory for h in kept] == [near] and seen == [near.id]  # the far one: gap 0.5, hopeless
    assert DEFAULT_CALIBRATION.most(cosine=0.1, gap=0.5) < 0.02
