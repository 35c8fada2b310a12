"""What ``observe`` learns on the embedded default (SQLite, the shipped static embedding), through the public
Python API, with two tenants: the user's messages kept as ``episodic`` memories with the time they were said,
facts with slot keys, and the facts found again by questions in other words."""

from __future__ import annotations

import json

import pytest

import memroute
from memroute.config.serialization import memory_to_dict
from memroute.models import MemoryType

ALICE, BOB = "alice", "bob"

# The issue's 22 sentences: the 13 the regex extractor lost, and 9 it kept without their subject or not at all
# (chosen by us: the issue lists only the 13). Each with a question in other words and the slot it must find.
SENTENCES = [
    ("I'm allergic to peanuts", "Which nuts give me a reaction?", "diet:allergy:peanuts"),
    ("My daughter's name is Ana", "What is my kid called?", "family:daughter"),
    ("We moved to Berlin last year", "Which city did we relocate to?", "profile:location"),
    ("Call me Sam", "What name do I go by?", "profile:preferred_name"),
    ("I work at Acme as a data engineer", "Which company employs me?", "profile:employer"),
    ("I'm vegetarian", "Do I eat meat?", "diet:regime"),
    ("My birthday is March 3rd", "When was I born?", "profile:birthday"),
    ("I live in Lisbon", "Where is my home?", "profile:location"),
    ("I have two cats named Mochi and Tofu", "What pets do I have?", "pets:cat"),
    ("I'm learning Japanese", "Which language am I studying?", "learning:japanese"),
    ("My favorite color is green", "What colour do I like best?", "favorite:color"),
    ("I'm a nurse and I work night shifts", "What is my job?", "profile:occupation"),
    ("My wife is called Maria", "Who am I married to?", "family:wife"),
    ("I prefer TypeScript", "Which programming language do I favor?", "likes:typescript"),
    ("I love sushi", "What Japanese food do I enjoy?", "likes:sushi"),
    ("I go hiking on weekends", "What do I do on Saturdays and Sundays?", "routine:go_hiking"),
    ("I hate Python", "Which language do I dislike?", "likes:python"),
    ("I always commit before pushing", "What is my git habit?", "routine:commit_before_pushing"),
    ("I speak Portuguese", "What languages do I know?", "language:portuguese"),
    ("I don't eat pork", "Is there any meat I avoid?", "diet:avoid:pork"),
    ("I have asthma", "Do I have any breathing condition?", "health:condition:asthma"),
    ("I drive a Honda Civic", "What car do I own?", "possession:car"),
]


@pytest.fixture
def mem(tmp_path):
    with memroute.open({"memory": {"enabled": True}}, data_dir=str(tmp_path)) as service:
        yield service


def chat(text: str, name: str | None = None) -> dict:
    message = {"role": "user", "content": text, **({"name": name} if name else {})}
    return {"model": "gpt-4o", "messages": [message]}


def test_the_issue_sentences_are_facts_found_again_by_questions_in_other_words(mem):
    keys = set()
    for sentence, _question, key in SENTENCES:
        stored = mem.extract(sentence, api_key_id=ALICE, store=True)
        assert key in {m.key for m in stored}, sentence
        keys.add(key)
    assert len(SENTENCES) == 22
    missed = []
    for sentence, question, key in SENTENCES:
        # At the default relevance floor: an indirect question's answer below another fact it asks about
        # ("What is my job?" -> "Is a nurse", under "Works night shifts") is still found.
        hits = mem.search(question, api_key_id=ALICE, strategy="hybrid", limit=3).hits
        if key not in [hit.memory.key for hit in hits]:
            missed.append((sentence, question, [hit.memory.content for hit in hits]))
    assert not missed, missed
    # Every fact keeps its subject: it reads as a sentence about the user, not a bare object.
    contents = {m.key: m.content for m in mem.export(ALICE)}
    assert contents["likes:sushi"] == "Loves sushi" and contents["routine:go_hiking"] == "Goes hiking on weekends"
    # The other tenant sees none of it.
    assert list(mem.search("Which nuts give me a reaction?", api_key_id=BOB, strategy="hybrid").hits) == []


def test_observe_keeps_what_the_user_says_and_the_facts_in_it_per_tenant(mem):
    said = "2026-03-02T18:30:00Z"
    for text in ("Hi!", "Explain how a hash map works", "I'm allergic to peanuts, so no satay please.",
                 "My daughter starts school in September and she is nervous.", "thanks, that helps"):
        mem.observe(chat(text, name="ana"), api_key_id=ALICE, session_id="s1", said_at=said, wait=True)
    mem.observe(chat("I live in Lisbon"), api_key_id=BOB, wait=True)
    alice = {m.key: m for m in mem.export(ALICE)}
    turns = sorted(m.content for m in alice.values() if m.type is MemoryType.EPISODIC)
    assert turns == ["I'm allergic to peanuts, so no satay please.",
                     "My daughter starts school in September and she is nervous."]
    fact = alice["diet:allergy:peanuts"]
    assert fact.content == "Is allergic to peanuts" and fact.type is MemoryType.FACTUAL
    for memory in alice.values():
        assert memory.session_id == "s1"
        assert memory.metadata["said_at"] == "2026-03-02T18:30:00+00:00"
        assert memory.metadata["speaker"] == "ana"
    turn = next(m for m in alice.values() if m.key.startswith("turn:"))
    assert turn.metadata["category"] == "conversation" and turn.metadata["source"] == "user"
    assert turn.created_at.year != 2026 or turn.created_at.month != 3  # said_at is not the row's created_at
    assert {m.content for m in mem.export(BOB)} == {"I live in Lisbon", "Lives in Lisbon"}
    # A later question in the same words finds the message itself, only for its tenant.
    hits = mem.search("when does school start for my daughter", api_key_id=ALICE, limit=3).hits
    assert "My daughter starts school in September and she is nervous." in [h.memory.content for h in hits]
    assert all(h.memory.api_key_id == BOB for h in mem.search("Lisbon", api_key_id=BOB).hits)


@pytest.mark.parametrize(("mode", "expected"), [
    ("salient", {"I'm flying to Tokyo next week for a conference."}),
    ("all", {"I'm flying to Tokyo next week for a conference.", "ok thanks", "Explain how a hash map works"}),
    ("none", set()),
])
def test_keep_turns_modes(tmp_path, mode, expected):
    config = {"memory": {"enabled": True}, "extraction": {"keep_turns": mode}, "embedding": {"source": "none"}}
    with memroute.open(config, data_dir=str(tmp_path)) as mem:
        for text in ("I'm flying to Tokyo next week for a conference.", "ok thanks", "Explain how a hash map works"):
            mem.observe(chat(text), api_key_id=ALICE, wait=True)
        kept = {m.content for m in mem.export(ALICE) if m.key.startswith("turn:")}
        assert kept == expected
        # The fact is learned in every mode.
        assert any(m.key.startswith("plan:flying_to_tokyo") for m in mem.export(ALICE))


def test_the_time_said_comes_from_the_argument_the_header_or_now_and_injection_shows_it(mem):
    mem.observe(chat("I ran my first marathon in Porto."), api_key_id=ALICE, wait=True,
                said_at="2025-10-12T09:00:00+01:00")
    mem.observe(chat("I adopted a puppy called Rex."), api_key_id=ALICE, wait=True,
                headers={"x-memroute-message-time": "2025-11-20"})
    mem.observe(chat("I started a pottery class on Mondays."), api_key_id=ALICE, wait=True)
    said = {m.content: m.metadata["said_at"] for m in mem.export(ALICE) if m.key.startswith("turn:")}
    assert said["I ran my first marathon in Porto."] == "2025-10-12T08:00:00+00:00"
    assert said["I adopted a puppy called Rex."] == "2025-11-20T00:00:00+00:00"
    assert said["I started a pottery class on Mondays."][:4] >= "2026"
    augmented = mem.augment(chat("When did I run my marathon?"), api_key_id=ALICE)
    block = augmented["messages"][0]["content"]
    assert '- "conversation" (said 2025-10-12): "I ran my first marathon in Porto."' in block


def test_a_malformed_time_is_a_typed_error_and_stores_nothing(mem):
    for kwargs in ({"said_at": "last tuesday"}, {"said_at": "2026-03-02T10:00:00"},
                   {"headers": {"x-memroute-message-time": "soon"}}, {"said_at": 12}):
        with pytest.raises(memroute.ValidationError) as info:
            mem.observe(chat("I live in Lisbon"), api_key_id=ALICE, wait=True, **kwargs)
        assert info.value.problems[0][0] in ("said_at", "x-memroute-message-time")
    assert list(mem.export(ALICE)) == []


def test_a_message_said_again_is_one_memory_and_a_long_one_is_split(tmp_path):
    config = {"memory": {"enabled": True}, "extraction": {"turn_max_chars": 200}, "embedding": {"source": "none"}}
    with memroute.open(config, data_dir=str(tmp_path)) as mem:
        mem.observe(chat("Our landlord raised the rent again this year."), api_key_id=ALICE, wait=True,
                    said_at="2026-01-05")
        mem.observe(chat("our landlord raised the rent AGAIN this year!"), api_key_id=ALICE, wait=True,
                    said_at="2026-02-05")
        turns = [m for m in mem.export(ALICE) if m.key.startswith("turn:")]
        assert len(turns) == 1 and turns[0].metadata["said_at"].startswith("2026-02-05")
        long_text = " ".join(f"On day {i} of the trip we visited another village near the lake." for i in range(12))
        stored = mem.observe(chat(long_text), api_key_id=ALICE, wait=True)
        parts = [m for m in stored if m.key.startswith("turn:")]
        assert len(parts) > 1 and all(len(m.content) <= 200 for m in parts)
        assert " ".join(m.content for m in parts) == long_text
        assert [m.metadata["part"] for m in parts] == list(range(1, len(parts) + 1))


def test_a_message_said_again_in_nearly_the_same_words_is_one_memory_per_tenant(tmp_path):
    """Contractions, fillers, punctuation and word order set aside: five wordings of one message are one kept turn
    (its latest wording and time, the earlier ones in its history); a message that differs in a word that carries
    something is another; the other tenant's same message is its own memory."""
    config = {"memory": {"enabled": True}, "embedding": {"source": "none"}}
    wordings = ["I'm allergic to peanuts, so no satay please.", "i'm allergic to peanuts so no satay please",
                "I am allergic to peanuts, so no satay please!", "I\u2019m allergic to peanuts, so please no satay.",
                "Im allergic to peanuts so no satay"]
    with memroute.open(config, data_dir=str(tmp_path)) as mem:
        for day, text in enumerate(wordings, start=1):
            mem.observe(chat(text), api_key_id=ALICE, wait=True, said_at=f"2026-03-0{day}")
        mem.observe(chat(wordings[0]), api_key_id=BOB, wait=True)
        for text in ("I'm not allergic to peanuts, so satay is fine.", "We moved to Berlin last year.",
                     "We moved to Lisbon last year."):
            mem.observe(chat(text), api_key_id=ALICE, wait=True)
        turns = {m.content: m for m in mem.export(ALICE) if m.key.startswith("turn:")}
        assert set(turns) == {wordings[-1], "I'm not allergic to peanuts, so satay is fine.",
                              "We moved to Berlin last year.", "We moved to Lisbon last year."}
        kept = turns[wordings[-1]]
        assert kept.metadata["said_at"].startswith("2026-03-05")
        assert [e.new_content for e in mem.history(kept.id, api_key_id=ALICE).entries] == wordings
        assert [m.content for m in mem.export(BOB) if m.key.startswith("turn:")] == [wordings[0]]
        assert mem.history(kept.id, api_key_id=BOB) is None


def test_a_message_kept_by_an_earlier_memroute_is_updated_when_said_again(tmp_path):
    """Turns kept before the key set contractions, fillers and word order aside are found under their old key
    (case, punctuation and spacing only): saying the message again updates that memory, not a second one."""
    from memroute.pipeline.turns import TURN_CATEGORY, legacy_turn_key

    config = {"memory": {"enabled": True}, "embedding": {"source": "none"}}
    text = "Our landlord raised the rent again this year."
    with memroute.open(config, data_dir=str(tmp_path)) as mem:
        old = mem.add(api_key_id=ALICE, content=text, key=legacy_turn_key(text), type=MemoryType.EPISODIC,
                      metadata={"category": TURN_CATEGORY, "source": "user", "said_at": "2025-11-01T00:00:00+00:00"})
        mem.observe(chat("our landlord raised the rent AGAIN this year!"), api_key_id=ALICE, wait=True,
                    said_at="2026-02-05")
        turns = [m for m in mem.export(ALICE) if m.key.startswith("turn:")]
        assert [(m.id, m.content) for m in turns] == [(old.id, "our landlord raised the rent AGAIN this year!")]
        assert turns[0].metadata["said_at"].startswith("2026-02-05")


def test_export_and_import_keep_the_time_said(mem, tmp_path):
    mem.observe(chat("I'm allergic to peanuts"), api_key_id=ALICE, wait=True, said_at="2024-06-01T12:00:00Z")
    lines = [json.dumps(memory_to_dict(m)) for m in mem.export(ALICE)]  # what `memroute export` writes
    assert {json.loads(line)["metadata"]["said_at"] for line in lines} == {"2024-06-01T12:00:00+00:00"}
    with memroute.open({"memory": {"enabled": True}}, data_dir=str(tmp_path / "other")) as fresh:
        fresh.import_jsonl(lines)
        assert {m.metadata["said_at"] for m in fresh.export(ALICE)} == {"2024-06-01T12:00:00+00:00"}


def test_a_summary_groups_what_was_learned_by_kind(mem):
    for text in ("I'm allergic to peanuts.", "My wife is called Maria.", "Our landlord raised the rent again."):
        mem.observe(chat(text), api_key_id=ALICE, wait=True)
    preview = mem.summarize(ALICE, 0, dry_run=True).summary_preview
    for title in ("Health", "Family and relationships", "What they said"):
        assert title in preview, preview
    assert preview.index("Health") < preview.index("What they said")
    assert len(list(mem.export(ALICE))) == 5  # a dry run changes nothing


@pytest.mark.parametrize(("extraction", "field"), [
    ({"keep_turns": "some"}, "keep_turns"), ({"keep_turns": 1}, "keep_turns"),
    ({"turn_max_chars": 10}, "turn_max_chars"), ({"extractors": ["nope"]}, "nope"),
])
def test_bad_extraction_settings_are_config_errors_naming_the_field(tmp_path, extraction, field):
    config = {"memory": {"enabled": True}, "extraction": extraction, "embedding": {"source": "none"}}
    with pytest.raises(memroute.MemrouteError, match=field), memroute.open(config, data_dir=str(tmp_path)) as mem:
        mem.extract("I live in Lisbon")  # the chain is built on first use


def test_facts_from_the_assistants_reply_are_not_attributed_to_the_user(tmp_path):
    config = {"memory": {"enabled": True}, "extraction": {"mine_assistant": True}, "embedding": {"source": "none"}}
    with memroute.open(config, data_dir=str(tmp_path)) as mem:
        reply = {"choices": [{"message": {"role": "assistant", "content": "I live in a data center."}}]}
        stored = mem.observe(chat("I live in Lisbon.", name="ana"), reply, api_key_id=ALICE, wait=True)
        by_source = {(m.metadata["source"], m.key): m for m in stored}
        assert by_source[("user", "profile:location")].metadata["speaker"] == "ana"
        # Both statements fill one slot: the reply's (mined last) is the one stored, labelled as the assistant's.
        assert by_source[("assistant", "profile:location")].metadata.get("speaker") is None
        turns = [m for m in stored if m.key.startswith("turn:")]
        assert [m.content for m in turns] == ["I live in Lisbon."]  # the reply itself is not kept
