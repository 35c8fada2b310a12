"""The history part of the backend conformance suite (capability ``history``).

:class:`~memroute.testing.backend.BackendContract` inherits these tests; a backend that does not declare
``history`` skips them (the service then reports that the deployment keeps no history).
"""

from __future__ import annotations

from datetime import timedelta
from typing import ClassVar

import pytest

from memroute.errors import ConflictError, ValidationError
from memroute.interfaces import HistoryNote, MemoryBackend, MemoryHistory, RecordedImports, RecordedWrites
from memroute.models import HistoryEntry, HistoryEvent, Memory, MemoryPatch, NewMemory, new_memory_id, utcnow

__all__ = ["HistoryTests"]

_A = "tenant-a"
_B = "tenant-b"


def _keeper(backend: MemoryBackend) -> MemoryHistory:
    if not backend.capabilities.history:
        pytest.skip(f"{type(backend).__name__} declares capability history=False")
    assert isinstance(backend, MemoryHistory), (
        f"{type(backend).__name__} declares history but lacks append_history / history / purge_history")
    return backend


def _recorder(backend: MemoryBackend) -> RecordedWrites:
    _keeper(backend)
    if not isinstance(backend, RecordedWrites):
        pytest.skip(f"{type(backend).__name__} records history after its writes (no create_many_recorded)")
    return backend


def _importer(backend: MemoryBackend) -> RecordedImports:
    _keeper(backend)
    if not isinstance(backend, RecordedImports):
        pytest.skip(f"{type(backend).__name__} records an import's history after it (no put_many_recorded)")
    return backend


def _change(before: Memory | None, after: Memory | None, *, minutes_ago: int, actor: str = "api",
            event: HistoryEvent | None = None) -> HistoryEntry:
    at = utcnow().replace(microsecond=0) - timedelta(minutes=minutes_ago)
    entry = HistoryEntry.of_change(before, after, actor=actor, event=event, at=at)
    assert entry is not None
    return entry


class HistoryTests:
    """Conformance tests for :class:`~memroute.interfaces.MemoryHistory` (mixed into ``BackendContract``)."""

    __test__: ClassVar[bool] = False

    def test_history_round_trips_every_field_oldest_first(self, backend: MemoryBackend) -> None:
        keeper = _keeper(backend)
        first = backend.create(NewMemory(api_key_id=_A, key="profile:location", content="Lives in Lisbon"))
        second = backend.create(NewMemory(api_key_id=_A, key="profile:location", content="Lives in Berlin"))
        created = _change(None, first, minutes_ago=30, actor="extractor:regex")
        superseded = _change(first, second, minutes_ago=20, actor="extractor:regex", event=HistoryEvent.SUPERSEDED)
        keeper.append_history([superseded])
        keeper.append_history([created])
        got = keeper.history(_A, first.id)
        assert got == [created, superseded], "history must return every entry exactly, oldest first"
        assert got[1].old_content == "Lives in Lisbon" and got[1].new_content == "Lives in Berlin"
        assert got[0].new_key == "profile:location" and got[0].new_type == "factual"

    def test_appending_an_entry_again_changes_nothing(self, backend: MemoryBackend) -> None:
        keeper = _keeper(backend)
        memory = backend.create(NewMemory(api_key_id=_A, key="k", content="tea"))
        entry = _change(None, memory, minutes_ago=5)
        keeper.append_history([entry])
        keeper.append_history([entry])
        assert keeper.history(_A, memory.id) == [entry], "append_history must be idempotent by entry id"

    def test_history_is_tenant_scoped(self, backend: MemoryBackend) -> None:
        keeper = _keeper(backend)
        mine = backend.create(NewMemory(api_key_id=_A, key="k", content="tenant a's memory"))
        keeper.append_history([_change(None, mine, minutes_ago=5)])
        assert keeper.history(_B, mine.id) == [], "tenant B read tenant A's history"
        assert keeper.history(_A, new_memory_id()) == []

    def test_history_outlives_the_memory_and_purge_removes_only_what_it_names(self, backend: MemoryBackend) -> None:
        keeper = _keeper(backend)
        gone = backend.create(NewMemory(api_key_id=_A, key="gone", content="Allergic to peanuts"))
        kept = backend.create(NewMemory(api_key_id=_A, key="kept", content="Likes tea"))
        theirs = backend.create(NewMemory(api_key_id=_B, key="gone", content="tenant b"))
        keeper.append_history([_change(None, gone, minutes_ago=90), _change(gone, None, minutes_ago=60),
                               _change(None, kept, minutes_ago=90), _change(None, theirs, minutes_ago=90)])
        assert backend.delete(gone.id) and backend.delete(theirs.id)
        assert [e.event for e in keeper.history(_A, gone.id)] == [HistoryEvent.CREATED, HistoryEvent.DELETED], (
            "a deleted memory's history must stay readable")
        cutoff = utcnow() - timedelta(minutes=75)  # after the creation, before the deletion
        assert keeper.purge_history(_A, before=cutoff) == 0, "purge removed a history whose last entry is newer"
        assert keeper.purge_history(_A, before=utcnow()) == 2, "purge must remove the deleted memory's history"
        assert keeper.history(_A, gone.id) == []
        assert len(keeper.history(_A, kept.id)) == 1, "purge removed the history of a memory that exists"
        assert len(keeper.history(_B, theirs.id)) == 1, "a purge of tenant A touched tenant B"
        assert keeper.purge_history(None, before=utcnow()) == 1
        assert keeper.history(_B, theirs.id) == [] and len(keeper.history(_A, kept.id)) == 1

    def test_recorded_creates_write_each_entry_with_its_memory(self, backend: MemoryBackend) -> None:
        """``create_many_recorded`` (:class:`~memroute.interfaces.RecordedWrites`): each stored item's entry is
        what :meth:`HistoryEntry.of_change` says of the row it replaced and the one it stored, with its note's
        actor and event; an unchanged upsert records nothing; an item that fails records nothing."""
        recorder = _recorder(backend)
        keeper = _keeper(backend)
        first, moved, same, theirs = recorder.create_many_recorded(
            [NewMemory(api_key_id=_A, key="profile:location", content="Lives in Lisbon"),
             NewMemory(api_key_id=_A, key="profile:location", content="Lives in Berlin"),
             NewMemory(api_key_id=_A, key="profile:location", content="Lives in Berlin"),
             NewMemory(api_key_id=_B, key="profile:location", content="Lives in Oslo")],
            [HistoryNote(actor="api"), HistoryNote(actor="extractor:regex", event=HistoryEvent.SUPERSEDED),
             HistoryNote(actor="api"), HistoryNote(actor="mcp")])
        assert isinstance(first, Memory) and isinstance(moved, Memory) and isinstance(same, Memory)
        assert isinstance(theirs, Memory) and first.id == moved.id == same.id != theirs.id
        got = keeper.history(_A, first.id)
        assert [(e.event, e.actor, e.old_content, e.new_content) for e in got] == [
            (HistoryEvent.CREATED, "api", None, "Lives in Lisbon"),
            (HistoryEvent.SUPERSEDED, "extractor:regex", "Lives in Lisbon", "Lives in Berlin")], (
            "one entry per change, none for the unchanged upsert")
        assert [(e.event, e.actor) for e in keeper.history(_B, theirs.id)] == [(HistoryEvent.CREATED, "mcp")]
        assert keeper.history(_B, first.id) == [], "tenant B read tenant A's history"
        taken = recorder.create_many_recorded(
            [NewMemory(api_key_id=_A, key="other", content="reuses an id", id=first.id),
             NewMemory(api_key_id=_A, key="tea", content="Likes tea")],
            [HistoryNote(actor="api"), HistoryNote(actor="api")])
        assert isinstance(taken[0], ConflictError) and isinstance(taken[1], Memory)
        assert len(keeper.history(_A, first.id)) == 2, "a failed item recorded an entry"
        assert [e.new_content for e in keeper.history(_A, taken[1].id)] == ["Likes tea"]
        with pytest.raises(ValidationError):  # one note per memory, or nothing is written
            recorder.create_many_recorded([NewMemory(api_key_id=_A, key="pet", content="Has a cat")], [])
        assert backend.get_by_key(_A, "pet") is None

    def test_recorded_updates_and_deletes_write_their_entries(self, backend: MemoryBackend) -> None:
        """``update_recorded`` / ``delete_recorded``: the entry of what the row said before and after, with the
        note's actor and event; another tenant's id changes nothing and records nothing."""
        recorder = _recorder(backend)
        keeper = _keeper(backend)
        [memory] = recorder.create_many_recorded([NewMemory(api_key_id=_A, key="k", content="Drinks tea")],
                                                 [HistoryNote(actor="api")])
        assert isinstance(memory, Memory)
        assert recorder.update_recorded(_B, memory.id, MemoryPatch(content="stolen"), HistoryNote(actor="x")) is None
        assert recorder.delete_recorded(_B, memory.id, HistoryNote(actor="x")) is False
        updated = recorder.update_recorded(_A, memory.id, MemoryPatch(content="Drinks coffee"),
                                           HistoryNote(actor="cli", event=HistoryEvent.SUPERSEDED))
        assert updated is not None and updated.content == "Drinks coffee"
        assert recorder.update_recorded(_A, memory.id, MemoryPatch(content="Drinks coffee"),
                                        HistoryNote(actor="cli")) is not None  # unchanged: no entry
        assert recorder.delete_recorded(_A, memory.id, HistoryNote(actor="retention")) is True
        assert backend.get(memory.id) is None
        assert [(e.event, e.actor, e.old_content, e.new_content) for e in keeper.history(_A, memory.id)] == [
            (HistoryEvent.CREATED, "api", None, "Drinks tea"),
            (HistoryEvent.SUPERSEDED, "cli", "Drinks tea", "Drinks coffee"),
            (HistoryEvent.DELETED, "retention", "Drinks coffee", None)]
        assert keeper.history(_B, memory.id) == []

    @pytest.mark.parametrize("bad", ["", "a\x00b", "\ud800", "x" * 300])
    def test_recorded_updates_and_deletes_refuse_a_malformed_id(self, backend: MemoryBackend, bad: str) -> None:
        """A malformed id is a :class:`ValidationError` before anything is written (never a driver's error)."""
        recorder = _recorder(backend)
        keeper = _keeper(backend)
        [memory] = recorder.create_many_recorded([NewMemory(api_key_id=_A, key="k", content="Drinks tea")],
                                                 [HistoryNote(actor="api")])
        assert isinstance(memory, Memory)
        with pytest.raises(ValidationError):
            recorder.update_recorded(_A, bad, MemoryPatch(content="Drinks coffee"), HistoryNote(actor="api"))
        with pytest.raises(ValidationError):
            recorder.delete_recorded(_A, bad, HistoryNote(actor="api"))
        assert backend.get(memory.id) == memory and len(keeper.history(_A, memory.id)) == 1

    def test_recorded_imports_store_each_tenants_memories_with_their_entries(self, backend: MemoryBackend) -> None:
        """``put_many_recorded`` (:class:`~memroute.interfaces.RecordedImports`): the memories are stored as
        ``put_many`` stores them and the entries with them, each tenant's under its own; an entry already stored
        (the same import run again, or repeated in one call) adds nothing."""
        importer = _importer(backend)
        keeper = _keeper(backend)
        existing = backend.create(NewMemory(api_key_id=_A, key="profile:location", content="Lives in Lisbon"))
        now = utcnow().replace(microsecond=0)
        moved = Memory(id=existing.id, api_key_id=_A, key="profile:location", content="Lives in Berlin",
                       created_at=existing.created_at, updated_at=now)
        pet = Memory(id=new_memory_id(), api_key_id=_A, key="pet", content="Has a cat", created_at=now, updated_at=now)
        theirs = Memory(id=new_memory_id(), api_key_id=_B, key="profile:location", content="Lives in Oslo",
                        created_at=now, updated_at=now)
        entries = [_change(existing, moved, minutes_ago=0, actor="import"),
                   _change(None, pet, minutes_ago=0, actor="import"),
                   _change(None, theirs, minutes_ago=0, actor="import")]
        assert importer.put_many_recorded([moved, pet, theirs], entries) == 3
        assert [backend.get(m.id).content for m in (moved, pet, theirs)] == [  # type: ignore[union-attr]
            "Lives in Berlin", "Has a cat", "Lives in Oslo"]
        assert keeper.history(_A, existing.id) == [entries[0]]
        assert keeper.history(_A, pet.id) == [entries[1]]
        assert keeper.history(_B, theirs.id) == [entries[2]]
        assert keeper.history(_B, pet.id) == [] and keeper.history(_A, theirs.id) == [], (
            "a tenant read another tenant's import entries")
        assert importer.put_many_recorded([moved, pet, theirs], [*entries, entries[0]]) == 3
        assert [len(keeper.history(t, m.id)) for t, m in ((_A, moved), (_A, pet), (_B, theirs))] == [1, 1, 1], (
            "an entry already stored was stored again")
        assert importer.put_many_recorded([], []) == 0
