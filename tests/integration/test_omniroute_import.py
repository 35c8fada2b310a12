"""Importing the reference system's SQLite database (issue 31, item 1): a few thousand memories of three keys,
written as the reference writes them (camelCase metadata, expired rows, duplicate keys, ownerless rows), land
in memroute per tenant, all or nothing, and searches find them per tenant and never across tenants."""

from __future__ import annotations

import json
import sqlite3
import uuid
from datetime import datetime, timezone

import pytest

import memroute
from memroute.errors import ValidationError
from memroute.models import Memory
from tests.servers.omniroute_db import TENANTS, build_reference_db, needle

KEYWORD_ONLY = {"embedding": {"source": "none"}, "vectors": {"store": "none"}}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return build_reference_db(tmp_path_factory.mktemp("omniroute") / "storage.sqlite", per_tenant=1000)


@pytest.fixture
def mem(tmp_path):
    with memroute.open(KEYWORD_ONLY, use_env=False, data_dir=str(tmp_path / "data")) as service:
        yield service


def stored(service, tenant: str) -> int:
    return service.list(api_key_id=tenant, limit=1).total


def test_the_dry_run_reports_every_quirk_and_writes_nothing(mem, reference):
    progress: list[tuple[str, int, int]] = []
    report = mem.import_omniroute(reference.path, dry_run=True, progress=lambda *p: progress.append(p))
    superseded = sum(reference.duplicates.values())
    assert (report.rows, report.dry_run, report.imported, report.table) == (reference.rows, True, 0, "memories")
    assert report.carried == reference.rows - reference.unowned - superseded
    assert report.tenants == {t: reference.per_tenant[t] - reference.duplicates[t] for t in TENANTS}
    assert report.skipped_by_reason == {"superseded": superseded, "no owner": reference.unowned}
    assert report.expired == sum(reference.expired.values())
    assert report.keys_generated == reference.no_key
    assert report.metadata_unreadable == reference.bad_metadata
    assert all(row.reason.startswith("superseded: a newer row") or row.api_key_id == ""
               for row in report.skipped_rows)
    assert [p for p in progress if p[0] == "read"][-1] == ("read", reference.rows, reference.rows)
    assert not any(p[0] == "write" for p in progress)
    assert all(stored(mem, t) == 0 for t in TENANTS)


def test_rows_that_cannot_be_carried_stop_the_import_until_accepted(mem, reference):
    with pytest.raises(ValidationError, match=r"5 row\(s\) cannot be carried \(no owner: 5\); nothing was written"):
        mem.import_omniroute(reference.path)
    assert all(stored(mem, t) == 0 for t in TENANTS)

    progress: list[tuple[str, int, int]] = []
    report = mem.import_omniroute(reference.path, skip_uncarried=True, progress=lambda *p: progress.append(p))
    assert report.imported == report.carried and report.replaces == 0
    assert progress[-1] == ("write", report.carried, report.carried)
    for tenant in TENANTS:
        assert stored(mem, tenant) == report.tenants[tenant]
    assert mem.tenants() == list(TENANTS)  # the ownerless rows went nowhere

    again = mem.import_omniroute(reference.path, skip_uncarried=True)  # resumable: the same ids, no duplicates
    assert again.imported == report.imported and again.replaces == report.carried
    assert [stored(mem, t) for t in TENANTS] == [report.tenants[t] for t in TENANTS]


def test_searches_find_each_tenants_memories_and_only_theirs(mem, reference):
    mem.import_omniroute(reference.path, skip_uncarried=True)
    for tenant in TENANTS:
        own = needle(tenant)
        hits = mem.search(own, api_key_id=tenant).hits
        assert hits and hits[0].memory.content == own
        for other in TENANTS:
            if other != tenant:
                found = [h.memory.content for h in mem.search(own, api_key_id=other).hits]
                assert own not in found
                assert all(h.memory.api_key_id == other for h in mem.search(own, api_key_id=other).hits)


def test_each_field_is_carried(mem, reference):
    mem.import_omniroute(reference.path, skip_uncarried=True)
    row = reference.sample
    memory = mem.get(row["id"], api_key_id="tenant-a")
    assert isinstance(memory, Memory)
    assert (memory.key, memory.content, memory.type.value) == (row["key"], row["content"], row["type"])
    assert memory.metadata == json.loads(row["metadata"])  # camelCase inside metadata is the user's data
    assert set(memory.metadata) == {"category", "extractedAt", "source"}
    assert memory.session_id == (row["session_id"] or None)  # the reference's "" is "no session"
    assert memory.created_at == datetime.fromisoformat(row["created_at"].replace("Z", "+00:00"))
    assert memory.access_count == row["access_count"]
    assert mem.get(row["id"], api_key_id="tenant-b") is None


def test_expired_rows_keep_their_expiry_and_stay_hidden(mem, reference, tmp_path):
    mem.import_omniroute(reference.path, skip_uncarried=True)
    connection = sqlite3.connect(reference.path)
    expired_id, content = connection.execute(
        "SELECT id, content FROM memories WHERE api_key_id = 'tenant-b' AND expires_at < ? LIMIT 1",
        (datetime.now(timezone.utc).isoformat(),)).fetchone()
    connection.close()
    assert expired_id not in {h.memory.id for h in mem.search(content, api_key_id="tenant-b").hits}
    skipped = mem.import_omniroute(reference.path, dry_run=True, skip_expired=True)
    assert skipped.skipped_by_reason["expired"] == sum(reference.expired.values()) and skipped.expired == 0


def test_ownerless_rows_can_go_to_a_named_tenant_and_duplicates_can_all_be_kept(mem, reference):
    report = mem.import_omniroute(reference.path, unowned_tenant="legacy", duplicates="keep")
    assert report.skipped == 0 and report.tenants["legacy"] == reference.unowned
    assert report.keys_renamed == sum(reference.duplicates.values())
    assert stored(mem, "tenant-c") == reference.per_tenant["tenant-c"]
    superseded = [r for r in mem.import_omniroute(reference.path, dry_run=True).skipped_rows if r.api_key_id]
    assert superseded
    for row in superseded:  # what "newest" leaves out, "keep" carries under KEY#<id prefix>
        kept = mem.get(row.id, api_key_id=row.api_key_id)
        assert kept is not None and kept.key == f"{row.key}#{row.id[:8]}"
    page = mem.list(api_key_id="legacy")
    assert page.total == reference.unowned and all(m.api_key_id == "legacy" for m in page.data)


def _foreign_db(path, rows, *, table: str = "memories", ddl: str | None = None):
    connection = sqlite3.connect(path)
    connection.execute(ddl or f"CREATE TABLE {table} (id TEXT PRIMARY KEY, api_key_id TEXT NOT NULL, session_id "
                              "TEXT, type TEXT NOT NULL, key TEXT, content TEXT NOT NULL, metadata TEXT, created_at "
                              "TEXT NOT NULL, updated_at TEXT NOT NULL, expires_at TEXT)")
    marks = ",".join("?" * len(rows[0]))
    connection.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
    connection.commit()
    connection.close()
    return path


def _row(**fields):
    row = {"id": str(uuid.uuid4()), "api_key_id": "a", "session_id": "", "type": "factual", "key": "k",
           "content": "I prefer tea", "metadata": "{}", "created_at": "2026-01-02T03:04:05.000Z",
           "updated_at": "2026-01-02T03:04:05.000Z", "expires_at": None}
    row.update(fields)
    return tuple(row.values())


@pytest.mark.parametrize(("bad", "reason"), [
    ({"type": "preference"}, "type: 'preference' is not factual"),
    ({"created_at": "yesterday"}, "created_at: not a timestamp"),
    ({"content": "   "}, "content: empty"),
    ({"api_key_id": "x" * 300}, "api_key_id:"),
])
def test_a_bad_row_late_in_the_table_writes_nothing(mem, tmp_path, bad, reason):
    # A table without the CHECK constraint (written by an older migration or by hand) lets anything in.
    rows = [_row(key=f"k{i}", api_key_id="a") for i in range(500)] + [_row(key="bad", **bad)]
    path = _foreign_db(tmp_path / "bad.sqlite", rows)
    with pytest.raises(ValidationError) as caught:
        mem.import_omniroute(path)
    assert reason in str(caught.value) and "nothing was written" in str(caught.value)
    assert stored(mem, "a") == 0
    dry = mem.import_omniroute(path, dry_run=True)
    assert dry.skipped == 1 and reason in dry.skipped_rows[0].reason and dry.carried == 500


def test_the_legacy_camel_case_table_and_odd_ids_are_read(mem, tmp_path):
    ddl = ("CREATE TABLE memory (id TEXT, apiKeyId TEXT, sessionId TEXT, type TEXT, key TEXT, content TEXT, "
           "metadata TEXT, createdAt TEXT, updatedAt TEXT, expiresAt TEXT)")
    upper = str(uuid.uuid4()).upper()
    path = _foreign_db(tmp_path / "legacy.sqlite", [
        _row(id=upper, key="a1", created_at="2025-05-01 10:00:00", updated_at="2025-05-01 10:00:00"),
        _row(id="mem-legacy-7", key=None, content="Legacy row without a key"),
    ], table="memory", ddl=ddl)
    report = mem.import_omniroute(path)
    assert (report.table, report.imported, report.ids_derived, report.keys_generated) == ("memory", 2, 1, 1)
    first = mem.get(upper.lower(), api_key_id="a")
    assert first is not None and first.created_at == datetime(2025, 5, 1, 10, tzinfo=timezone.utc)
    derived = str(uuid.uuid5(uuid.UUID("6f1d2c3e-1f0a-5b7e-9a41-0c6e4d2b8a77"), "mem-legacy-7"))
    second = mem.get(derived, api_key_id="a")
    assert second is not None and second.key == f"omniroute:{derived}"


def test_an_id_held_by_another_tenant_is_refused(mem, tmp_path):
    theirs = mem.add(api_key_id="b", content="Bob's own memory", key="mine")
    path = _foreign_db(tmp_path / "clash.sqlite", [_row(key="one"), _row(id=theirs.id, key="two")])
    with pytest.raises(ValidationError, match="already used by another memory"):
        mem.import_omniroute(path)
    assert stored(mem, "a") == 0 and mem.get(theirs.id, api_key_id="b").content == "Bob's own memory"


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: p / "missing.sqlite", "no such file"),
    (lambda p: (p / "notes.txt").write_text("hello") and p / "notes.txt", "not a readable SQLite database"),
    (lambda p: _empty_db(p / "empty.sqlite"), "no memories table"),
])
def test_a_file_that_is_not_the_references_database_is_a_clear_error(mem, tmp_path, make, message):
    with pytest.raises(ValidationError, match=message):
        mem.import_omniroute(make(tmp_path))


def test_bad_options_are_refused(mem, reference):
    with pytest.raises(ValidationError, match="duplicates: expected one of newest, keep"):
        mem.import_omniroute(reference.path, duplicates="oldest")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="api_key_id"):
        mem.import_omniroute(reference.path, unowned_tenant=" ")


def _empty_db(path):
    sqlite3.connect(path).execute("CREATE TABLE other (x)").connection.close()
    return path


# --- the command line ---------------------------------------------------------------------------------------

@pytest.fixture
def run(run_cli, monkeypatch):
    monkeypatch.setenv("MEMORY_EMBEDDING_SOURCE", "none")
    return run_cli


def test_the_cli_dry_runs_refuses_then_imports(run, reference):
    code, out, err = run("import", "--from", "omniroute", "--dry-run", "--json", str(reference.path))
    assert code == 0 and json.loads(out)["carried"] == reference.rows - 5 - sum(reference.duplicates.values())
    assert "would import" in err

    code, _, err = run("import", "--from", "omniroute", str(reference.path))
    assert code == 2 and "cannot be carried (no owner: 5)" in err and "Traceback" not in err

    code, out, err = run("import", "--from", "omniroute", "--skip-uncarried", str(reference.path))
    assert code == 0 and "tenant tenant-a:" in out and "not carried: 80" in out
    code, out, _ = run("search", "--api-key", "tenant-b", "--json", "sourdough starter Clint")
    assert needle("tenant-b") in out and needle("tenant-a") not in out


def test_the_cli_refuses_mixed_options(run, reference):
    code, _, err = run("import", "--from", "omniroute", "--api-key", "a", str(reference.path))
    assert code == 2 and "every tenant" in err
    code, _, err = run("import", "--dry-run", "--api-key", "a", str(reference.path))
    assert code == 2 and "go with --from omniroute" in err


def test_an_omniroute_qdrant_collection_is_left_untouched(tmp_path):
    # The reference's collection (payload of its section 10): memroute refuses to index into it, says so, keeps
    # answering from the keyword leg, and never deletes or rewrites a point of it.
    from qdrant_client.http import models as qm

    from tests.servers.qdrant_rest import QdrantRestServer

    with QdrantRestServer() as qdrant:
        qdrant.client.create_collection("omniroute_memory",
                                        vectors_config=qm.VectorParams(size=256, distance=qm.Distance.COSINE))
        points = [qm.PointStruct(id=str(uuid.uuid4()), vector=[0.1 * (i + 1)] * 256, payload={
            "kind": "omniroute_memory", "apiKeyId": "a", "sessionId": "", "type": "semantic", "key": f"k{i}",
            "content": f"reference memory {i}", "metadata": {}, "createdAtUnix": 1_700_000_000, "expiresAtUnix": None,
        }) for i in range(3)]
        qdrant.client.upsert("omniroute_memory", points=points)
        config = {"vectors": {"store": "qdrant", "qdrant": {"url": qdrant.url, "collection": "omniroute_memory"}},
                  "embedding": {"source": "static"}}
        with memroute.open(config, use_env=False, data_dir=str(tmp_path / "data")) as mem:
            mem.add(api_key_id="a", content="Keeps bees on the roof", key="hobby:bees")
            assert mem.flush(30)
            assert "was not created by memroute" in mem.status().vector_store["reason"]
            result = mem.search("bees on the roof", api_key_id="a")
            assert result.provenance.degraded and [h.memory.key for h in result.hits] == ["hobby:bees"]
        kept = qdrant.client.retrieve("omniroute_memory", ids=[p.id for p in points], with_payload=True)
        assert sorted(p.payload["key"] for p in kept) == ["k0", "k1", "k2"]
        assert qdrant.client.count("omniroute_memory").count == 3


def test_the_counts_are_of_carried_rows_and_a_repeated_id_is_refused(mem, tmp_path):
    stale = _row(key="pref:tea", content="I like green tea", metadata="{oops", expires_at="2001-01-01T00:00:00Z",
                 created_at="2024-01-01T00:00:00.000Z", updated_at="2024-01-01T00:00:00.000Z")
    fresh = _row(key="pref:tea", content="I like oolong tea", created_at="2025-01-01T00:00:00.000Z",
                 updated_at="2025-01-01T00:00:00.000Z")
    ddl = ("CREATE TABLE memories (id TEXT, api_key_id TEXT, session_id TEXT, type TEXT, key TEXT, content TEXT, "
           "metadata TEXT, created_at TEXT, updated_at TEXT, expires_at TEXT)")  # no PRIMARY KEY
    path = _foreign_db(tmp_path / "dupes.sqlite", [fresh, stale], ddl=ddl)
    report = mem.import_omniroute(path, dry_run=True)
    assert (report.carried, report.expired, report.metadata_unreadable) == (1, 0, 0)
    assert report.skipped_rows[0].id == stale[0] and report.skipped_rows[0].reason.startswith("superseded")
    twice = _foreign_db(tmp_path / "twice.sqlite", [_row(id=stale[0], key="a"), _row(id=stale[0], key="b")],
                        ddl=ddl)
    with pytest.raises(ValidationError, match="repeats an earlier row's id"):
        mem.import_omniroute(twice)
    assert stored(mem, "a") == 0


def test_imported_memories_are_embedded_and_found_by_meaning(tmp_path):
    # The embedded default (static model, sqlite-vec): the import's memories are indexed in the background and
    # a semantic search, worded unlike the memory, finds the tenant's own and never another's.
    reference = build_reference_db(tmp_path / "storage.sqlite", per_tenant=150)
    config = {"embedding": {"source": "static"}, "vectors": {"store": "sqlite-vec"}}
    with memroute.open(config, use_env=False, data_dir=str(tmp_path / "data")) as mem:
        report = mem.import_omniroute(reference.path, skip_uncarried=True)
        assert mem.flush(60)
        assert mem.status().vector_store["rows"] == report.carried
        for tenant, question in (("tenant-a", "what is the name of my pet cat"),
                                 ("tenant-b", "what did I call my bread starter")):
            result = mem.search(question, api_key_id=tenant, strategy="semantic", limit=5)
            assert "vector" in result.provenance.legs and not result.provenance.degraded
            assert needle(tenant) in [h.memory.content for h in result.hits]
            assert all(h.memory.api_key_id == tenant for h in result.hits)
