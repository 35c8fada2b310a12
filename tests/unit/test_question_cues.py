"""Time and people in questions (memroute.retrieval.question): the grammar, odd input, the ranking rule, and the
whole path through ``memroute.open`` with two tenants (SQLite, the static embedding source, sqlite-vec)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

import memroute
from memroute.errors import ValidationError
from memroute.models import Memory, SearchHit
from memroute.retrieval.question import PREFER, event_time, prefer, read_question

NOW = datetime(2026, 3, 12, 15, 0, tzinfo=timezone.utc)  # a Thursday


def day(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


@pytest.mark.parametrize(("question", "start", "end", "rest"), [
    ("what did I say yesterday about the trip", "2026-03-11", "2026-03-12", "what did I say about the trip"),
    ("what did I say today", "2026-03-12", "2026-03-13", "what did I say"),
    ("what did we eat last night?", "2026-03-11", "2026-03-12", "what did we eat?"),
    ("what happened the day before yesterday", "2026-03-10", "2026-03-11", "what happened"),
    ("what did I say two days ago about the boat", "2026-03-10", "2026-03-11", "what did I say about the boat"),
    ("a couple of days ago", "2026-03-10", "2026-03-11", ""),
    ("what did Tom say last week", "2026-03-02", "2026-03-09", "what did Tom say"),
    ("what did I say this week", "2026-03-09", "2026-03-16", "what did I say"),
    ("3 weeks ago", "2026-02-16", "2026-02-23", ""),
    ("what happened in March?", "2026-03-01", "2026-04-01", "what happened?"),
    ("what did she say in December", "2025-12-01", "2026-01-01", "what did she say"),
    ("last March", "2025-03-01", "2025-04-01", ""),
    ("what did I buy in March 2025", "2025-03-01", "2025-04-01", "what did I buy"),
    ("last month", "2026-02-01", "2026-03-01", ""),
    ("two months ago", "2026-01-01", "2026-02-01", ""),
    ("what did I decide on 2026-03-02", "2026-03-02", "2026-03-03", "what did I decide"),
    ("what did I say on March 2nd", "2026-03-02", "2026-03-03", "what did I say"),
    ("what did I say on the 2nd of March 2025", "2025-03-02", "2025-03-03", "what did I say"),
    ("what did I say on December 24", "2025-12-24", "2025-12-25", "what did I say"),
    ("what did I do on Monday", "2026-03-09", "2026-03-10", "what did I do"),
    ("what did I do last Thursday", "2026-03-05", "2026-03-06", "what did I do"),
    ("what did we do last weekend", "2026-03-07", "2026-03-09", "what did we do"),
    ("what did I say in 2025", "2025-01-01", "2026-01-01", "what did I say"),
    ("last year", "2025-01-01", "2026-01-01", ""),
])
def test_the_grammar_names_these_windows_and_leaves_the_rest_of_the_question(question, start, end, rest):
    cues = read_question(question, NOW)
    assert cues.window is not None, question
    assert (cues.window.start, cues.window.end) == (day(start), day(end))
    assert cues.text == rest


def test_rolling_and_since_windows_end_now():
    past = read_question("what did I say in the past 3 weeks about money", NOW)
    assert past.window is not None and past.window.start == NOW - timedelta(weeks=3)
    assert past.window.holds(NOW) and past.text == "what did I say about money"
    since = read_question("what changed since last Monday", NOW)
    assert since.window is not None and since.window.start == day("2026-03-09")  # the latest Monday before today
    assert since.window.holds(NOW - timedelta(seconds=1))
    assert read_question("since 2025", NOW).window.start == day("2025-01-01")
    both = read_question("what did I say yesterday or today", NOW)
    assert (both.window.start, both.window.end) == (day("2026-03-11"), day("2026-03-13"))


def test_days_are_the_calendar_days_of_nows_time_zone():
    lisbon_evening = datetime(2026, 3, 12, 23, 30, tzinfo=timezone(timedelta(hours=-5)))  # already the 13th in UTC
    window = read_question("what did I say yesterday", lisbon_evening).window
    assert window is not None and window.start == datetime(2026, 3, 11, tzinfo=timezone(timedelta(hours=-5)))
    naive = read_question("what did I say yesterday", NOW.replace(tzinfo=None)).window
    assert naive is not None and naive.start == day("2026-03-11")  # a naive now is taken as UTC


@pytest.mark.parametrize("question", [
    "Build me a training plan for this week",  # a plan, not a time something was said
    "Plan activities for the kids this Saturday",
    "what's due in June?",
    "Suggest a dinner recipe for tonight",
    "what did I say on 2026-02-30",  # not a date
    "what did I say 3000000 days ago",  # past any calendar
    "what did I say in 1200",
    "what did I say in may",  # the verb, not the month
    "what did I say on monday the",  # odd, but harmless: lowercase weekday after "on" is read below
    "when did I start learning Japanese",
    "",
    "???",
    "yesterday " * 500,
    "ünïcödé 昨日 2026-13-45 -- 99 days",
])
def test_odd_input_never_raises_and_never_names_a_wrong_window(question):
    cues = read_question(question, NOW)
    if question in ("what did I say on monday the",):
        assert cues.window is not None and cues.window.start == day("2026-03-09")
    elif question.startswith("yesterday"):
        assert cues.window is not None and cues.text == ""
    else:
        assert cues.window is None, question
        assert cues.text == question


def test_people_are_capitalised_words_that_are_not_first_question_words_months_or_days():
    assert read_question("what did Maria say about the move", NOW).names == ("Maria",)
    assert read_question("what does my daughter Ana like", NOW).names == ("Ana",)
    assert read_question("What is the name of Tom's dog?", NOW).names == ("Tom",)
    assert read_question("Maria said what? Remind me about Porto", NOW).names == ("Porto",)  # sentence starts
    assert read_question("what did I say in March about Monday's call", NOW).names == ()
    lower = read_question("what did maria say about the move", NOW)
    assert lower.names == () and "maria" in lower.words  # a speaker named so still fits


def memory(content: str, *, said: object = None, speaker: str | None = None, key: str | None = None) -> Memory:
    metadata = {k: v for k, v in (("said_at", said), ("speaker", speaker)) if v is not None}
    return Memory(id=f"00000000-0000-4000-8000-{abs(hash(content)) % 10**12:012d}", api_key_id="a",
                  key=key or content[:20], content=content, metadata=metadata, created_at=NOW - timedelta(days=90),
                  updated_at=NOW - timedelta(days=90))


def test_prefer_divides_a_fitting_hits_position_once_per_cue():
    hits = [SearchHit(memory=memory(f"turn {i}", said="2026-03-11T10:00:00Z" if i in (3, 9, 20) else None,
                                    speaker="Maria" if i in (9, 30) else "Tom"), score=0.0, tier="hybrid")
            for i in range(1, 41)]
    cues = read_question("what did Maria say yesterday about turns", NOW)
    order = [h.memory.content for h in prefer(hits, cues)]
    # turn 9 fits both (9 / 64), turn 3 the time (3 / 8), turn 1 stays ahead of turn 20 (20 / 8 = 2.5 > 1)...
    assert order[:5] == ["turn 9", "turn 3", "turn 1", "turn 2", "turn 20"]
    assert order.index("turn 30") == order.index("turn 4") - 1  # 30 / 8 = 3.75: after the 3rd, before the 4th
    moved = {h.memory.content: h.leg_scores for h in prefer(hits, cues)}
    assert moved["turn 9"] == {"time": 1.0, "person": 1.0} and moved["turn 3"] == {"time": 1.0}
    assert moved["turn 2"] == {} and PREFER == 8.0


def test_event_time_is_said_at_else_created_at_and_a_bad_said_at_is_ignored():
    assert event_time(memory("x", said="2026-03-02T18:30:00+01:00")) == datetime(2026, 3, 2, 17, 30,
                                                                                    tzinfo=timezone.utc)
    plain = memory("y")
    assert plain.said_at is None and event_time(plain) == plain.created_at
    for bad in ("yesterday", "2026-03-02T10:00:00", 17):  # not a time, a naive time, not text
        odd = memory("z", said=bad)
        assert odd.said_at is None and event_time(odd) == odd.created_at


# --- the whole path ---------------------------------------------------------------------------------------

TALK = [  # (said, speaker, text)
    ("2026-03-11T09:00:00Z", "Maria", "We booked the train tickets for the trip to Vienna"),
    ("2026-02-02T09:00:00Z", "Maria", "The trip to Rome was lovely, great food"),
    ("2026-03-11T10:00:00Z", "Tom", "My trip to Oslo is cancelled"),
    ("2026-01-20T10:00:00Z", "Tom", "The move to the new flat is done"),
    ("2026-03-05T10:00:00Z", "Maria", "The move is stressful, so many boxes"),
    ("2025-06-01T10:00:00Z", None, "I started learning Japanese with a tutor"),
    ("2025-06-03T10:00:00Z", None, "The Deploy freeze is in June this year"),
]


@pytest.fixture(scope="module")
def mem(tmp_path_factory):
    with memroute.open(data_dir=str(tmp_path_factory.mktemp("cues"))) as service:
        for said, speaker, text in TALK:
            service.add(api_key_id="alice", content=text, type="episodic",
                        metadata={"said_at": said, "speaker": speaker})
            # bob's memories say the same things a day later, by other people: never alice's answers
            later = (datetime.fromisoformat(said.replace("Z", "+00:00")) + timedelta(days=1)).isoformat()
            service.add(api_key_id="bob", content=f"{text}, bob heard", type="episodic",
                        metadata={"said_at": later, "speaker": "Zed"})
        service.flush()
        yield service


def contents(result) -> list[str]:
    return [hit.memory.content for hit in result.hits]


def test_a_time_in_the_question_prefers_what_was_said_then(mem):
    result = mem.search("what did I say yesterday about the trip", api_key_id="alice", now=NOW, min_score=0)
    assert set(contents(result)[:2]) == {"My trip to Oslo is cancelled",
                                          "We booked the train tickets for the trip to Vienna"}
    assert "The trip to Rome was lovely, great food" in contents(result)  # the clear match outside: still there
    assert result.hits[0].leg_scores["time"] == 1.0 and result.hits[0].said_at == day("2026-03-11T10:00:00")
    feb = mem.search("what did I say about trips in February", api_key_id="alice", now=NOW, min_score=0)
    assert contents(feb)[0] == "The trip to Rome was lovely, great food"
    assert all(hit.memory.api_key_id == "alice" for hit in (*result.hits, *feb.hits))


def test_a_person_in_the_question_prefers_what_they_said(mem):
    maria = mem.search("what did Maria say about the move", api_key_id="alice", now=NOW, min_score=0)
    assert contents(maria)[0] == "The move is stressful, so many boxes"
    tom = mem.search("what did Tom say about the move", api_key_id="alice", now=NOW, min_score=0)
    assert contents(tom)[0] == "The move to the new flat is done"
    assert tom.hits[0].leg_scores["person"] == 1.0


def test_an_open_question_of_time_or_people_lists_what_fits_newest_first(mem):
    said = mem.search("what did I say yesterday?", api_key_id="alice", now=NOW)
    assert contents(said) == ["My trip to Oslo is cancelled", "We booked the train tickets for the trip to Vienna"]
    assert said.provenance.legs == ("recency",) and not said.provenance.degraded
    maria = mem.search("what did Maria say?", api_key_id="alice", now=NOW)
    assert contents(maria) == ["We booked the train tickets for the trip to Vienna",
                               "The move is stressful, so many boxes", "The trip to Rome was lovely, great food"]
    assert mem.search("what did Zed say?", api_key_id="alice", now=NOW, min_score=0).provenance.legs != (
        "recency",)  # bob's speaker is nobody alice knows: an ordinary search, and none of bob's memories
    bob = mem.search("what did Zed say?", api_key_id="bob", now=NOW)
    assert len(bob.hits) == len(TALK) and all(c.endswith("bob heard") for c in contents(bob))


def test_when_did_i_returns_the_memory_with_the_time_it_was_said(mem):
    hit = mem.search("when did I start learning Japanese", api_key_id="alice", now=NOW).hits[0]
    assert hit.memory.content == "I started learning Japanese with a tutor"
    assert hit.said_at == day("2025-06-01T10:00:00")
    preview = mem.preview("when did I start learning Japanese", api_key_id="alice", now=NOW)
    assert preview.memories[0].said_at == day("2025-06-01T10:00:00")


def test_a_time_word_that_is_the_topic_still_finds_it(mem):
    # "in June" here is the topic: nothing was said in June 2026 (the future), the words are searched as asked
    result = mem.search("what was the deploy freeze in June?", api_key_id="alice", now=NOW)
    assert contents(result)[0] == "The Deploy freeze is in June this year"
    plan = mem.search("what's due in June?", api_key_id="alice", now=NOW)
    assert contents(plan)[0] == "The Deploy freeze is in June this year"


def test_question_cues_can_be_turned_off(tmp_path):
    with memroute.open(data_dir=str(tmp_path), memory={"question_cues": False}) as plain:
        for said, speaker, text in TALK:
            plain.add(api_key_id="alice", content=text, metadata={"said_at": said, "speaker": speaker})
        plain.flush()
        result = plain.search("what did I say yesterday?", api_key_id="alice", now=NOW, min_score=0)
        assert result.provenance.legs != ("recency",)
        assert all("time" not in hit.leg_scores for hit in result.hits)


@pytest.mark.parametrize("bad", ["tomorrow", 12, "2026-13-01T00:00:00Z"])
def test_a_bad_now_is_a_validation_error(mem, bad):
    with pytest.raises(ValidationError, match="now"):
        mem.search("what did I say yesterday", api_key_id="alice", now=bad)


def test_a_long_message_is_read_in_bounded_time_and_names_at_most_eight():
    text = " ".join(f"and Person{i} met Place{i} on 2026-03-0{i % 9 + 1}" for i in range(120))[:4096]
    cues = read_question(text, NOW)
    assert len(cues.names) == 8 and cues.window is not None
    assert cues.window.start == day("2026-03-01") and cues.window.end == day("2026-03-10")


def test_augment_injects_what_was_said_then_first_with_its_date(tmp_path):
    from memroute.models import utcnow

    yesterday, earlier = utcnow() - timedelta(days=1), utcnow() - timedelta(days=60)
    with memroute.open(data_dir=str(tmp_path), memory={"enabled": True}) as service:
        for tenant in ("alice", "bob"):
            service.add(api_key_id=tenant, content=f"The trip to Rome was lovely ({tenant})", type="episodic",
                        metadata={"said_at": earlier.isoformat()})
        service.add(api_key_id="alice", content="We booked the train to Vienna for the trip", type="episodic",
                    metadata={"said_at": yesterday.isoformat()})
        service.flush()
        request = {"messages": [{"role": "user", "content": "What did I say yesterday about the trip?"}]}
        block = service.augment(request, api_key_id="alice")["messages"][0]["content"]
        lines = [line for line in block.splitlines() if line.startswith("- ")]
        assert lines[0] == f'- episodic (said {yesterday.date()}): "We booked the train to Vienna for the trip"'
        assert "(alice)" in lines[1] and "(bob)" not in block


def test_augment_reads_times_relative_to_the_message_time_header(tmp_path):
    with memroute.open(data_dir=str(tmp_path), memory={"enabled": True}) as service:
        for said, text in (("2026-03-11T09:00:00Z", "We booked the train to Vienna for the trip"),
                           ("2026-02-02T09:00:00Z", "The trip to Rome was lovely")):
            service.add(api_key_id="alice", content=text, type="episodic", metadata={"said_at": said})
        service.flush()
        request = {"messages": [{"role": "user", "content": "What did I say yesterday about the trip?"}]}
        for sent, first in (("2026-03-12T10:00:00Z", "Vienna"), ("2026-02-03T10:00:00Z", "Rome")):
            block = service.augment(request, api_key_id="alice", headers={"x-memroute-message-time": sent})
            lines = [line for line in block["messages"][0]["content"].splitlines() if line.startswith("- ")]
            assert first in lines[0], (sent, lines)
        with pytest.raises(ValidationError, match="x-memroute-message-time"):
            service.augment(request, api_key_id="alice", headers={"x-memroute-message-time": "yesterday"})
