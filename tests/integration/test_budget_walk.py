"""The budget walk fetches ahead for tenants whose budgeted searches usually go to the full depth, and that
changes how many searches run, never which memories are chosen: on the embedded default (SQLite + FTS5, the
static embedding, sqlite-vec in both tiers) every budgeted search returns exactly what the two-pass walk
returns, hit for hit and score for score, whether the walk stopped at the budget's depth or went deeper."""

from __future__ import annotations

from pathlib import Path

import pytest

import memroute
from memroute.bench.engine import synthetic_contents
from memroute.models import SearchQuery

QUESTIONS = ["what does the user think about the billing service?", "marathon training plan", "trip to Lisbon",
             "which language for the dashboard", "database migration decision", "code review habits",
             "how is the data pipeline going", "team offsite plans", "coffee", "python tests"]


@pytest.mark.parametrize("promote_at", [64, 100_000], ids=["matrix tier", "vec0 tier"])
def test_fetching_ahead_chooses_exactly_what_the_two_pass_walk_chooses(tmp_path: Path, promote_at: int) -> None:
    # min_score 0: with the relevance floor most candidates never reach the walk, and a budget of 400 tokens
    # is then never filled at the budget's depth; the walk is what is tested here
    with memroute.open({"memory": {"min_score": 0.0}}, data_dir=str(tmp_path), embedding={"source": "static"},
                       vectors={"store": "sqlite-vec", "options": {"sqlite-vec": {"promote_at": promote_at}}}) as mem:
        for index, content in enumerate(synthetic_contents(300)):
            mem.add(api_key_id="t", content=content, key=f"note:{index}")
        assert mem.flush(timeout=60)
        engine = mem._engine
        fetches: list[int] = []
        fetch = engine._fetch

        def counted(query, depth, max_tokens):
            fetches.append(depth)
            return fetch(query, depth, max_tokens)

        engine._fetch = counted
        went_deeper = stopped = 0
        for number, question in enumerate(QUESTIONS * 2):
            max_tokens = (400, 1000, 1500)[number % 3]
            query = SearchQuery(api_key_id="t", text=f"{question} ({number})", strategy="hybrid", limit=100)
            engine._deeper.clear()  # the two-pass walk: fetch at the budget's depth, deeper when it must
            fetches.clear()
            walked = engine.search(query, max_tokens=max_tokens)
            passes = list(fetches)
            engine._deeper["t"] = 1.0  # fetch ahead at the full depth, once
            fetches.clear()
            ahead = engine.search(query, max_tokens=max_tokens)
            assert fetches == [engine.candidate_depth(100)]
            assert [(h.memory.id, h.score, h.tier) for h in ahead.hits] == [
                (h.memory.id, h.score, h.tier) for h in walked.hits]
            assert ahead.provenance == walked.provenance
            went_deeper += len(passes) == 2
            stopped += len(passes) == 1
        assert went_deeper and stopped, "the fixture exercises both outcomes of the walk"


def test_the_walk_learns_per_tenant_to_fetch_ahead(tmp_path: Path) -> None:
    with memroute.open({}, data_dir=str(tmp_path), embedding={"source": "static"}) as mem:
        for index in range(120):  # tiny memories: a 1000-token budget always wants the full depth
            mem.add(api_key_id="small", content=f"tea {index}", key=f"tea:{index}")
        assert mem.flush(timeout=60)
        engine = mem._engine
        fetches: list[int] = []
        fetch = engine._fetch
        engine._fetch = lambda query, depth, max_tokens: fetches.append(depth) or fetch(query, depth, max_tokens)
        for number in range(4):
            engine.search(SearchQuery(api_key_id="small", text=f"tea {number}", limit=100), max_tokens=1000)
        first = engine.budget_depth(100, 1000)
        assert fetches == [first, 100, 100, 100, 100]  # went deeper once: from then on one fetch
        assert "other" not in engine._deeper
