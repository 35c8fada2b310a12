"""The ``llm`` extractor's parts on their own: reading an answer tolerantly, validating facts and operations,
``Retry-After``, the per-tenant budget's window (on a clock the test moves, no sleeping), the usage counters
and the keys of the facts it stores."""

from __future__ import annotations

import email.utils
import json
import time
import uuid

import pytest

from memroute.models import Memory, MemoryType
from memroute_builtins.extractors.llm import llm_key
from memroute_builtins.extractors.llm.budget import TenantBudget, Usage
from memroute_builtins.extractors.llm.parsing import MAX_FACT_CHARS, parse_facts, parse_operations
from memroute_builtins.extractors.llm.prompts import decide_message, extract_message
from memroute_builtins.extractors.llm.wire import chat_endpoint, first_json_object, retry_after_seconds


@pytest.mark.parametrize(("text", "expected"), [
    ('{"facts": []}', {"facts": []}),
    ('  \n{"facts": [1]}\n', {"facts": [1]}),
    ('Here you go:\n```json\n{"facts": []}\n```', {"facts": []}),
    ('[1, 2] then {"a": {"b": 1}} and {"c": 2}', {"a": {"b": 1}}),
    ('{not json} {"ok": true}', {"ok": True}),
    ("no json here", None),
    ("[]", None),
    ("", None),
    ('{"facts": [', None),
    ("{" * 100_000, None),  # deeply nested garbage: no RecursionError escapes
])
def test_first_json_object(text, expected):
    assert first_json_object(text) == expected


def test_retry_after_reads_seconds_and_http_dates():
    assert retry_after_seconds("2") == 2.0
    assert retry_after_seconds(" 0.5 ") == 0.5
    assert retry_after_seconds("-3") == 0.0
    assert retry_after_seconds(None) is None
    assert retry_after_seconds("soon") is None
    later = email.utils.formatdate(time.time() + 120, usegmt=True)
    assert 100 < retry_after_seconds(later) <= 121


def test_chat_endpoint():
    assert chat_endpoint("https://api.openai.com/v1/") == "https://api.openai.com/v1/chat/completions"
    assert chat_endpoint("http://h/v1/chat/completions") == "http://h/v1/chat/completions"


def test_facts_are_validated_deduplicated_and_capped():
    answer = {"facts": [
        {"content": "  Lives   in Lisbon ", "type": "factual", "category": "Location"},
        {"content": "lives in lisbon", "type": "factual", "category": "location"},  # a repeat
        {"content": "Went hiking on Sunday", "type": "episodic", "category": "event"},
        {"content": "Likes jazz", "type": "factual", "category": "music", "extra": "ignored"},
        {"content": "x" * (MAX_FACT_CHARS + 1), "type": "factual", "category": "long"},
        {"content": "Uses\x00NUL", "type": "factual", "category": "odd"},
    ]}
    parsed = parse_facts(answer, limit=3)
    assert [(c.content, c.type, c.category) for c in parsed.items] == [
        ("Lives in Lisbon", MemoryType.FACTUAL, "location"),
        ("Went hiking on Sunday", MemoryType.EPISODIC, "event"),
        ("Likes jazz", MemoryType.FACTUAL, "music"),
    ]
    assert parsed.dropped == {"invalid_fact": 1, "too_many": 1}


@pytest.mark.parametrize("answer", [None, {}, {"facts": "Lives in Lisbon"}, {"operations": []}])
def test_an_answer_without_a_facts_list_is_one_invalid_answer(answer):
    assert parse_facts(answer, limit=5).dropped == {"invalid_answer": 1}


def test_operations_only_touch_references_shown_with_their_candidate_once():
    shown = [["m1", "m2"], ["m2"], []]
    parsed = parse_operations({"operations": [
        {"candidate": 0, "event": "update", "memory": "m1", "content": "Lives in Lisbon"},
        {"candidate": 0, "event": "add", "memory": None, "content": None},            # second for candidate 0
        {"candidate": 1, "event": "delete", "memory": "m1", "content": None},         # m1 not shown with 1
        {"candidate": 1, "event": "delete", "memory": "m2", "content": None},
        {"candidate": 2, "event": "update", "memory": "m2", "content": "x"},          # nothing shown with 2
        {"candidate": 2, "event": "none", "memory": "m9", "content": None},           # none ignores memory
    ]}, shown)
    assert [(o.candidate, o.event, o.memory, o.content) for o in parsed.items] == [
        (0, "update", "m1", "Lives in Lisbon"), (1, "delete", "m2", None), (2, "none", None, None)]
    assert parsed.dropped == {"invalid_operation": 1, "unknown_memory": 2}


def test_one_memory_is_acted_on_once():
    parsed = parse_operations({"operations": [
        {"candidate": 0, "event": "update", "memory": "m1", "content": "A"},
        {"candidate": 1, "event": "delete", "memory": "m1", "content": None},
    ]}, [["m1"], ["m1"]])
    assert [o.candidate for o in parsed.items] == [0]
    assert parsed.dropped == {"unknown_memory": 1}


def test_the_budget_window_is_per_tenant_and_slides():
    now = [1000.0]
    budget = TenantBudget(requests_per_minute=2, tokens_per_minute=1000, clock=lambda: now[0])
    assert budget.allows("a")
    budget.spend("a", 100)
    budget.spend("a", 100)
    assert not budget.allows("a")          # two requests this minute
    assert budget.allows("b")              # another tenant's window is its own
    now[0] += 61
    assert budget.allows("a")              # the minute slid past them
    budget.spend("a", 1000)
    assert not budget.allows("a")          # tokens spent up


def test_an_unlimited_budget_always_allows():
    budget = TenantBudget(0, 0, clock=lambda: 0.0)
    for _ in range(100):
        budget.spend("a", 10_000)
    assert budget.allows("a")


def test_usage_is_counted_per_tenant_and_in_total_and_shared_through_its_file(tmp_path):
    usage = Usage(tmp_path / "usage.db")
    usage.request("a", 100, 10)
    usage.request(None, 50, 5)  # an explicit extract: no tenant
    usage.count("a", "operations", "add", 2)
    usage.count("b", "failures", "timeout")
    usage.count("b", "failures", "timeout", 0)
    snapshot = usage.snapshot()
    assert (snapshot["requests"], snapshot["prompt_tokens"], snapshot["completion_tokens"]) == (2, 150, 15)
    assert snapshot["tenants"]["a"]["operations"] == {"add": 2}
    assert snapshot["failures"] == {"timeout": 1}
    assert usage.of_tenant("b")["failures"] == {"timeout": 1}
    assert usage.of_tenant("nobody")["requests"] == 0
    with pytest.raises(ValueError):
        usage.count("a", "tokens", "x")
    usage.close()
    again = Usage(tmp_path / "usage.db")  # another process, or after a restart
    assert again.snapshot() == snapshot
    again.close()
    again.count("a", "failures", "late")  # after close: logged and lost, never raised into the worker


def test_keys_are_stable_readable_and_distinct():
    assert llm_key("Lives in Lisbon") == llm_key("  lives in  LISBON ")
    assert llm_key("Lives in Lisbon").startswith("llm:lives_in_lisbon:")
    assert llm_key("Lives in Lisbon") != llm_key("Lives in Lisbon!")
    assert llm_key("東京に住んでいる").startswith("llm:東京に住んでいる:")
    assert llm_key("!!!").startswith("llm:") and len(llm_key("!!!")) == len("llm:") + 12


def test_data_is_json_escaped_and_truncated_from_the_front():
    message = extract_message([("a" * 50 + "TAIL", "user")], max_chars=10)
    assert '"aaaaaaTAIL"' in message
    assert "\\u202e" in extract_message([("evil\u202etext", "user")], max_chars=100)
    assert "\u202e" not in extract_message([("evil\u202etext", "user")], max_chars=100)


def test_the_decision_message_shows_content_and_date_but_no_id_key_or_metadata():
    memory = Memory(id=str(uuid.uuid4()), api_key_id="a", key="profile:secret-key", content='Says "hi"\nthen',
                    metadata={"private": "yes"}, created_at="2026-05-01T10:00:00Z", updated_at="2026-05-02T10:00:00Z")
    message = decide_message([("Lives in Lisbon", [("m1", memory)]), ("Likes jazz", [])])
    assert json.loads(message) == {"candidates": [
        {"candidate": 0, "fact": "Lives in Lisbon",
         "memories": [{"ref": "m1", "content": 'Says "hi"\nthen', "updated": "2026-05-02"}]},
        {"candidate": 1, "fact": "Likes jazz", "memories": []}]}
    assert memory.id not in message and "secret-key" not in message and "private" not in message
