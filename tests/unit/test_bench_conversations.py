"""The conversation benchmark (memroute.bench.conversations): its data is what the docs say it is, and a bounded
smoke run goes through every leg. The full run is tests/bench/test_conversation_quality.py."""

from __future__ import annotations

import zlib
from collections import Counter

import memroute
from memroute.bench.conversations import (
    CATEGORIES,
    KS,
    LEGS,
    SESSIONS,
    evaluate,
    memories,
    naive_rrf,
    questions,
    real_conversations,
    run_conversations,
    summary,
)
from memroute.bench.cue_dialogues import CUE_TURNS
from memroute.bench.dialogues import DIALOGUES
from memroute.bench.more_dialogues import MORE_TURNS
from memroute.retrieval.question import read_question


def test_100_questions_over_4_tenants_each_with_known_evidence_split_in_fixed_halves() -> None:
    asked = [q for q in questions() if q.category == "facts"]
    assert len(asked) == 100 and Counter(q.tenant for q in asked) == {tenant: 25 for tenant in DIALOGUES}
    assert Counter(q.split for q in asked) == {"dev": 52, "test": 48}  # 13 new a tenant: 7 dev, 6 test
    assert len({(q.tenant, q.text) for q in asked}) == 100
    for q in asked:
        evidence = {key for key, *_ in (*DIALOGUES[q.tenant][1], *MORE_TURNS[q.tenant])}
        assert q.evidence and set(q.evidence) <= evidence, q
    assert [q for q in questions() if q.category == "facts"] == asked


def test_the_first_48_questions_keep_the_side_they_had_before_the_second_batch() -> None:
    # The split the first batch had on its own (12 a tenant, alternating in hash order), written out for one
    # tenant so that a change of rule shows here; the rest by the same rule.
    first = {(q.tenant, q.text): q.split for q in questions() if (q.tenant, q.text) in {
        (tenant, text) for tenant, (_, _, asked) in DIALOGUES.items() for text, _ in asked}}
    assert len(first) == 48 and Counter(first.values()) == {"dev": 24, "test": 24}
    for tenant, (_, _, asked) in DIALOGUES.items():
        ordered = sorted(asked, key=lambda q: zlib.crc32(f"{tenant}/{q[0]}".encode()))
        assert [first[(tenant, text)] for text, _ in ordered] == ["dev", "test"] * 6
    assert {text for (tenant, text), split in first.items() if tenant == "maya-tom" and split == "test"} == {
        "How fast did Tom run his half marathon?", "What does Maya do for work now?",
        "What does Maya's new flat overlook?", "What kind of dog did Tom get?", "Which city did Maya move to?",
        "Why does Maya avoid bread and pasta?"}


def test_time_and_person_questions_each_have_a_confuser_only_their_cue_tells_apart() -> None:
    asked = [q for q in questions() if q.category != "facts"]
    assert Counter((q.category, q.split) for q in asked) == {("time", "dev"): 12, ("time", "test"): 12,
                                                             ("person", "dev"): 8, ("person", "test"): 8}
    by_tenant = {tenant: {(m.api_key_id, m.key): m for m in memories(100, "bare", real_conversations())
                          if m.api_key_id == tenant} for tenant in CUE_TURNS}
    for q in asked:
        turns = by_tenant[q.tenant]
        (evidence,) = q.evidence
        confuser = evidence.replace("-t", "-c")
        said, other = turns[(q.tenant, evidence)], turns[(q.tenant, confuser)]
        if q.category == "time":  # the same speaker, earlier, outside the time the question names
            cues = read_question(q.text, q.asked)
            assert cues.window is not None, q.text
            assert cues.window.holds(said.said_at) and not cues.window.holds(other.said_at), q.text
            assert said.metadata["speaker"] == other.metadata["speaker"] and other.said_at < said.said_at
        else:  # the other friend, on the same topic
            assert said.metadata["speaker"] in q.text and other.metadata["speaker"] not in q.text, q.text


def test_turns_are_real_chat_with_the_evidence_in_its_session_stored_both_ways() -> None:
    conversations = real_conversations()
    dated = list(memories(200, "dated", conversations))
    bare = list(memories(200, "bare", conversations))
    assert [m.id for m in dated] == [m.id for m in bare] and len({m.id for m in dated}) == len(dated)
    evidence_count = (sum(len(turns) for _, turns, _ in DIALOGUES.values()) + sum(map(len, CUE_TURNS.values()))
                      + sum(map(len, MORE_TURNS.values())))
    assert len(dated) == 4 * 200 + evidence_count
    by_key = {(m.api_key_id, m.key): (d, m) for d, m in zip(dated, bare, strict=True)}
    dated_turn, bare_turn = by_key[("maya-tom", "m1")]
    assert bare_turn.content.startswith("Big news, I finally signed the lease")
    assert dated_turn.content == f'(18 February 2024) Maya said, "{bare_turn.content}"'  # session 3: 7 Jan + 6 weeks
    assert bare_turn.metadata["speaker"] == "Maya" and bare_turn.said_at.date().isoformat() == "2024-02-18"
    assert dated_turn.metadata == bare_turn.metadata
    order = [m.key for m in bare if m.api_key_id == "maya-tom"]
    assert order.index("m1") < order.index("m2")  # sessions in order, evidence inside its own
    created = [m.created_at for m in bare if m.api_key_id == "maya-tom"]
    assert created == sorted(created)
    tenants_turns = [{m.content for m in bare if m.api_key_id == t and m.key.startswith("turn:")} for t in DIALOGUES]
    assert not set.intersection(*tenants_turns[:2])  # each tenant its own conversations
    assert SESSIONS == 25


def test_naive_rrf_and_recall_at_k() -> None:
    assert naive_rrf(["a", "b"], ["b", "c"]) == ["b", "a", "c"]
    asked = [q for q in questions() if q.tenant == "maya-tom" and q.category == "facts"]
    report = evaluate(lambda leg, q: list(q.evidence) if leg == "hybrid" else [], asked)
    assert report["all"]["hybrid"] == {**{f"R@{k}": 1.0 for k in KS}, "n": 25}
    assert report["all"]["keyword"]["R@50"] == 0.0


def test_smoke_run_every_leg_through_the_service(tmp_path) -> None:
    def open_service(path, embedding, vector_options=None, memory_options=None):
        return memroute.open({}, data_dir=str(path), embedding=embedding, memory=memory_options or {},
                             vectors={"store": "sqlite-vec", **(vector_options or {})})

    report = run_conversations(open_service, models=("static",), per_tenant=100, root=tmp_path)
    assert set(CATEGORIES) == {"facts", "time", "person"}
    for form in ("dated", "bare"):
        result = report["results"]["static"][form]
        assert set(result["test"]) == set(LEGS) and result["test"]["hybrid"]["n"] == 48
        for leg in LEGS:
            recalls = [result["all"][leg][f"R@{k}"] for k in KS]
            assert recalls == sorted(recalls) and 0.0 <= recalls[0] <= recalls[-1] <= 1.0
        assert result["all"]["hybrid"]["R@50"] >= 0.8  # 25 sessions of 4 turns: nearly everything is in reach
        for category, n in (("time", 12), ("person", 8)):
            assert result["categories"][category]["test"]["hybrid-plain"]["n"] == n
    assert "| static | bare | **memroute hybrid** |" in summary(report)
    assert "| static | dated | memroute hybrid, question's words only |" in summary(report, "test", "time")
