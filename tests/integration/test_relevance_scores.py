"""Scores people can read, through the Python API on the embedded default (SQLite + FTS5, sqlite-vec) with
both built-in embedding sources: every hit's score is a relevance in [0, 1], the best never 0, and one floor
(``[memory] min_score``) applies to search, preview and augment alike without hiding a clear match."""

from __future__ import annotations

from pathlib import Path

import pytest

import memroute
from memroute.bench.quality import embedding_options
from memroute.errors import ConfigError, ValidationError

SEVEN = ["Lives in Porto since 2024", "Prefers Rust for CLIs", "Prefers TypeScript for frontend code",
         "Allergic to peanuts", "Works as a nurse at the city hospital", "Has two cats named Miso and Tofu",
         "Runs a half marathon every spring"]


@pytest.fixture(params=["static", "transformers", "transformers:multilingual-e5-small"])
def mem(request, tmp_path: Path):
    """The memories through each built-in local model (``transformers``: its default, all-MiniLM-L6-v2)."""
    with memroute.open({"memory": {"enabled": True}}, data_dir=str(tmp_path),
                       embedding=embedding_options(request.param)) as service:
        for index, content in enumerate(SEVEN):
            service.add(api_key_id="alice", content=content, key=f"fact:{index}")
        service.add(api_key_id="rusty", content="Prefers Rust for CLIs", key="preference:cli")
        service.add(api_key_id="bob", content="Lives in Lisbon with his sister", key="home")
        assert service.flush(timeout=120)
        yield service


def contents(hits) -> list[str]:
    return [hit.memory.content if hasattr(hit, "memory") else hit.content for hit in hits]


def test_a_clear_match_is_found_with_and_without_a_budget(mem) -> None:
    for budget in (500, None):
        found = mem.search("where does the user live?", api_key_id="alice", max_tokens=budget)
        assert contents(found)[0] == "Lives in Porto since 2024"
    preview = mem.preview("which language for command line tools", api_key_id="rusty")
    assert contents(preview.memories) == ["Prefers Rust for CLIs"]
    assert contents(mem.preview("which language for command line tools", api_key_id="alice").memories)[0] == (
        "Prefers Rust for CLIs")


def test_an_unrelated_question_does_not_return_every_memory(mem, request) -> None:
    if request.node.callspec.params["mem"] == "transformers:multilingual-e5-small":
        # Known shortfall (issue 34): e5's cosines sit high for any pair, and with its relevance model (refitted
        # by ``python -m memroute.bench.calibrate``) "spicy food" keeps 4 of the 7 above the default floor (Rust
        # 0.32, cats 0.25, peanuts 0.24, TypeScript 0.19 against 0.18).
        request.applymarker(pytest.mark.xfail(strict=True, reason="e5 keeps 4 of 7 above the default floor"))
    for budget in (None, 2000):
        found = mem.search("spicy food", api_key_id="alice", max_tokens=budget)
        # the nearest few, never all seven (static: "Allergic to peanuts" 0.38, then two near the floor)
        assert len(found.hits) <= 3, contents(found)
    report = mem.explain_augment({"model": "m", "messages": [{"role": "user", "content": "spicy food"}]},
                                 api_key_id="alice", record_access=False)
    assert report.preview is None or len(report.preview.memories) <= 3


def test_augment_injects_the_clear_match(mem) -> None:
    request = {"model": "m", "messages": [{"role": "user", "content": "where does the user live?"}]}
    report = mem.explain_augment(request, api_key_id="alice", record_access=False)
    assert report.preview is not None and "Lives in Porto since 2024" in contents(report.preview.memories)
    assert "Lives in Porto since 2024" in str(report.request)


def test_scores_are_relevances_in_0_1_and_the_preview_keeps_ranks_and_leg_scores(mem) -> None:
    for query in ("where does the user live?", "Porto", "pets", "what is my job", "quantum chromodynamics"):
        found = mem.search(query, api_key_id="alice")
        assert all(0.0 < hit.score <= 1.0 for hit in found), [hit.score for hit in found]
        preview = mem.preview(query, api_key_id="alice")
        for item in preview.memories:
            assert 0.0 < item.score <= 1.0
            assert item.ranks and {"cosine", "coverage"} <= set(item.leg_scores)
    # a word-for-word match is near certain, a paraphrase less so, and the same query ranks the same way
    assert mem.search("Porto", api_key_id="alice").hits[0].score > 0.8
    porto = mem.search("where does the user live?", api_key_id="alice").hits[0].score
    assert 0.2 < porto < 0.9


def test_each_source_scores_with_its_own_calibration(mem) -> None:
    from memroute.retrieval.relevance import Calibration

    top = mem.preview("Porto", api_key_id="alice").memories[0]
    declared = mem._engine.embedder.relevance_calibration  # through the embedding cache
    assert declared is not None and declared == mem._engine.embedder.inner.relevance_calibration
    expected = Calibration.of(declared).relevance(cosine=top.leg_scores["cosine"],
                                                  coverage=top.leg_scores["coverage"], gap=0.0)
    assert top.score == expected


def test_the_floor_is_one_setting_for_every_path(tmp_path: Path) -> None:
    with memroute.open({"memory": {"min_score": 0.0}}, data_dir=str(tmp_path), embedding={"source": "static"}) as m:
        for index, content in enumerate(SEVEN):
            m.add(api_key_id="alice", content=content, key=f"fact:{index}")
        assert m.flush(timeout=60)
        assert len(m.search("spicy food", api_key_id="alice").hits) == len(SEVEN)  # off: the plain ranking
        assert len(m.preview("spicy food", api_key_id="alice").memories) == len(SEVEN)
    with memroute.open({"memory": {"min_score": 0.99}}, data_dir=str(tmp_path), embedding={"source": "static"}) as m:
        assert m.search("where does the user live?", api_key_id="alice").hits == ()
        assert m.preview("where does the user live?", api_key_id="alice").memories == ()


@pytest.mark.parametrize("bad", [-0.1, 1.5, "high", True])
def test_a_bad_floor_is_a_typed_error_naming_the_field(tmp_path: Path, bad) -> None:
    with pytest.raises(ConfigError) as caught:
        memroute.open({"memory": {"min_score": bad}}, data_dir=str(tmp_path))
    assert "min_score" in str(caught.value)
    with memroute.open({}, data_dir=str(tmp_path)) as m, pytest.raises(ValidationError) as invalid:
        m.search("anything", api_key_id="alice", min_score=bad)
    assert tuple(invalid.value.problems) == (("min_score", "range"),)


@pytest.mark.parametrize("old", ["min_similarity", "similarity_window"])
def test_the_removed_cosine_floor_settings_say_what_replaced_them(tmp_path: Path, old: str) -> None:
    with pytest.raises(ConfigError) as caught:
        memroute.open({"memory": {old: 0.2}}, data_dir=str(tmp_path))
    assert f"memory.{old}: removed" in str(caught.value) and "min_score" in str(caught.value)


def test_a_search_can_set_its_own_floor(mem) -> None:
    assert len(mem.search("spicy food", api_key_id="alice", min_score=0).hits) == len(SEVEN)
    assert mem.search("where does the user live?", api_key_id="alice", min_score=0.99).hits == ()
    assert len(mem.search("spicy food", api_key_id="alice", min_score=0.5).hits) < len(SEVEN) / 2


def test_one_tenant_never_sees_another_tenants_match(mem) -> None:
    assert "Lives in Lisbon with his sister" not in contents(mem.search("where does he live?", api_key_id="alice"))
    assert contents(mem.search("where does he live?", api_key_id="bob")) == ["Lives in Lisbon with his sister"]
    assert "Lives in Porto since 2024" not in contents(mem.preview("where does the user live?",
                                                                   api_key_id="bob").memories)


@pytest.mark.parametrize("source", ["static", "transformers", "none"])
def test_a_message_about_several_things_injects_the_memory_that_answers_one_of_them(tmp_path: Path, source) -> None:
    with memroute.open({"memory": {"enabled": True}}, data_dir=str(tmp_path), embedding={"source": source}) as mem:
        mem.add(api_key_id="alice", content="I'll use Postgres for this project", key="decision:db")
        mem.add(api_key_id="alice", content="Prefers Ubuntu servers", key="preference:os")
        for index, content in enumerate(SEVEN):
            mem.add(api_key_id="alice", content=content, key=f"fact:{index}")
        mem.add(api_key_id="bob", content="I'll use MySQL for this project", key="decision:db")
        assert mem.flush(timeout=120)
        message = "Which database for this project? I prefer Ubuntu servers."
        request = {"model": "m", "messages": [{"role": "user", "content": message}]}
        sent = str(mem.augment(request, api_key_id="alice")["messages"])
        assert "Postgres" in sent and "Ubuntu servers" in sent and "MySQL" not in sent
        hit = next(h for h in mem.search(message, api_key_id="alice") if h.memory.key == "decision:db")
        assert hit.leg_scores["coverage"] == 0.5  # "database", "project": of the part it answers, not of five words
        bob = str(mem.augment(request, api_key_id="bob")["messages"])
        assert "MySQL" in bob and "Postgres" not in bob


def test_the_proxy_injects_the_memory_that_answers_one_topic_of_a_message(tmp_path: Path) -> None:
    """Through ``memroute serve``'s OpenAI-compatible proxy on a loopback socket, the real ``openai`` SDK as the
    client and the fake model server upstream (it stands in for the paid API): the default floor keeps the
    decision that answers the message's first sentence, for its tenant only."""
    import openai

    from tests.servers.proxy_stack import proxy_stack

    with proxy_stack(tmp_path, embedding="static") as stack:
        for who, facts in (("alice", ["I'll use Postgres for this project.", "Prefers Ubuntu servers", *SEVEN]),
                           ("bob", ["I'll use MySQL for this project."])):
            for index, fact in enumerate(facts):
                stack.mem.add(api_key_id=stack.tenants[who], content=fact, key=f"fact:{index}")
        assert stack.mem.flush(timeout=60)
        for who, mine, theirs in (("alice", "Postgres", "MySQL"), ("bob", "MySQL", "Postgres")):
            with openai.OpenAI(base_url=stack.openai_url, api_key=stack.keys[who], max_retries=0) as client:
                client.chat.completions.create(model="gpt-4o", messages=[
                    {"role": "user", "content": "Which database for this project? I prefer Ubuntu servers."}])
            injected = stack.upstream.last["body"]["messages"][0]["content"]
            assert mine in injected and theirs not in injected
