"""History and consolidation through the Python API (sync and async), on the embedded default: SQLite, the
static embedding model memroute ships and sqlite-vec. Two tenants in every test; nothing mocked. The ``slots``
extractor below is a real extractor plugin, registered like any third party's, whose facts use slot keys (the
kind §2's extractor produces): it stands in for no judgement, only for the shape of its facts."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta

import pytest

import memroute
from memroute.errors import ValidationError
from memroute.interfaces import ExtractedFact, Extractor
from memroute.models import HistoryEvent, Memory, MemoryType, new_memory_id, utcnow
from memroute.service import Memroute
from memroute.specs import ExtractorSpec
from tests.history_checks import check_concurrent_adds_record_their_own_entries, events


class _SlotExtractor(Extractor):
    """'I live in X' / 'I moved to X' -> profile:location 'Lives in X'."""

    def extract(self, text, *, source="user"):
        found = re.search(r"\bI (?:live in|moved to) ([A-Z]\w+)", text)
        if not found:
            return []
        return [ExtractedFact(key="profile:location", content=f"Lives in {found.group(1)}", type=MemoryType.FACTUAL,
                              category="profile")]


class _SlotPlugin:
    @memroute.hookimpl
    def memroute_extractors(self):
        yield ExtractorSpec(name="slots", factory=lambda settings, context: _SlotExtractor())


@pytest.fixture
def mem(tmp_path, plugin_manager, register_plugin):
    register_plugin(_SlotPlugin(), name="test-slots")
    with Memroute.open({"data_dir": str(tmp_path / "data"), "memory": {"enabled": True},
                                 "extraction": {"extractors": ["slots", "regex"], "keep_turns": "none"},
                                 "manager": {"health_interval_s": 0}}, plugins=plugin_manager) as service:
        yield service


def _chat(text):
    return {"messages": [{"role": "user", "content": text}]}


def test_every_change_is_recorded_and_read_only_by_its_tenant(mem):
    memory = mem.add(api_key_id="alice", content="Prefers tea", key="pref:drink")
    mem.add(api_key_id="alice", content="Prefers tea", key="pref:drink")  # the same again: nothing to record
    mem.update(memory.id, api_key_id="alice", content="Prefers green tea", actor="my-app")
    mem.update(memory.id, api_key_id="alice", key="pref:tea", type="procedural")
    bob = mem.add(api_key_id="bob", content="Prefers coffee", key="pref:drink")
    assert mem.delete(memory.id, api_key_id="alice")

    report = mem.history(memory.id, api_key_id="alice")
    assert report.current is None and report.recorded
    assert [(e.event, e.actor) for e in report.entries] == [
        (HistoryEvent.CREATED, "api"), (HistoryEvent.UPDATED, "my-app"), (HistoryEvent.UPDATED, "api"),
        (HistoryEvent.DELETED, "api")]
    created, edited, moved, deleted = report.entries
    assert (created.new_content, created.new_key, created.new_type) == ("Prefers tea", "pref:drink", "factual")
    assert (edited.old_content, edited.new_content, edited.old_key, edited.old_type) == (
        "Prefers tea", "Prefers green tea", None, None)  # key and type unchanged: not repeated
    assert (moved.old_key, moved.new_key, moved.old_type, moved.new_type) == (
        "pref:drink", "pref:tea", "factual", "procedural")
    assert (deleted.old_content, deleted.new_content, deleted.old_key) == ("Prefers green tea", None, "pref:tea")
    assert all(e.at.tzinfo is not None for e in report.entries)

    assert mem.history(memory.id, api_key_id="bob") is None  # another tenant's id: exactly like a missing one
    assert mem.history(new_memory_id(), api_key_id="alice") is None
    assert [e.event for e in mem.history(bob.id, api_key_id="bob").entries] == [HistoryEvent.CREATED]
    assert mem.history(bob.id, api_key_id="alice") is None


@pytest.mark.parametrize("bad", ["", "not-a-uuid", 7, None, "x" * 300])
def test_a_malformed_id_or_tenant_is_a_validation_error(mem, bad):
    with pytest.raises(ValidationError):
        mem.history(bad, api_key_id="alice")
    with pytest.raises(ValidationError):
        mem.history(new_memory_id(), api_key_id=bad if bad != "not-a-uuid" else "")


def test_bad_actor_or_event_is_refused_before_anything_is_stored(mem):
    for bad in ({"actor": ""}, {"actor": "x" * 129}, {"history_event": "renamed"}):
        with pytest.raises(ValidationError):
            mem.add(api_key_id="alice", content="never stored", **bad)
    assert mem.list(api_key_id="alice").total == 0


def test_observe_supersedes_a_slot_and_keeps_the_old_value_in_history(mem):
    [lisbon] = mem.observe(_chat("I live in Lisbon."), api_key_id="alice", wait=True)
    [porto] = mem.observe(_chat("I live in Porto."), api_key_id="bob", wait=True)
    [berlin] = mem.observe(_chat("We packed everything: I moved to Berlin last year."), api_key_id="alice",
                           wait=True)
    assert berlin.id == lisbon.id and berlin.content == "Lives in Berlin"
    assert [m.content for m in mem.export("alice")] == ["Lives in Berlin"]
    assert events(mem, lisbon.id, "alice") == [
        ("created", "extractor:slots", None, "Lives in Lisbon"),
        ("superseded", "extractor:slots", "Lives in Lisbon", "Lives in Berlin")]
    assert mem.get(porto.id, api_key_id="bob").content == "Lives in Porto"  # the other tenant's slot untouched
    assert events(mem, porto.id, "bob") == [("created", "extractor:slots", None, "Lives in Porto")]
    hits = mem.search("where does the user live?", api_key_id="alice").hits
    assert [h.memory.content for h in hits][:1] == ["Lives in Berlin"]


def test_observe_restating_an_existing_memory_updates_it_instead_of_adding(mem):
    everything = mem.add(api_key_id="alice", content="TypeScript for everything")
    theirs = mem.add(api_key_id="bob", content="TypeScript for everything")
    stored = mem.observe(_chat("I prefer TypeScript."), api_key_id="alice", wait=True)
    assert [m.id for m in stored] == [everything.id]
    assert mem.list(api_key_id="alice").total == 1
    current = mem.get(everything.id, api_key_id="alice")
    assert current.key == "preference:typescript" and current.content == "TypeScript"
    assert current.metadata["restated_by"] == "extractor:regex" and current.metadata["restate_similarity"] >= 0.8
    assert events(mem, everything.id, "alice") == [
        ("created", "api", None, "TypeScript for everything"),
        ("updated", "extractor:regex", "TypeScript for everything", "TypeScript")]
    assert mem.get(theirs.id, api_key_id="bob").content == "TypeScript for everything"
    assert mem.list(api_key_id="bob").total == 1


def test_a_different_fact_is_not_taken_for_a_restatement(mem):
    mem.add(api_key_id="alice", content="Allergic to peanuts")
    mem.observe(_chat("I prefer TypeScript."), api_key_id="alice", wait=True)
    assert sorted(m.content for m in mem.export("alice")) == ["Allergic to peanuts", "TypeScript"]


def test_add_consolidates_when_asked(mem):
    lisbon = mem.add(api_key_id="alice", content="Lives in Lisbon", key="profile:location")
    mem.add(api_key_id="bob", content="Works as a data engineer at Acme")
    moved = mem.add(api_key_id="alice", content="Lives in Berlin", key="profile:location", consolidate=True)
    assert moved.id == lisbon.id
    engineer = mem.add(api_key_id="alice", content="Works as a data engineer at Acme")
    again = mem.add(api_key_id="alice", content="Works at Acme as a data engineer", consolidate=True)
    assert again.id == engineer.id and again.content == "Works at Acme as a data engineer"
    unrelated = mem.add(api_key_id="alice", content="Has two cats named Mochi and Tofu", consolidate=True)
    assert unrelated.id not in (lisbon.id, engineer.id)
    assert mem.list(api_key_id="alice").total == 3 and mem.list(api_key_id="bob").total == 1
    assert [e[0] for e in events(mem, lisbon.id, "alice")] == ["created", "superseded"]
    assert [e[0] for e in events(mem, engineer.id, "alice")] == ["created", "updated"]
    plain = mem.add(api_key_id="alice", content="Lives in Madrid", key="profile:location")  # not asked: an upsert
    assert plain.id == lisbon.id and [e[0] for e in events(mem, lisbon.id, "alice")][-1] == "updated"


def test_import_summarization_and_prune_name_themselves(mem, tmp_path):
    moment = utcnow() - timedelta(days=400)
    old = Memory(id=new_memory_id(), api_key_id="alice", key="old", content="An old note", created_at=moment,
                 updated_at=moment)
    theirs = Memory(id=new_memory_id(), api_key_id="bob", key="old", content="Bob's old note", created_at=moment,
                    updated_at=moment)
    mem.import_memories([old, theirs])
    mem.import_memories([Memory(**{**{f: getattr(old, f) for f in ("id", "api_key_id", "key", "created_at",
                                                                    "updated_at")}, "content": "An old note, fixed"})])
    assert events(mem, old.id, "alice") == [("created", "import", None, "An old note"),
                                             ("updated", "import", "An old note", "An old note, fixed")]
    report = mem.summarize("alice", older_than_days=30, dry_run=False)
    assert events(mem, old.id, "alice")[-1] == ("deleted", "summarization", "An old note, fixed", None)
    summary = report.summary_ids[0]
    assert events(mem, summary, "alice")[0][:2] == ("created", "summarization")

    with memroute.open(data_dir=str(mem.data_dir), memory={"delete_after_days": 30},
                       manager={"health_interval_s": 0}) as pruning:
        assert pruning.prune_all().deleted == 1  # bob's: alice's old note was already summarized
        assert [e[:2] for e in events(pruning, theirs.id, "bob")][-1] == ("deleted", "retention")
        assert pruning.history(theirs.id, api_key_id="alice") is None


def test_the_async_api_reads_history(tmp_path):
    async def main():
        async with memroute.open_async(data_dir=str(tmp_path / "data")) as amem:
            memory = await amem.add(api_key_id="alice", content="Likes jazz", key="music")
            await amem.update(memory.id, api_key_id="alice", content="Likes jazz and blues")
            report = await amem.history(memory.id, api_key_id="alice")
            assert [e.event.value for e in report.entries] == ["created", "updated"]
            assert await amem.history(memory.id, api_key_id="bob") is None

    asyncio.run(main())


def test_a_backend_without_history_says_so(tmp_path, plugin_manager, register_plugin):
    from memroute.specs import BackendSpec
    from memroute.testing.memory import InMemoryBackend

    class _Plugin:
        @memroute.hookimpl
        def memroute_backends(self):
            yield BackendSpec(name="memory", factory=lambda settings, context: InMemoryBackend(context.instance_name))

    register_plugin(_Plugin(), name="test-memory-backend")
    config = {"data_dir": str(tmp_path / "d"), "backends": {"primary": "main", "main": {"type": "memory"}},
              "embedding": {"source": "none"}, "manager": {"health_interval_s": 0}}
    with Memroute.open(config, plugins=plugin_manager) as plain:
        memory = plain.add(api_key_id="alice", content="Kept without history")
        report = plain.history(memory.id, api_key_id="alice")
        assert report.recorded is False and report.entries == () and report.current == memory
        assert plain.history(memory.id, api_key_id="bob") is None


def test_prune_purges_the_history_of_long_deleted_memories_only_when_deletion_is_configured(tmp_path, monkeypatch):
    data = str(tmp_path / "data")
    with memroute.open(data_dir=data, manager={"health_interval_s": 0}) as mem:
        gone = mem.add(api_key_id="alice", content="Old address")
        kept = mem.add(api_key_id="alice", content="Allergic to peanuts")
        theirs = mem.add(api_key_id="bob", content="Bob's old address")
        mem.delete(gone.id, api_key_id="alice")
        mem.delete(theirs.id, api_key_id="bob")
        assert mem.prune_all().history_purged == 0  # deletion not configured: history kept
        assert mem.history(gone.id, api_key_id="alice") is not None
    # Two days later, with deletion after one day configured: the history of what was deleted goes too.
    later = utcnow() + timedelta(days=2)
    with memroute.open(data_dir=data, memory={"delete_after_days": 1}, manager={"health_interval_s": 0}) as mem:
        assert mem.prune("alice", dry_run=True).history_purged == 0
        # the clock of the purge only (two days on); the data and the deletion are real
        monkeypatch.setattr("memroute.service.conversation.utcnow", lambda: later)
        assert mem.prune("alice").history_purged == 2
        monkeypatch.undo()
        assert mem.history(gone.id, api_key_id="alice") is None
        assert [e.event.value for e in mem.history(kept.id, api_key_id="alice").entries] == ["created"]
        assert mem.history(theirs.id, api_key_id="bob") is not None  # another tenant's prune did not touch it


def test_a_failing_search_never_costs_the_fact(mem, monkeypatch, caplog):
    from memroute.errors import BackendUnavailableError

    def broken(*_args, **_kwargs):
        raise BackendUnavailableError("the vector store is down")

    monkeypatch.setattr(mem, "search", broken)  # the one part that fails here: the store itself stays real
    [stored] = mem.observe(_chat("I live in Lisbon."), api_key_id="alice", wait=True)
    assert stored.content == "Lives in Lisbon" and "consolidation could not search" in caplog.text
    assert mem.list(api_key_id="bob").total == 0


def test_a_history_store_that_fails_never_fails_the_write(tmp_path, plugin_manager, register_plugin, caplog):
    from tests.servers.faulty_sqlite import FaultySqlitePlugin

    faulty = FaultySqlitePlugin()
    register_plugin(faulty, name="faulty-sqlite")
    config = {"data_dir": str(tmp_path / "d"), "embedding": {"source": "none"}, "manager": {"health_interval_s": 0},
              "backends": {"primary": "main", "main": {"type": "faulty-sqlite", "path": str(tmp_path / "m.db")}}}
    with Memroute.open(config, plugins=plugin_manager) as mem:
        faulty.instances["main"].fail("append_history")
        memory = mem.add(api_key_id="alice", content="Stored although its history is not")
        assert mem.get(memory.id, api_key_id="alice") is not None
        assert "history entry not recorded" in caplog.text
        faulty.instances["main"].recover()
        mem.update(memory.id, api_key_id="alice", content="Edited later")
        assert [e.event.value for e in mem.history(memory.id, api_key_id="alice").entries] == ["updated"]
        assert mem.history(memory.id, api_key_id="bob") is None


def _db(tmp_path):
    import apsw

    return apsw.Connection(str(tmp_path / "data" / "memroute.db"))


def test_an_add_and_its_history_entry_are_one_transaction(mem, tmp_path):
    """On SQLite an add's history entry is written in the add's own transaction. A real failure between the two
    statements (a trigger that aborts every insert into memory_history, installed through another connection)
    fails the add with a memroute error and leaves neither the memory nor an entry; without it, both are there."""
    db = _db(tmp_path)
    db.execute("CREATE TRIGGER refuse_history BEFORE INSERT ON memory_history "
               "BEGIN SELECT RAISE(ABORT, 'injected failure between the memory and its history'); END")
    with pytest.raises(memroute.MemrouteError):
        mem.add(api_key_id="alice", content="Lives in Porto", key="profile:location")
    assert mem.get_by_key("profile:location", api_key_id="alice") is None
    assert db.execute("SELECT count(*) FROM memories").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM memory_history").fetchone()[0] == 0
    db.execute("DROP TRIGGER refuse_history")
    stored = mem.add(api_key_id="alice", content="Lives in Porto", key="profile:location")
    moved = mem.add(api_key_id="alice", content="Lives in Braga", key="profile:location", actor="mcp")
    assert stored.id == moved.id
    assert events(mem, stored.id, "alice") == [("created", "api", None, "Lives in Porto"),
                                                ("updated", "mcp", "Lives in Porto", "Lives in Braga")]
    assert mem.history(stored.id, api_key_id="bob") is None
    db.close()


def test_an_import_and_its_history_entries_are_one_transaction(mem, tmp_path):
    """On SQLite a bulk import's ``import`` entries are written in the import's own transaction: with a real
    failure between the two (a trigger refusing every history insert) the import fails and leaves neither its
    memories nor entries, and the memory it would have changed still says what it said."""
    existing = mem.add(api_key_id="alice", content="Lives in Porto", key="profile:location")
    now = utcnow()
    changed = Memory(id=existing.id, api_key_id="alice", key="profile:location", content="Lives in Braga",
                     created_at=existing.created_at, updated_at=now)
    new = Memory(id=new_memory_id(), api_key_id="alice", key="profile:pet", content="Has a cat", created_at=now,
                 updated_at=now)
    db = _db(tmp_path)
    entries_before = db.execute("SELECT count(*) FROM memory_history").fetchone()[0]
    db.execute("CREATE TRIGGER refuse_history BEFORE INSERT ON memory_history "
               "BEGIN SELECT RAISE(ABORT, 'injected failure between the memories and their history'); END")
    with pytest.raises(memroute.MemrouteError):
        mem.import_memories([changed, new])
    assert mem.get(new.id, api_key_id="alice") is None
    assert mem.get(existing.id, api_key_id="alice").content == "Lives in Porto"
    assert db.execute("SELECT count(*) FROM memory_history").fetchone()[0] == entries_before
    db.execute("DROP TRIGGER refuse_history")
    assert mem.import_memories([changed, new]).imported == 2
    assert events(mem, existing.id, "alice")[-1] == ("updated", "import", "Lives in Porto", "Lives in Braga")
    assert events(mem, new.id, "alice") == [("created", "import", None, "Has a cat")]
    db.close()


def test_concurrent_adds_record_each_entry_in_their_shared_transaction(mem):
    check_concurrent_adds_record_their_own_entries(mem)


def test_a_killed_writer_leaves_no_memory_without_its_entry(tmp_path):
    """A process adding in a loop is killed (SIGKILL) mid-run: every memory it left has its created entry, and every
    entry its memory."""
    import signal
    import subprocess
    import sys
    import time

    data = tmp_path / "data"
    script = ("import memroute, itertools\n"
              f"mem = memroute.open({{'data_dir': {str(data)!r}, 'embedding': {{'source': 'none'}}}})\n"
              "print('ready', flush=True)\n"
              "for i in itertools.count():\n"
              "    mem.add(api_key_id='alice', content=f'note {i}', key=f'k{i}')\n")
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        db = None
        for _ in range(200):  # until it has written a few hundred memories
            time.sleep(0.05)
            db = _db(tmp_path)
            if db.execute("SELECT count(*) FROM memories").fetchone()[0] >= 300:
                break
            db.close()
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    db = _db(tmp_path)
    memories = db.execute("SELECT count(*) FROM memories").fetchone()[0]
    assert memories >= 300
    orphans = db.execute("SELECT count(*) FROM memories m WHERE NOT EXISTS (SELECT 1 FROM memory_history h "
                         "WHERE h.memory_id = m.id AND h.event = 'created')").fetchone()[0]
    strays = db.execute("SELECT count(*) FROM memory_history h WHERE NOT EXISTS "
                        "(SELECT 1 FROM memories m WHERE m.id = h.memory_id)").fetchone()[0]
    assert (orphans, strays) == (0, 0)
    db.close()


def test_an_update_or_delete_and_its_entry_are_one_transaction(mem, tmp_path):
    """As for adds: with inserts into memory_history refused, an update and a delete fail and change nothing."""
    stored = mem.add(api_key_id="alice", content="Lives in Porto", key="profile:location")
    db = _db(tmp_path)
    db.execute("CREATE TRIGGER refuse_history BEFORE INSERT ON memory_history "
               "BEGIN SELECT RAISE(ABORT, 'injected failure'); END")
    with pytest.raises(memroute.MemrouteError):
        mem.update(stored.id, api_key_id="alice", content="Lives in Faro")
    with pytest.raises(memroute.MemrouteError):
        mem.delete(stored.id, api_key_id="alice")
    assert mem.get(stored.id, api_key_id="alice").content == "Lives in Porto"
    db.execute("DROP TRIGGER refuse_history")
    assert mem.update(stored.id, api_key_id="bob", content="stolen") is None
    assert mem.delete(stored.id, api_key_id="bob") is False
    mem.update(stored.id, api_key_id="alice", content="Lives in Faro", actor="cli")
    assert mem.delete(stored.id, api_key_id="alice", actor="mcp")
    assert events(mem, stored.id, "alice") == [("created", "api", None, "Lives in Porto"),
                                                ("updated", "cli", "Lives in Porto", "Lives in Faro"),
                                                ("deleted", "mcp", "Lives in Faro", None)]
    assert mem.history(stored.id, api_key_id="bob") is None
    db.close()
