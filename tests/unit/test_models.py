"""The data model: validation, upsert merge semantics, patches, query filters, JSON round trips."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import attrs
import pytest

from memroute.config.serialization import dumps_memory, loads_memory, memory_from_dict, memory_to_dict
from memroute.errors import ValidationError
from memroute.models import (
    UNSET,
    ListFilter,
    Memory,
    MemoryPatch,
    MemoryType,
    NewMemory,
    SearchQuery,
    estimate_tokens,
)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


def memory(**changes):
    base = dict(id="m1", api_key_id="k", key="k1", content="hello", created_at=NOW, updated_at=NOW)
    return Memory(**{**base, **changes})


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("api_key_id", "", "must not be empty"),
        ("api_key_id", "   ", "must not be empty"),
        ("api_key_id", 5, "expected a string"),
        ("key", "", "must not be empty"),
        ("content", "", "must not be empty"),
        ("content", "a\x00b", "NUL"),
        ("type", "opinion", "not a memory type"),
        ("metadata", ["not", "an", "object"], "JSON object"),
        ("metadata", {"x": object()}, "JSON-serialisable"),
        ("metadata", {"x": float("nan")}, "JSON-serialisable"),
        ("expires_at", "tomorrow", "ISO-8601"),
    ],
)
def test_new_memory_rejects_bad_input_with_the_field_named(field, value, problem):
    kwargs = dict(api_key_id="k", key="a", content="c")
    kwargs[field] = value
    with pytest.raises(ValidationError, match=problem) as info:
        NewMemory(**kwargs)
    assert info.value.problems[0][0] == field


def test_naive_datetimes_are_taken_as_utc_and_offsets_converted():
    m = memory(created_at=datetime(2026, 1, 1, 10, 0), updated_at="2026-01-01T12:00:00+02:00")
    assert m.created_at.tzinfo is timezone.utc
    assert m.updated_at == datetime(2026, 1, 1, 10, 0, tzinfo=timezone.utc)


def test_empty_session_is_none():
    assert NewMemory(api_key_id="k", key="a", content="c", session_id="").session_id is None


def test_upsert_merge_keeps_id_and_created_at_and_merges_metadata_shallowly():
    existing = memory(metadata={"a": 1, "nested": {"x": 1}}, type="factual", session_id="s1",
                      expires_at=NOW + timedelta(days=1))
    new = NewMemory(api_key_id="k", key="k1", content="new", metadata={"b": 2, "nested": {"y": 2}},
                    type=MemoryType.EPISODIC, session_id="s2", expires_at=None, now=NOW + timedelta(hours=1))
    merged = new.merged_into(existing)
    assert merged.id == "m1" and merged.created_at == NOW
    assert merged.updated_at == NOW + timedelta(hours=1)
    assert merged.metadata == {"a": 1, "b": 2, "nested": {"y": 2}}
    assert merged.type is MemoryType.EPISODIC and merged.session_id == "s2" and merged.expires_at is None


def test_an_upsert_or_patch_built_before_the_write_it_follows_never_moves_updated_at_back():
    # Two concurrent adds of one key: the later-built one can be queued first, so the earlier-built one is
    # written last; the stored row must still carry the newest updated_at of the two writes.
    existing = memory(updated_at=NOW + timedelta(hours=2))
    new = NewMemory(api_key_id="k", key="k1", content="built first, written last", now=NOW + timedelta(hours=1))
    assert new.merged_into(existing).updated_at == NOW + timedelta(hours=2)
    assert MemoryPatch(content="late", now=NOW + timedelta(hours=1)).applied_to(existing).updated_at == \
        NOW + timedelta(hours=2)


def test_patch_distinguishes_unset_from_none():
    patch = MemoryPatch(expires_at=None, content="x")
    assert patch.changes() == {"expires_at": None, "content": "x"}
    assert MemoryPatch().is_empty()
    assert MemoryPatch().content is UNSET
    updated = MemoryPatch(metadata={"only": True}, now=NOW).applied_to(memory(metadata={"gone": 1}))
    assert updated.metadata == {"only": True}


def test_patch_validates_given_fields_only():
    with pytest.raises(ValidationError, match="content"):
        MemoryPatch(content="")
    with pytest.raises(ValidationError, match="type"):
        MemoryPatch(type="nope")


def test_search_query_admits_applies_owner_expiry_retention_and_session():
    q = SearchQuery(api_key_id="k", text="x", retention_days=30, session_id="s", now=NOW)
    assert q.admits(memory(session_id="s"))
    assert not q.admits(memory(session_id="s", api_key_id="other"))
    assert not q.admits(memory(session_id="other"))
    assert not q.admits(memory(session_id="s", expires_at=NOW))
    assert not q.admits(memory(session_id="s", created_at=NOW - timedelta(days=31), updated_at=NOW))
    assert SearchQuery(api_key_id="k", now=NOW).admits(memory(created_at=NOW - timedelta(days=400)))


def test_search_query_per_type_windows_narrow_the_window_for_their_type_only():
    q = SearchQuery(api_key_id="k", now=NOW, type_windows={"episodic": 30})
    assert q.type_windows == ((MemoryType.EPISODIC, 30),)
    old = NOW - timedelta(days=60)
    assert q.admits(memory(created_at=old, updated_at=old))  # a fact: no window
    assert not q.admits(memory(type="episodic", created_at=old, updated_at=old))
    assert q.admits(memory(type="episodic", created_at=NOW - timedelta(days=2), updated_at=NOW))
    assert not q.admits(memory(type="episodic", api_key_id="other"))
    assert attrs.evolve(q, type_windows=()).admits(memory(type="episodic", created_at=old, updated_at=old))
    for bad in ({"chat": 3}, {"episodic": 0}, {"episodic": True}, {"episodic": "30"}, [("episodic", 36_501)]):
        with pytest.raises(ValidationError):
            SearchQuery(api_key_id="k", type_windows=bad)


def test_search_query_retention_cutoff_follows_evolve():
    import attrs

    q = SearchQuery(api_key_id="k", text="x", retention_days=30, now=NOW)
    assert q.created_after == NOW - timedelta(days=30)
    assert attrs.evolve(q, retention_days=1).created_after == NOW - timedelta(days=1)
    assert attrs.evolve(q, retention_days=None).created_after is None
    assert attrs.evolve(q, text="y") == attrs.evolve(q, text="y")


def test_memory_ids_are_canonicalised_and_checked():
    from memroute.errors import ValidationError as Invalid
    from memroute.models import require_memory_id

    canonical = "0b9e4c8a-3f1d-4e2a-9c7b-5d6e8f0a1b2c"
    assert require_memory_id(canonical) is canonical
    assert require_memory_id(" " + canonical.upper() + " ") == canonical
    assert require_memory_id(canonical.replace("-", "")) == canonical
    for bad in ("", "x", canonical + "-0", 5, None, canonical[:-1] + "g"):
        with pytest.raises(Invalid):
            require_memory_id(bad)


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [({"limit": 0}, "limit"), ({"offset": -1}, "offset"), ({"order_by": "key"}, "order_by"),
     ({"order_dir": "up"}, "order_dir"), ({"limit": True}, "limit"), ({"api_key_id": ""}, "api_key_id")],
)
def test_list_filter_validation(kwargs, problem):
    with pytest.raises(ValidationError, match=problem):
        ListFilter(**kwargs)


def test_search_query_validation():
    with pytest.raises(ValidationError, match="strategy"):
        SearchQuery(api_key_id="k", strategy="fuzzy")
    with pytest.raises(ValidationError, match="api_key_id"):
        SearchQuery(api_key_id="")


def test_json_round_trip_is_exact():
    m = memory(content="ünïcødé 🚀\r\n---\n", metadata={"a": [1, 2], "b": None}, session_id="s",
               expires_at=NOW + timedelta(days=3))
    again = loads_memory(dumps_memory(m))
    assert again.same_as(m)
    assert memory_to_dict(m)["created_at"] == "2026-11-29T12:00:00Z"


def test_memory_from_dict_rejects_bad_documents():
    good = memory_to_dict(memory())
    with pytest.raises(ValidationError, match="extra_field: unknown field"):
        memory_from_dict({**good, "extra_field": 1})
    with pytest.raises(ValidationError, match="key: required"):
        memory_from_dict({k: v for k, v in good.items() if k != "key"})
    with pytest.raises(ValidationError, match="expected an object"):
        memory_from_dict(["nope"])  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="not valid JSON"):
        loads_memory("{nope")


def test_token_estimate_is_ceil_len_over_4():
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    assert all(estimate_tokens("x" * n) == -(-n // 4) for n in range(0, 2000))


def test_a_memorys_tokens_follow_its_own_content_and_stay_out_of_equality():
    memory = NewMemory(api_key_id="t", content="abcdefgh", key="k").as_memory()
    assert memory.tokens == 2 and memory.tokens == 2
    changed = attrs.evolve(memory, content="x" * 9)
    assert changed.tokens == 3 and memory.tokens == 2
    assert attrs.evolve(changed, content="abcdefgh") == memory  # the worked-out tokens are not a field
    assert "tokens" not in memory_to_dict(memory)
    assert loads_memory(dumps_memory(memory)).tokens == 2


def test_a_memorys_created_timestamp_follows_its_own_created_at_and_stays_out_of_equality():
    """The ordering's tie-break reads ``created_timestamp`` (worked out once per object): it is ``created_at``'s
    POSIX seconds for every memory, an evolved copy works out its own, and it is no field."""
    memory = NewMemory(api_key_id="t", content="abc", key="k").as_memory()
    assert memory.created_timestamp == memory.created_at.timestamp() == memory.created_timestamp
    later = attrs.evolve(memory, created_at=memory.created_at + timedelta(seconds=90, microseconds=7))
    assert later.created_timestamp == later.created_at.timestamp() > memory.created_timestamp + 90
    assert memory.created_timestamp == memory.created_at.timestamp()
    assert attrs.evolve(later, created_at=memory.created_at) == memory
    assert "created_timestamp" not in memory_to_dict(memory)
    trusted = Memory.trusted(**{name: getattr(memory, name) for name in attrs.fields_dict(Memory)})
    assert trusted.created_timestamp == memory.created_timestamp


def test_history_entry_of_a_change():
    from memroute.models import HistoryEntry, HistoryEvent

    before = memory(content="Lives in Lisbon", key="profile:location")
    after = attrs.evolve(before, content="Lives in Berlin", updated_at=NOW + timedelta(days=1))
    assert HistoryEntry.of_change(before, attrs.evolve(before, metadata={"x": 1}), actor="api") is None  # unseen
    moved = HistoryEntry.of_change(before, after, actor="extractor:slots", event="superseded", at=NOW)
    assert (moved.event, moved.old_content, moved.new_content, moved.old_key, moved.new_key) == (
        HistoryEvent.SUPERSEDED, "Lives in Lisbon", "Lives in Berlin", None, None)
    created = HistoryEntry.of_change(None, before, actor="api")
    assert (created.event, created.old_content, created.new_key, created.new_type) == (
        HistoryEvent.CREATED, None, "profile:location", "factual")
    deleted = HistoryEntry.of_change(after, None, actor="retention")
    assert (deleted.event, deleted.new_content, deleted.old_key) == (HistoryEvent.DELETED, None, "profile:location")
    assert HistoryEntry.of_change(None, None, actor="api") is None
    for bad in ({"actor": ""}, {"event": "renamed"}, {"memory_id": ""}):
        with pytest.raises(ValidationError):
            HistoryEntry(**{"memory_id": "m1", "api_key_id": "k", "event": "created", "actor": "api", **bad})
