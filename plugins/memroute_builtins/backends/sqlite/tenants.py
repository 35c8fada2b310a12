"""Per tenant, the memories the SQLite backend has read, trusted without reading their rows again.

A search reads many memory rows: the keyword leg's shortlist (up to 100 for ``augment``) and the vector leg's
candidates the keyword leg did not return (~50). :class:`~memroute_builtins.backends.sqlite.schema.RowMemo`
already spares rebuilding a memory from an unchanged row, but every row is still read and compared. Here the
memories are kept with the tenant's **change count** (``memory_changes``: moved by triggers, in the writing
transaction, on any change to a column a :class:`~memroute.models.Memory` shows, by any process), and while
that count stands they are the rows: one lookup of the count replaces the reads.

The rule every reader follows: read the count, use the :meth:`TenantMemories.entry` for it, read from SQLite
what it lacks (and :meth:`~TenantMemories.keep` that), and when the reads from SQLite need to agree with the
kept memories (a keyword shortlist ranked by the file as it is now), read the count again and fall back to a
plain read when it moved. An entry only ever holds memories read while its count stood, so a reader whose
count matches may trust all of it; a memory added by a reader that raced a write is found by that reader's
second look (it drops the entry), and any other reader of it has its own second look, or took it within its
own call.

Bounded: at most ``max_memories`` memories and known foreign rowids over all tenants (``[backends.NAME]
kept_memories``; the least recently used tenant is dropped first, and a tenant larger than the bound keeps what
fits and reads the rest), and a memory longer than ``max_chars`` is never kept (it is read each time). Memories
are shared: their ``metadata`` is read-only, as with ``RowMemo``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from memroute.models import Memory

__all__ = ["TenantEntry", "TenantMemories"]


class TenantEntry:
    """One tenant's kept memories at change count ``stamp``: by FTS rowid and by id, and the rowids seen to
    belong to other tenants (a shortlist without the owner term holds them; see ``SqliteBackend.keyword``)."""

    __slots__ = ("by_id", "by_rowid", "foreign", "rowid_of", "size", "stamp")

    def __init__(self, stamp: int) -> None:
        self.stamp = stamp
        self.by_rowid: dict[int, Memory] = {}
        self.by_id: dict[str, Memory] = {}
        self.rowid_of: dict[str, int] = {}
        self.foreign: set[int] = set()
        self.size = 0


class TenantMemories:
    """The entries of the tenants searched most recently (see the module docstring)."""

    max_chars = 16_384

    def __init__(self, max_memories: int) -> None:
        self.max_memories = max_memories
        self._entries: OrderedDict[str, TenantEntry] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def entry(self, tenant: str, stamp: int) -> TenantEntry:
        """The tenant's entry at change count ``stamp``: the kept one when it was kept at that count, else a
        new empty one, which replaces an older count's (counts only grow: a reader that read its count before
        the latest write gets an entry of its own, kept nowhere)."""
        with self._lock:
            found = self._entries.get(tenant)
            if found is not None and found.stamp == stamp:
                self._entries.move_to_end(tenant)
                return found
            if found is not None:
                if found.stamp > stamp:
                    return TenantEntry(stamp)
                self._size -= found.size
            fresh = self._entries[tenant] = TenantEntry(stamp)
            self._entries.move_to_end(tenant)
            return fresh

    def keep(self, tenant: str, entry: TenantEntry, memories: Iterable[tuple[int, Memory]],
             foreign: Iterable[int] = (), *, stamp: int) -> None:
        """Add what a reader that read the count ``stamp`` read: ``(rowid, memory)`` pairs of the tenant and
        rowids of other tenants. Nothing is added to an entry that was replaced or moved to another count
        meanwhile (:meth:`advance`), or past the bound."""
        with self._lock:
            if self._entries.get(tenant) is not entry or entry.stamp != stamp:
                return
            for rowid, memory in memories:
                if rowid in entry.by_rowid or len(memory.content) > self.max_chars or not self._room(tenant):
                    continue
                entry.by_rowid[rowid] = memory
                entry.by_id[memory.id] = memory
                entry.rowid_of[memory.id] = rowid
                entry.size += 1
                self._size += 1
            for rowid in foreign:
                if rowid in entry.foreign or not self._room(tenant):
                    continue
                entry.foreign.add(rowid)
                entry.size += 1
                self._size += 1

    def _room(self, tenant: str) -> bool:
        # Least recently used tenants other than this one give way; the caller holds the lock.
        while self._size >= self.max_memories:
            oldest = next(iter(self._entries))
            if oldest == tenant:
                return False
            self._size -= self._entries.pop(oldest).size
        return True

    def tenants(self) -> list[str]:
        """The tenants whose memories are kept (a write that does not know its row's owner reads all their counts)."""
        return list(self._entries)

    def kept_ids(self, tenant: str, memory_ids: Iterable[str]) -> list[str]:
        """Those of ``memory_ids`` the tenant's entry holds."""
        entry = self._entries.get(tenant)
        return [] if entry is None else [memory_id for memory_id in memory_ids if memory_id in entry.by_id]

    def keeps(self, tenant: str) -> bool:
        """Whether memories of ``tenant`` are kept (its writes then read its count: see :meth:`advance`)."""
        return tenant in self._entries

    def advance(self, tenant: str, before: int, after: int, changed: Iterable[str] = (),
                fresh: Iterable[tuple[int, Memory]] = ()) -> None:
        """Bring the tenant's entry along with this process's own write, committed in one transaction that moved
        its count from ``before`` to ``after`` (both read inside it, so no other write came between): the
        memories of ``changed`` ids are dropped (read again when next needed), ``fresh`` ``(rowid, memory)``
        pairs (read inside the transaction, after its writes) take their places, the foreign rowids are
        forgotten (a rowid can be reused), and the entry is kept at ``after``. Without this, every write would
        throw away all a tenant's kept memories, and one write per chat turn (the turn's facts, the injected
        memories' accesses) is the common case. An entry not at ``before`` (another process wrote first, or a
        newer one replaced it) is left to be replaced. A reader still at ``before`` can no longer add to it
        (:meth:`keep` checks the count), so what it read before the commit never lands here after it."""
        with self._lock:
            entry = self._entries.get(tenant)
            if entry is None or entry.stamp != before:
                return
            fresh = list(fresh)
            for memory_id in [*changed, *(memory.id for _, memory in fresh)]:
                if entry.by_id.pop(memory_id, None) is not None:
                    del entry.by_rowid[entry.rowid_of.pop(memory_id)]
                    entry.size -= 1
                    self._size -= 1
            self._size -= len(entry.foreign)
            entry.size -= len(entry.foreign)
            entry.foreign = set()
            entry.stamp = after
        self.keep(tenant, entry, fresh, stamp=after)

    def drop(self, tenant: str) -> None:
        with self._lock:
            found = self._entries.pop(tenant, None)
            if found is not None:
                self._size -= found.size

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._size = 0

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"tenants": len(self._entries), "kept": self._size, "max": self.max_memories}
