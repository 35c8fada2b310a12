"""Which user messages ``observe`` keeps, how a long one is split, its key, and the time it was said."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest

from memroute.errors import ValidationError
from memroute.pipeline.gate import message_time_from_headers
from memroute.pipeline.requests import last_user_name
from memroute.pipeline.turns import is_salient, legacy_turn_key, parse_said_at, split_turn, turn_key

KEPT = [
    "My daughter starts school in September and she is nervous.",
    "We're driving to the coast this weekend with the kids.",
    "I finally finished the marathon, my knees hurt a lot.",
    "Help me plan my trip to Japan next month",
    "Can you suggest a gift for my wife? She loves gardening.",
    "The new manager at work keeps scheduling meetings at 8am.",
    "I think the second option fits our budget better.",
    "Our landlord raised the rent again this year.",
]
NOT_KEPT = [
    "Hi!", "hello there", "Thanks a lot!", "ok", "ok, got it", "sounds good", "great, thanks", "yes",
    "Explain how a hash map works", "Translate this into French", "How do I reverse a list in Python?",
    "What is the capital of Australia?", "Can you tell me a joke?", "Write a haiku about autumn",
    "Summarize the article above", "Why is the sky blue?",
]


@pytest.mark.parametrize("text", KEPT)
def test_messages_about_the_user_or_their_world_are_kept(text):
    assert is_salient(text)


@pytest.mark.parametrize("text", NOT_KEPT)
def test_chatter_and_pure_requests_are_not_kept(text):
    assert not is_salient(text)


def test_a_short_message_stays_whole_and_a_long_one_splits_at_sentences():
    assert split_turn("  I live in Lisbon.  ", 200) == ["I live in Lisbon."]
    sentences = [f"Sentence number {i} says something about my week." for i in range(40)]
    parts = split_turn(" ".join(sentences), 300)
    assert len(parts) > 1 and all(len(p) <= 300 for p in parts)
    assert " ".join(parts) == " ".join(sentences)  # nothing lost, cut only between sentences
    assert all(p.endswith("week.") for p in parts)
    endless = "word " * 200
    assert all(len(p) <= 300 for p in split_turn(endless, 300))


def test_near_identical_messages_share_a_key():
    assert turn_key("I'm allergic to peanuts!") == turn_key("  i'm ALLERGIC to peanuts ") == turn_key(
        "I'm allergic, to peanuts.") == turn_key("I am allergic to peanuts") == turn_key("Im allergic to peanuts")
    assert turn_key("It's late, I can't sleep") == turn_key("it is late so I cannot sleep") == turn_key(
        "I can\u2019t sleep, it\u2019s late")
    assert turn_key("My sister's cat won't eat tuna") == turn_key("my sister cat will not eat tuna, lol")


@pytest.mark.parametrize("one, other", [
    ("I'm allergic to peanuts", "I'm allergic to walnuts"),
    ("I'm allergic to peanuts", "I'm not allergic to peanuts"),
    ("We moved to Berlin last year", "We moved to Lisbon last year"),
    ("I like my job", "I liked my job"),
    ("My sister's cat", "My sisters' cats"),
])
def test_messages_that_differ_in_a_word_that_says_something_do_not(one, other):
    assert turn_key(one) != turn_key(other)


def test_a_message_of_fillers_only_still_has_a_key_of_its_own():
    assert turn_key("so, um... really?") != turn_key("oh well") and turn_key("lol").startswith("turn:")


def test_the_legacy_key_is_the_earlier_normalisation():
    assert legacy_turn_key("Our landlord raised the rent!") == legacy_turn_key("our landlord  raised the rent")
    assert legacy_turn_key("I'm here") != legacy_turn_key("I am here")


def test_said_at_accepts_aware_times_and_dates():
    assert parse_said_at("2026-03-02T18:30:00Z") == datetime(2026, 3, 2, 18, 30, tzinfo=timezone.utc)
    assert parse_said_at("2026-03-02T19:30:00+01:00") == datetime(2026, 3, 2, 18, 30, tzinfo=timezone.utc)
    assert parse_said_at("2026-03-02") == datetime(2026, 3, 2, tzinfo=timezone.utc)
    assert parse_said_at(date(2026, 3, 2)) == datetime(2026, 3, 2, tzinfo=timezone.utc)
    aware = datetime(2025, 1, 1, 12, tzinfo=timezone(timedelta(hours=-5)))
    assert parse_said_at(aware) == datetime(2025, 1, 1, 17, tzinfo=timezone.utc)


@pytest.mark.parametrize(("value", "problem"), [
    ("yesterday", "format"), ("2026-13-40", "format"), ("", "format"), ("2026-03-02T18:30:00", "timezone"),
    (datetime(2026, 3, 2, 18, 30), "timezone"), (1_700_000_000, "type"), (["2026-03-02"], "type"),
    ("1800-01-01T00:00:00Z", "range"), ("2999-01-01T00:00:00Z", "range"),
])
def test_a_malformed_time_is_a_typed_error_naming_the_field(value, problem):
    with pytest.raises(ValidationError) as info:
        parse_said_at(value, "x-memroute-message-time")
    assert list(info.value.problems) == [("x-memroute-message-time", problem)]
    assert str(info.value).startswith("x-memroute-message-time:")


def test_the_message_time_header_and_the_speaker_name():
    assert message_time_from_headers({"X-Memroute-Message-Time": " 2026-03-02 "}) == "2026-03-02"
    assert message_time_from_headers([("x-memroute-message-time", b"2026-03-02")]) == "2026-03-02"
    assert message_time_from_headers({"other": "x"}) is None and message_time_from_headers(None) is None
    request = {"messages": [{"role": "user", "name": "ana", "content": "hi"},
                            {"role": "assistant", "content": "hello"},
                            {"role": "user", "name": "  ben ", "content": [{"type": "text", "text": "I'm Ben"}]}]}
    assert last_user_name(request) == "ben"
    assert last_user_name({"messages": [{"role": "user", "content": "no name"}]}) is None
    assert last_user_name({"input": [{"role": "user", "name": "cy", "content": "hey"}]}) == "cy"
    assert last_user_name("not a request") is None
