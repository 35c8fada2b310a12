"""The ``everyday`` extractor: everyday first-person statements become facts that keep their subject, with slot
keys; questions, hypotheticals, other people's words, chatter and requests to the assistant store nothing."""

from __future__ import annotations

import pytest

from memroute.models import MemoryType
from memroute_builtins.extractors.everyday import EverydayExtractor, EverydayExtractorSettings, extract_facts

# The issue's thirteen sentences that the regex extractor lost, each with the slot and the content expected.
ISSUE_SENTENCES = [
    ("I'm allergic to peanuts", "diet:allergy:peanuts", "Is allergic to peanuts"),
    ("My daughter's name is Ana", "family:daughter", "Has a daughter named Ana"),
    ("We moved to Berlin last year", "profile:location", "Moved to Berlin last year"),
    ("Call me Sam", "profile:preferred_name", "Prefers to be called Sam"),
    ("I work at Acme as a data engineer", "profile:employer", "Works at Acme as a data engineer"),
    ("I'm vegetarian", "diet:regime", "Is vegetarian"),
    ("My birthday is March 3rd", "profile:birthday", "Birthday is March 3rd"),
    ("I live in Lisbon", "profile:location", "Lives in Lisbon"),
    ("I have two cats named Mochi and Tofu", "pets:cat", "Has two cats named Mochi and Tofu"),
    ("I'm learning Japanese", "learning:japanese", "Is learning Japanese"),
    ("My favorite color is green", "favorite:color", "Favorite color is green"),
    ("My wife is called Maria", "family:wife", "Has a wife named Maria"),
]

MORE = [
    ("I'm a nurse and I work night shifts", {("profile:occupation", "Is a nurse"),
                                             ("work:schedule", "Works night shifts")}),
    ("I speak Portuguese and a little German", {("language:portuguese", "Speaks Portuguese"),
                                                ("language:german", "Speaks a little German")}),
    ("I'm allergic to peanuts and shellfish.", {("diet:allergy:peanuts", "Is allergic to peanuts"),
                                                ("diet:allergy:shellfish", "Is allergic to shellfish")}),
    ("I don't eat pork", {("diet:avoid:pork", "Does not eat pork")}),
    ("I go to the gym every morning", {("routine:go_to_the_gym", "Goes to the gym every morning")}),
    ("Every morning I walk my dog", {("routine:walk_my_dog", "Walks their dog every morning")}),
    ("I'm flying to Tokyo next week", {("plan:flying_to_tokyo", "Is flying to Tokyo next week")}),
    ("Please keep your answers short", {("assistant:length", "Wants answers kept short")}),
    ("Don't use emojis", {("assistant:format:emojis", "Does not want emojis in answers")}),
    ("From now on, always answer in Spanish", {("assistant:language", "Wants answers in Spanish")}),
    ("I have type 2 diabetes", {("health:condition:diabetes", "Has type 2 diabetes")}),
    ("I drive a Honda Civic", {("possession:car", "Drives a Honda Civic")}),
    ("My sister lives in Rome", {("family:sister:lives_in_rome", "Has a sister who lives in Rome")}),
    ("I'm 34 years old", {("profile:age", "Is 34 years old")}),
    ("I'm originally from Porto but I grew up in Lyon", {("profile:origin", "Is from Porto"),
                                                          ("profile:hometown", "Grew up in Lyon")}),
    ("I'll use Postgres for this project.", {("decision:postgres_for_this_project",
                                              "Will use Postgres for this project")}),
    ("I hate cilantro", {("likes:cilantro", "Hates cilantro")}),
    ("I love hiking", {("likes:hiking", "Loves hiking")}),
]

NOT_FACTS = [
    "Am I allergic to peanuts?", "Do I live in Lisbon?", "If I lived in Paris I would learn French",
    "I wish I had a dog", 'My friend said "I love sushi"', "She told me I'm stubborn", "I like your answer",
    "You are very helpful", "Explain how a hash map works", "Translate this into Spanish", "Thanks!",
    "ok got it", "I have a question", "I think so", "Can you call me tomorrow?", "What should I eat tonight?",
    "I want to know how DNS works", "I'd like you to write a poem about cats", "Don't call me Sam",
    "Hello there", "What is the capital of France?", "I'm not sure", "I love it", "I'm a bit tired today",
]


@pytest.mark.parametrize(("text", "key", "content"), ISSUE_SENTENCES)
def test_the_issue_sentences_become_facts_about_the_user(text, key, content):
    facts = extract_facts(text)
    assert [(f.key, f.content) for f in facts] == [(key, content)]
    assert facts[0].metadata["extractor"] == "everyday" and facts[0].metadata["slot"] == key


@pytest.mark.parametrize(("text", "expected"), MORE)
def test_more_everyday_statements(text, expected):
    assert {(f.key, f.content) for f in extract_facts(text)} == expected


@pytest.mark.parametrize("text", NOT_FACTS)
def test_questions_hypotheticals_quotes_chatter_and_requests_store_nothing(text):
    assert extract_facts(text) == []


def test_statements_about_one_slot_share_its_key_so_the_newer_replaces_the_older():
    lisbon, = extract_facts("I live in Lisbon")
    berlin, = extract_facts("I moved to Berlin")
    assert lisbon.key == berlin.key == "profile:location"
    likes, = extract_facts("I love sushi")
    dislikes, = extract_facts("I don't like sushi anymore")
    assert likes.key == dislikes.key == "likes:sushi"
    assert (likes.metadata["polarity"], dislikes.metadata["polarity"]) == ("positive", "negative")
    # Within one text, the last statement about a slot wins.
    assert [f.content for f in extract_facts("I live in Lisbon. Actually, I moved to Berlin.")] == ["Moved to Berlin"]


def test_types_categories_and_metadata():
    facts = {f.key: f for f in extract_facts("I'm allergic to peanuts. I'm flying to Tokyo next week.",
                                             source="assistant")}
    assert facts["diet:allergy:peanuts"].type is MemoryType.FACTUAL
    assert facts["diet:allergy:peanuts"].category == "health"
    assert facts["plan:flying_to_tokyo"].type is MemoryType.EPISODIC
    assert all(f.metadata["source"] == "assistant" for f in facts.values())


def test_curly_apostrophes_and_lower_case_i():
    assert [f.content for f in extract_facts("i\u2019m allergic to latex")] == ["Is allergic to latex"]


def test_odd_input_never_raises():
    for text in (None, 42, "", "   ", "I" * 10_000, "I'm " * 5_000, "my " * 5_000 + "name is Sam", "\x00I live in\x00"):
        assert isinstance(extract_facts(text), list)


@pytest.mark.parametrize("unit", ["call me Sam ", "I I I ", "my wife Maria ", "I'm a nurse at Acme and ",
                                  "My friend said I love x "])
def test_64_kib_of_one_repeated_statement_is_read_in_bounded_time(unit):
    # Before clauses were bounded, "call me Sam " repeated over 64 KiB took minutes (each match looked back over
    # the whole clause); the suite's timeout catches a return of that.
    facts = extract_facts((unit * 6_000)[:65_536])
    assert len(facts) <= 1


def test_long_input_keeps_its_end_and_long_facts_are_cut():
    settings = EverydayExtractorSettings(max_input_chars=100, max_fact_length=20)
    text = "I live in Lisbon. " + "filler words here. " * 20 + "I work at a very long company name indeed"
    facts = EverydayExtractor(settings).extract(text)
    assert [f.key for f in facts] == ["profile:employer"]
    assert len(facts[0].content) <= 20
