"""Import is all-or-nothing and never moves a memory between tenants (issue 16, items 4, 5 and 6's door).

Before the fix a 3,000-line file with a bad line 2,501 left 2,000 rows (batches of 2,000 were written as
they were parsed... and validated), a line carrying B's id with ``api_key_id: "A"`` replaced B's memory, and
a ``"id": "not-a-uuid"`` line was accepted and then stalled the vector indexer for everyone.
"""

from __future__ import annotations

import json

import pytest

import memroute
from memroute.config.serialization import memory_to_dict
from memroute.errors import NotFoundError, ValidationError
from memroute.models import Memory, new_memory_id, utcnow


@pytest.fixture
def mem(tmp_path):
    with memroute.open({"embedding": {"source": "none"}, "vectors": {"store": "none"}}, use_env=False,
                       data_dir=str(tmp_path / "data")) as service:
        yield service


def line(api_key_id: str | None = "a", **fields: object) -> str:
    now = utcnow()
    data: dict[str, object] = {"id": new_memory_id(), "api_key_id": api_key_id, "key": f"k-{new_memory_id()}",
                               "content": "some fact", "type": "factual", "session_id": None, "metadata": {},
                               "created_at": now.isoformat(), "updated_at": now.isoformat(), "expires_at": None}
    data.update(fields)
    if api_key_id is None:
        del data["api_key_id"]
    return json.dumps(data, ensure_ascii=False)


def total(service, tenant: str = "a") -> int:
    return service.list(api_key_id=tenant).total


def test_a_bad_line_late_in_a_large_file_writes_nothing(mem):
    lines = [line(key=f"k{i}") for i in range(3000)]
    lines[2500] = line(key="bad", type="bogus")
    with pytest.raises(ValidationError, match=r"^line 2501: "):
        mem.import_jsonl(lines)
    assert total(mem) == 0
    report = mem.import_jsonl(lines[:2500] + lines[2501:])
    assert (report.imported, report.lines, report.tenants) == (2999, 2999, 1)
    assert total(mem) == 2999


@pytest.mark.parametrize("bad_id", ["not-a-uuid", "", "123", "A1B2C3D4-0000-4000-8000-00000000000Z",
                                    "11111111-2222-4333-8444-55555555555"])
def test_an_id_that_is_not_a_uuid_is_refused_at_the_door(mem, bad_id):
    with pytest.raises(ValidationError, match=r"line 2: id: expected a canonical UUID"):
        mem.import_jsonl([line(), line(id=bad_id)])
    assert total(mem) == 0
    assert mem.flush(5) is True


def test_a_copied_id_never_moves_another_tenants_memory(mem):
    theirs = mem.add(api_key_id="b", content="B's secret", key="secret")
    # An operator's import is told why; to a tenant's, another tenant's id is a memory it cannot see (the 404
    # of a missing one, which does not tell the id exists).
    with pytest.raises(ValidationError, match="already used by another memory"):
        mem.import_jsonl([line(id=theirs.id, key="secret", content="A took it")], api_key_id=None)
    with pytest.raises(NotFoundError, match="line 1: Memory not found"):
        mem.import_jsonl([line(id=theirs.id, key="secret", content="A took it")], api_key_id="a")
    got = mem.get(theirs.id, api_key_id="b")
    assert got is not None and got.content == "B's secret" and got.api_key_id == "b"
    assert total(mem) == 0
    with pytest.raises(ValidationError, match="another tenant"):
        mem.import_memories([Memory(**{**memory_to_dict(theirs), "api_key_id": "a"})])
    assert mem.get(theirs.id, api_key_id="b").content == "B's secret"


def test_the_same_id_twice_with_two_owners_is_refused(mem):
    shared = new_memory_id()
    with pytest.raises(ValidationError, match=r"line 2: id: .* another api_key_id"):
        mem.import_jsonl([line(id=shared, api_key_id="a"), line(id=shared, api_key_id="b")])
    assert total(mem) == 0 and total(mem, "b") == 0


def test_a_tenants_import_takes_only_its_own_lines(mem):
    with pytest.raises(ValidationError, match="line 2: api_key_id: belongs to another tenant"):
        mem.import_jsonl([line(api_key_id="a"), line(api_key_id="b")], api_key_id="a")
    assert total(mem) == 0 and total(mem, "b") == 0
    report = mem.import_jsonl([line(api_key_id="a"), line(api_key_id=None), line(api_key_id="")], api_key_id="a")
    assert report.imported == 3 and report.api_key_id == "a"
    assert total(mem) == 3


@pytest.mark.parametrize("text, message", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"a": ' + "[" * 5000 + "]" * 5000 + "}", "nested too deeply"),
    (None, "content: contains a lone UTF-16 surrogate"),
])
def test_hostile_lines_are_one_typed_error(mem, text, message):
    bad = text if text is not None else line(content="x \ud800")
    with pytest.raises(ValidationError, match=message):
        mem.import_jsonl([line(), bad])
    assert total(mem) == 0


def test_import_obeys_the_configured_limits(tmp_path):
    config = {"embedding": {"source": "none"}, "vectors": {"store": "none"}, "limits": {"max_metadata_bytes": 32}}
    with memroute.open(config, use_env=False, data_dir=str(tmp_path / "d")) as service:
        with pytest.raises(ValidationError, match=r"line 1: .*max_metadata_bytes"):
            service.import_jsonl([line(metadata={"k": "v" * 64})])
        assert total(service) == 0


def _bare(**fields: object) -> str:
    """A hand-written line: only what a memory is about, no id and no timestamps."""
    return json.dumps({"api_key_id": "a", "key": f"k-{new_memory_id()}", "content": "some fact", **fields})


def test_a_line_without_id_or_timestamps_gets_them_filled_in(mem):
    before = utcnow()
    report = mem.import_jsonl([_bare(key="editor", content="Uses Helix"),
                               _bare(key="tea", created_at="2026-01-01T12:00:00Z")])
    assert report.imported == 2
    by_key = {m.key: m for m in mem.list(api_key_id="a").data}
    fresh, dated = by_key["editor"], by_key["tea"]
    assert len({fresh.id, dated.id}) == 2 and all(len(m.id) == 36 for m in (fresh, dated))
    assert fresh.created_at >= before and fresh.updated_at == fresh.created_at
    assert dated.created_at.isoformat() == "2026-01-01T12:00:00+00:00" and dated.updated_at == dated.created_at
    assert mem.get(fresh.id, api_key_id="a").content == "Uses Helix"


def test_an_explicit_null_is_filled_in_like_a_missing_field(mem):
    mem.import_jsonl([_bare(key="x", id=None, created_at=None, updated_at=None)])
    assert mem.list(api_key_id="a").data[0].key == "x"


def test_a_tenants_import_fills_in_the_tenant_too(mem):
    mem.import_jsonl([json.dumps({"key": "k", "content": "mine"})], api_key_id="b")
    assert [m.content for m in mem.list(api_key_id="b").data] == ["mine"]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"api_key_id": "a", "key": "k"}, r"line 2: .*content"),
        ({"api_key_id": "a", "content": "no key"}, r"line 2: .*key"),
        ({"key": "k", "content": "whose?"}, r"line 2: api_key_id: missing"),
        ({"api_key_id": "a", "key": "k", "content": "x", "created_at": "yesterday"}, r"line 2: .*created_at"),
        ({"api_key_id": "a", "key": "k", "content": "x", "id": "not-a-uuid"}, r"line 2: id: expected a canonical"),
        ({"api_key_id": "a", "key": "k", "content": "x", "colour": "red"}, r"line 2: .*colour"),
    ],
)
def test_a_bad_hand_written_line_is_named_and_nothing_is_written(mem, bad, message):
    with pytest.raises(ValidationError, match=message):
        mem.import_jsonl([_bare(), json.dumps(bad)])
    assert total(mem) == 0


def test_a_line_missing_several_required_fields_names_them_all_at_once(mem):
    with pytest.raises(ValidationError) as caught:
        mem.import_jsonl([json.dumps({"api_key_id": "a", "type": "factual"})])
    assert "key" in str(caught.value) and "content" in str(caught.value)
