"""The built-in regex extractor: reference §6 behaviour and the §17.1 fixes."""

from __future__ import annotations

import pytest

from memroute.components import build_component, make_context
from memroute.errors import ConfigError
from memroute.interfaces import Extractor
from memroute.models import MemoryType
from memroute_builtins.extractors.regex import (
    MAX_EXTRACTION_TEXT_LENGTH,
    RegexExtractor,
    RegexExtractorSettings,
    extract_facts,
    fact_key,
)

SEED = "I prefer TypeScript. I'll use Postgres for this project. I always commit before pushing. I hate Python."


def by_category(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for fact in extract_facts(text):
        out.setdefault(fact.category, []).append(fact.content)
    return out


def test_seed_example_gives_exactly_four_memories():
    facts = extract_facts(SEED)
    summary = [(f.category, f.type, f.content, f.key) for f in facts]
    assert summary == [
        ("preference", MemoryType.FACTUAL, "TypeScript", "preference:typescript"),
        ("decision", MemoryType.EPISODIC, "Postgres for this project", "decision:postgres_for_this_project"),
        ("pattern", MemoryType.FACTUAL, "commit before pushing", "pattern:commit_before_pushing"),
        ("aversion", MemoryType.FACTUAL, "Strongly dislikes Python", "aversion:python"),
    ]
    assert [f.metadata["polarity"] for f in facts] == ["positive", "positive", "positive", "negative"]
    assert [f.metadata["opposite_key"] for f in facts] == [
        "aversion:typescript", "decision:not_postgres_for_this_project", "pattern:never_commit_before_pushing",
        "preference:python",
    ]


def test_metadata_has_category_time_source_and_polarity():
    fact = extract_facts("I prefer dark mode", source="assistant")[0]
    assert set(fact.metadata) >= {"category", "extracted_at", "source", "polarity"}
    assert fact.metadata["source"] == "assistant"
    assert fact.metadata["category"] == "preference"
    assert extract_facts("I prefer dark mode")[0].metadata["source"] == "user"


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("I prefer Python", "Python"),
        ("I really prefer vim", "vim"),
        ("I like hiking", "hiking"),
        ("My favorite is green tea", "green tea"),
        ("my favourite are cats", "cats"),
        ("I enjoy jazz", "jazz"),
        ("I love Rust", "Rust"),
    ],
)
def test_every_preference_pattern(text, content):
    facts = extract_facts(text)
    assert [(f.category, f.type, f.content) for f in facts] == [("preference", MemoryType.FACTUAL, content)]


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("I'll use Postgres", "Postgres"),
        ("I will use Redis", "Redis"),
        ("I shall use Kafka", "Kafka"),
        ("I chose Django", "Django"),
        ("I decided to use SQLite", "SQLite"),
        ("I have decided to ship on Monday", "ship on Monday"),
        ("I'm going with Vue", "Vue"),
        ("I am going to use Docker", "Docker"),
        ("I'm going to adopt pnpm", "pnpm"),
        ("I selected Terraform", "Terraform"),
        ("I picked Flask", "Flask"),
        ("I went with Svelte", "Svelte"),
    ],
)
def test_every_decision_pattern_is_episodic(text, content):
    facts = extract_facts(text)
    assert [(f.category, f.type, f.content) for f in facts] == [("decision", MemoryType.EPISODIC, content)]


@pytest.mark.parametrize(
    "adverb", ["usually", "always", "typically", "tend to", "often", "frequently", "regularly"],
)
def test_every_habit_pattern(adverb):
    facts = extract_facts(f"I {adverb} write tests first")
    assert [(f.category, f.type, f.content) for f in facts] == [("pattern", MemoryType.FACTUAL, "write tests first")]


def test_never_keeps_its_polarity():
    never, always = extract_facts("I never deploy on Fridays. I always deploy on Fridays.")
    assert never.content == "Never deploy on Fridays" and never.metadata["polarity"] == "negative"
    assert always.content == "deploy on Fridays"
    assert never.key != always.key


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("I don't like Python", "Dislikes Python"),
        ("I do not like Python", "Dislikes Python"),
        ("I dont like Python", "Dislikes Python"),
        ("I really don't like Python", "Dislikes Python"),
        ("I dislike Python", "Dislikes Python"),
        ("I hate Python", "Strongly dislikes Python"),
        ("I can't stand Python", "Strongly dislikes Python"),
        ("I avoid Python", "Avoids Python"),
    ],
)
def test_aversions_are_never_the_same_memory_as_preferences(text, content):
    aversion = extract_facts(text)
    preference = extract_facts("I like Python")
    assert [(f.category, f.content, f.metadata["polarity"]) for f in aversion] == [("aversion", content, "negative")]
    assert aversion[0].key == "aversion:python"
    assert preference[0].key == "preference:python"
    assert "Python" in aversion[0].content and aversion[0].content != preference[0].content


def test_like_and_dislike_in_one_text_give_two_facts():
    facts = extract_facts("I don't like Python. I like Go and Rust.")
    assert {(f.category, f.content) for f in facts} == {("aversion", "Dislikes Python"), ("preference", "Go and Rust")}


def test_negative_decision_keeps_polarity():
    facts = extract_facts("I won't use MongoDB. I will not use Oracle.")
    assert [f.content for f in facts] == ["Will not use MongoDB", "Will not use Oracle"]
    assert all(f.category == "decision" and f.metadata["polarity"] == "negative" for f in facts)
    assert fact_key("decision", "MongoDB") not in {f.key for f in facts}


@pytest.mark.parametrize("text", ["I\u2019ll use Postgres", "I\u2019m going with Postgres", "I\u2018ll use Postgres"])
def test_curly_apostrophes(text):
    facts = extract_facts(text)
    assert [(f.category, f.content) for f in facts] == [("decision", "Postgres")]


def test_curly_apostrophe_in_negation():
    facts = extract_facts("I don\u2019t like meetings")
    assert [(f.category, f.content) for f in facts] == [("aversion", "Dislikes meetings")]


@pytest.mark.parametrize("text", ["This is an ill use of resources", "Ill use whatever", "ILL USE IT"])
def test_the_word_ill_is_not_a_decision(text):
    assert extract_facts(text) == []


@pytest.mark.parametrize(
    "text",
    ["Do I like Python?", "Should I use Redis?", "Would I prefer tabs?", "If I prefer tabs, say so",
     "Did I decide to use Kafka", "what I like is unclear"],
)
def test_questions_and_conditions_are_not_facts(text):
    assert extract_facts(text) == []


def test_questions_can_be_mined_when_asked():
    facts = extract_facts("Do I like Python?", settings=RegexExtractorSettings(skip_questions=False))
    assert [f.content for f in facts] == ["Python"]


def test_i_like_to_think_is_kept():
    assert [f.content for f in extract_facts("I like to think before I code")] == ["to think before I code"]


def test_lowercase_i_matches_like_the_reference():
    assert [f.content for f in extract_facts("i prefer tabs")] == ["tabs"]


def test_capture_stops_at_clause_end_but_not_inside_versions():
    assert [f.content for f in extract_facts("I prefer Python 3.12, mostly")] == ["Python 3.12"]
    assert [f.content for f in extract_facts("I like Node.js! Really")] == ["Node.js"]
    assert [f.content for f in extract_facts("I prefer tea; coffee is fine")] == ["tea"]


def test_next_statement_after_and_i_is_separate():
    facts = extract_facts("I prefer TypeScript and I'll use Postgres")
    assert [(f.category, f.content) for f in facts] == [("preference", "TypeScript"), ("decision", "Postgres")]


def test_non_ascii_facts_get_distinct_keys():
    texts = ["I like ラーメン", "I like うどんです", "I like борщ", "I like café crème", "I like 🍕🍕🍕",
             "I like 🍣🍣🍣"]
    facts = [f for text in texts for f in extract_facts(text)]
    assert len(facts) == len(texts)
    keys = [f.key for f in facts]
    assert len(set(keys)) == len(keys)
    assert all(k.startswith("preference:") and len(k) > len("preference:") for k in keys)
    assert "preference:ラーメン" in keys and "preference:борщ" in keys


def test_keys_that_would_collide_get_a_hash():
    assert fact_key("preference", "C++") != fact_key("preference", "C--")
    long_a = "a very long preference that goes on and on beyond forty characters A"
    long_b = "a very long preference that goes on and on beyond forty characters B"
    assert fact_key("preference", long_a) != fact_key("preference", long_b)
    assert fact_key("preference", "TypeScript") == "preference:typescript"
    assert fact_key("preference", "TypeScript") == fact_key("preference", "typescript")


def test_cleaning_collapses_whitespace_and_limits_length():
    fact = extract_facts("I prefer   very \t  spaced    words")[0]
    assert fact.content == "very spaced words"
    long = extract_facts("I prefer " + "x" * 800)[0]
    assert len(long.content) == 500


def test_too_short_facts_are_dropped():
    assert extract_facts("I like Go") == []
    assert extract_facts("I prefer ab") == []
    assert [f.content for f in extract_facts("I prefer abc")] == ["abc"]
    assert [f.content for f in extract_facts("I like 寿司")] == ["寿司"]  # wide characters count double
    assert extract_facts("I like 寿") == []


def test_input_capped_at_64_kib_keeping_the_tail():
    head = "I prefer HeadFact. "
    tail = "I prefer TailFact."
    text = head + "x " * MAX_EXTRACTION_TEXT_LENGTH + tail
    assert len(text) > MAX_EXTRACTION_TEXT_LENGTH
    assert [f.content for f in extract_facts(text)] == ["TailFact"]


def test_in_batch_dedupe_by_key():
    facts = extract_facts("I prefer TypeScript. I really prefer typescript. I like TypeScript")
    assert [f.key for f in facts] == ["preference:typescript"]


@pytest.mark.parametrize("value", [None, "", "   ", 42, ["I like Python"]])
def test_non_text_or_empty_input_gives_nothing(value):
    assert extract_facts(value) == []


def test_extractor_class_and_plugin_registration(plugin_manager, tmp_path):
    assert "regex" in plugin_manager.extractors()
    extractor = build_component(
        plugin_manager, "extractor", "regex", {"min_fact_length": 2},
        context=make_context(plugin_manager, "regex", tmp_path), path="extraction.regex",
    )
    assert isinstance(extractor, Extractor) and isinstance(extractor, RegexExtractor)
    assert [f.content for f in extractor.extract("I like Go", source="assistant")] == ["Go"]
    assert extractor.extract("I like Go")[0].metadata["source"] == "user"


def test_bad_extractor_options_are_config_errors(plugin_manager, tmp_path):
    with pytest.raises(ConfigError):
        build_component(
            plugin_manager, "extractor", "regex", {"min_fact_length": 0},
            context=make_context(plugin_manager, "regex", tmp_path), path="extraction.regex",
        )
    with pytest.raises(ConfigError):
        build_component(
            plugin_manager, "extractor", "regex", {"nope": 1},
            context=make_context(plugin_manager, "regex", tmp_path), path="extraction.regex",
        )


@pytest.mark.parametrize(
    "text",
    ["I like xyz" + " " * 65_000 + "tail", "I like " * 9_000, "I like abc and " * 4_300, "I like abc" + " \n" * 32_000,
     "Do I " * 13_000 + "like abc", "I prefer " + "word " * 13_000],
)
def test_adversarial_inputs_finish(text):
    # Each of these made a naive pattern quadratic (minutes); pytest's timeout turns a regression into a failure.
    facts = extract_facts(text)
    assert all(len(f.content) <= 500 for f in facts)
