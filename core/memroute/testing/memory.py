"""An in-memory :class:`~memroute.interfaces.MemoryBackend`: a real, dict-based backend for tests.

It honours the whole backend contract (upsert on ``(api_key_id, key)``, ``put`` replacing by id or key,
filters, ordering, pagination, tenant isolation, search) without touching disk, so a user's tests can run a
:class:`~memroute.routing.manager.MemoryManager` or the service against it. It is deliberately not registered as a
plugin: construct it directly. Data lives as long as the object (``capabilities.persistent`` is False).
"""

from __future__ import annotations

import builtins
import re
import threading
from collections.abc import Mapping, Sequence

import attrs

from memroute.errors import BackendUnavailableError, ConflictError, ValidationError
from memroute.interfaces import BackendCapabilities, MemoryAccess, MemoryBackend
from memroute.models import BackendHit, ListFilter, ListPage, Memory, MemoryPatch, NewMemory, SearchQuery

__all__ = ["InMemoryBackend"]

_TOKEN = re.compile(r"\w+", re.UNICODE)


def _tokens(text: str) -> set[str]:
    return {t.casefold() for t in _TOKEN.findall(text)}


class InMemoryBackend(MemoryBackend):
    """Memories in a dict, guarded by one lock. Keyword search scores by query-token overlap."""

    type_name = "memory"
    capabilities = BackendCapabilities(persistent=False, access_tracking=True)

    def __init__(self, name: str = "memory") -> None:
        super().__init__(name)
        self._lock = threading.RLock()
        self._by_id: dict[str, Memory] = {}
        self._by_key: dict[tuple[str, str], str] = {}
        self._closed = False

    # --- lifecycle ------------------------------------------------------------------------------------
    def initialize(self) -> None:
        with self._lock:
            self._closed = False

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise BackendUnavailableError(f"backend {self.name!r} is closed; call initialize() first",
                                          backend=self.name)

    # --- writes ---------------------------------------------------------------------------------------
    def create(self, new: NewMemory) -> Memory:
        if not isinstance(new, NewMemory):
            raise ValidationError("create: expected a NewMemory", [("new", "type")])
        with self._lock:
            self._check_open()
            existing_id = self._by_key.get((new.api_key_id, new.key))
            if existing_id is not None:
                memory = new.merged_into(self._by_id[existing_id])
            else:
                memory = new.as_memory()
                if memory.id in self._by_id:
                    raise ConflictError(f"id {memory.id} already belongs to another memory", backend=self.name)
            self._store(memory)
            return memory

    def put(self, memory: Memory) -> None:
        if not isinstance(memory, Memory):
            raise ValidationError("put: expected a Memory", [("memory", "type")])
        with self._lock:
            self._check_open()
            # Replace whatever holds the same id, and whatever else holds the same (owner, key).
            other_id = self._by_key.get((memory.api_key_id, memory.key))
            if other_id is not None and other_id != memory.id:
                self._drop(other_id)
            self._store(_keep_accesses(memory, self._by_id.get(memory.id)))

    def update(self, memory_id: str, patch: MemoryPatch) -> Memory | None:
        if not isinstance(patch, MemoryPatch):
            raise ValidationError("update: expected a MemoryPatch", [("patch", "type")])
        with self._lock:
            self._check_open()
            current = self._by_id.get(memory_id)
            if current is None:
                return None
            updated = patch.applied_to(current)
            holder = self._by_key.get((updated.api_key_id, updated.key))
            if holder is not None and holder != memory_id:
                raise ConflictError(
                    f"key {updated.key!r} is already used by another memory of this api key", backend=self.name
                )
            self._store(updated)
            return updated

    def delete(self, memory_id: str) -> bool:
        with self._lock:
            self._check_open()
            if memory_id not in self._by_id:
                return False
            self._drop(memory_id)
            return True

    def _store(self, memory: Memory) -> None:
        previous = self._by_id.get(memory.id)
        if previous is not None:
            self._by_key.pop((previous.api_key_id, previous.key), None)
        self._by_id[memory.id] = memory
        self._by_key[(memory.api_key_id, memory.key)] = memory.id

    def _drop(self, memory_id: str) -> None:
        memory = self._by_id.pop(memory_id)
        if self._by_key.get((memory.api_key_id, memory.key)) == memory_id:
            del self._by_key[(memory.api_key_id, memory.key)]

    def record_access(self, api_key_id: str, accesses: Mapping[str, MemoryAccess]) -> int:
        """Add batched accesses of memories of ``api_key_id`` (another tenant's ids are skipped)."""
        changed = 0
        with self._lock:
            self._check_open()
            for memory_id, access in accesses.items():
                current = self._by_id.get(memory_id)
                if current is None or current.api_key_id != api_key_id:
                    continue
                last = current.last_accessed_at
                self._by_id[memory_id] = attrs.evolve(
                    current, access_count=current.access_count + access.count,
                    last_accessed_at=access.at if last is None or access.at > last else last)
                changed += 1
        return changed

    # --- reads ----------------------------------------------------------------------------------------
    def get(self, memory_id: str) -> Memory | None:
        with self._lock:
            self._check_open()
            return self._by_id.get(memory_id)

    def get_by_key(self, api_key_id: str, key: str) -> Memory | None:
        with self._lock:
            self._check_open()
            memory_id = self._by_key.get((api_key_id, key))
            return None if memory_id is None else self._by_id.get(memory_id)

    def get_many(self, memory_ids: Sequence[str]) -> dict[str, Memory]:
        with self._lock:
            self._check_open()
            return {i: self._by_id[i] for i in memory_ids if i in self._by_id}

    def list(self, filter: ListFilter) -> ListPage:
        if not isinstance(filter, ListFilter):
            raise ValidationError("list: expected a ListFilter", [("filter", "type")])
        needle = filter.query.casefold() if filter.query else None
        with self._lock:
            self._check_open()
            matches = [
                m for m in self._by_id.values()
                if (filter.api_key_id is None or m.api_key_id == filter.api_key_id)
                and (filter.type is None or m.type == filter.type)
                and (filter.session_id is None or m.session_id == filter.session_id)
                and (needle is None or needle in m.content.casefold() or needle in m.key.casefold())
            ]
        matches.sort(key=filter.sort_key, reverse=filter.order_dir == "desc")
        by_type: dict[str, int] = {}
        for memory in matches:
            by_type[memory.type.value] = by_type.get(memory.type.value, 0) + 1
        page = matches[filter.offset:filter.offset + filter.limit]
        return ListPage(data=tuple(page), total=len(matches), by_type=by_type)

    def search(self, query: SearchQuery) -> builtins.list[BackendHit]:
        if not isinstance(query, SearchQuery):
            raise ValidationError("search: expected a SearchQuery", [("query", "type")])
        with self._lock:
            self._check_open()
            candidates = [m for m in self._by_id.values() if query.admits(m)]
        recency = sorted(candidates, key=lambda m: (m.created_at, m.id), reverse=True)
        wanted = _tokens(query.text)
        if query.strategy == "exact" or not wanted:
            return [BackendHit(memory=m, score=1.0 / (rank + 1)) for rank, m in enumerate(recency[:query.limit])]
        scored = []
        for memory in recency:
            overlap = len(wanted & (_tokens(memory.content) | _tokens(memory.key)))
            if overlap:
                scored.append(BackendHit(memory=memory, score=overlap / len(wanted)))
        # sorted() is stable, so equal scores keep the recency order.
        scored.sort(key=lambda hit: hit.score, reverse=True)
        return scored[:query.limit]

    def snapshot(self) -> dict[str, Memory]:
        """Every stored memory by id (a copy): handy for comparing backends in tests."""
        with self._lock:
            return dict(self._by_id)

    def __repr__(self) -> str:
        return f"InMemoryBackend(name={self.name!r}, memories={len(self._by_id)})"


def _keep_accesses(memory: Memory, existing: Memory | None) -> Memory:
    """``memory`` with the larger access telemetry of it and ``existing`` (a put never erases accesses)."""
    if existing is None:
        return memory
    times = [t for t in (memory.last_accessed_at, existing.last_accessed_at) if t is not None]
    return attrs.evolve(memory, access_count=max(memory.access_count, existing.access_count),
                        last_accessed_at=max(times) if times else None)
