"""A memroute storage backend that keeps memories in one JSON-lines file.

The file is an append-only log: every write appends one line (``{"op": "put", "memory": {...}}`` or
``{"op": "delete", "id": "..."}``) and is flushed (and fsynced, unless ``fsync = false``) before the call
returns, so an acknowledged write survives a crash. On start the log is replayed into an in-memory index;
a torn last line (a crash in the middle of a write) is ignored. When the log holds many more lines than
live memories it is compacted: the live memories are written to a temporary file that atomically replaces
the log.

One process owns the file at a time (an exclusive lock is not taken: do not point two processes at the
same path). Inside that process every call is serialised by a lock, so the backend is thread-safe.
"""

from __future__ import annotations

import builtins
import json
import math
import os
import re
import threading
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

import attrs
from memroute.config.serialization import memory_from_dict, memory_to_dict
from memroute.errors import BackendError, ConfigError, ConflictError
from memroute.interfaces import BackendCapabilities, MemoryBackend
from memroute.models import (
    BackendHit,
    ListFilter,
    ListPage,
    Memory,
    MemoryPatch,
    NewMemory,
    SearchQuery,
)

__all__ = ["JsonlBackend", "JsonlSettings"]

_WORD = re.compile(r"\w+", re.UNICODE)


def _non_negative(_inst: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if value < 0:
        raise ConfigError(f"{attribute.name}: must be >= 0, got {value!r}", [(attribute.name, "range")])


@attrs.frozen(kw_only=True)
class JsonlSettings:
    """Options of ``[backends.NAME]`` with ``type = "jsonl"``."""

    path: str | None = None
    """The log file. Default: ``jsonl/<instance name>.jsonl`` in memroute's data directory."""
    fsync: bool = True
    """fsync after every write (durable against power loss; slower)."""
    compact_min_lines: int = attrs.field(default=1000, validator=_non_negative)
    """Compact when the log has at least this many lines and more than twice as many lines as memories."""


class JsonlBackend(MemoryBackend):
    """Memories in a JSON-lines log file, indexed in memory."""

    type_name = "jsonl"
    capabilities = BackendCapabilities()

    def __init__(self, name: str, path: Path, settings: JsonlSettings | None = None) -> None:
        super().__init__(name)
        self.path = Path(path)
        self.settings = settings or JsonlSettings()
        self._lock = threading.RLock()
        self._memories: dict[str, Memory] = {}
        self._by_key: dict[tuple[str, str], str] = {}
        self._log: TextIO | None = None
        self._lines = 0

    # --- lifecycle ---------------------------------------------------------------------------------------
    def initialize(self) -> None:
        with self._lock:
            if self._log is not None:
                return
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._replay()
                self._log = self.path.open("a", encoding="utf-8", newline="\n")
            except OSError as exc:
                raise BackendError(f"{self.name}: cannot open {self.path}: {exc}", backend=self.name) from exc

    def close(self) -> None:
        with self._lock:
            if self._log is not None:
                self._log.close()
                self._log = None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type_name, "path": str(self.path)}

    def _replay(self) -> None:
        self._memories.clear()
        self._by_key.clear()
        self._lines = 0
        if not self.path.exists():
            return
        with self.path.open("r", encoding="utf-8", newline="\n") as log:
            for number, line in enumerate(log, start=1):
                if not line.endswith("\n"):
                    break  # a torn last line: the write it belongs to was never acknowledged
                try:
                    entry = json.loads(line)
                    if entry["op"] == "put":
                        self._index(memory_from_dict(entry["memory"]))
                    elif entry["op"] == "delete":
                        self._unindex(entry["id"])
                    else:
                        raise ValueError(f"unknown op {entry['op']!r}")
                except Exception as exc:
                    raise BackendError(f"{self.name}: {self.path} line {number} is corrupt: {exc}",
                                       backend=self.name) from exc
                self._lines += 1

    # --- the log -----------------------------------------------------------------------------------------
    def _append(self, entries: builtins.list[dict[str, Any]]) -> None:
        if self._log is None:
            raise BackendError(f"{self.name}: not initialized (or closed)", backend=self.name)
        text = "".join(json.dumps(e, ensure_ascii=False, sort_keys=True) + "\n" for e in entries)
        try:
            self._log.write(text)
            self._log.flush()
            if self.settings.fsync:
                os.fsync(self._log.fileno())
        except OSError as exc:
            raise BackendError(f"{self.name}: write to {self.path} failed: {exc}", backend=self.name) from exc
        self._lines += len(entries)
        if self._lines >= self.settings.compact_min_lines and self._lines > 2 * len(self._memories):
            self.compact()

    def compact(self) -> None:
        """Rewrite the log with only the live memories (atomically: a crash leaves the old or the new file)."""
        with self._lock:
            temporary = self.path.with_suffix(self.path.suffix + ".tmp")
            with temporary.open("w", encoding="utf-8", newline="\n") as out:
                for memory in self._memories.values():
                    out.write(json.dumps({"op": "put", "memory": memory_to_dict(memory)},
                                         ensure_ascii=False, sort_keys=True) + "\n")
                out.flush()
                os.fsync(out.fileno())
            if self._log is not None:
                self._log.close()
            os.replace(temporary, self.path)
            self._log = self.path.open("a", encoding="utf-8", newline="\n")
            self._lines = len(self._memories)

    def _index(self, memory: Memory) -> None:
        self._unindex(memory.id)
        other = self._by_key.get((memory.api_key_id, memory.key))
        if other is not None:
            self._unindex(other)
        self._memories[memory.id] = memory
        self._by_key[(memory.api_key_id, memory.key)] = memory.id

    def _unindex(self, memory_id: str) -> None:
        old = self._memories.pop(memory_id, None)
        if old is not None:
            self._by_key.pop((old.api_key_id, old.key), None)

    def _store(self, memory: Memory) -> None:
        entries = []
        other = self._by_key.get((memory.api_key_id, memory.key))
        if other is not None and other != memory.id:
            entries.append({"op": "delete", "id": other})
        entries.append({"op": "put", "memory": memory_to_dict(memory)})
        self._append(entries)  # the log first: the index never holds what the file does not
        self._index(memory)

    # --- CRUD --------------------------------------------------------------------------------------------
    def create(self, new: NewMemory) -> Memory:
        with self._lock:
            existing_id = self._by_key.get((new.api_key_id, new.key))
            memory = new.merged_into(self._memories[existing_id]) if existing_id else new.as_memory()
            self._store(memory)
            return memory

    def put(self, memory: Memory) -> None:
        with self._lock:
            self._store(memory)

    def get(self, memory_id: str) -> Memory | None:
        with self._lock:
            return self._memories.get(memory_id)

    def update(self, memory_id: str, patch: MemoryPatch) -> Memory | None:
        with self._lock:
            memory = self._memories.get(memory_id)
            if memory is None:
                return None
            updated = patch.applied_to(memory)
            holder = self._by_key.get((updated.api_key_id, updated.key))
            if holder is not None and holder != memory_id:
                raise ConflictError(f"{self.name}: key {updated.key!r} is held by another memory", backend=self.name)
            self._store(updated)
            return updated

    def delete(self, memory_id: str) -> bool:
        with self._lock:
            if memory_id not in self._memories:
                return False
            self._append([{"op": "delete", "id": memory_id}])
            self._unindex(memory_id)
            return True

    # --- queries -----------------------------------------------------------------------------------------
    def list(self, filter: ListFilter) -> ListPage:
        with self._lock:
            rows = builtins.list(self._memories.values())
        needle = filter.query.casefold() if filter.query else None
        rows = [
            m for m in rows
            if (filter.api_key_id is None or m.api_key_id == filter.api_key_id)
            and (filter.type is None or m.type == filter.type)
            and (filter.session_id is None or m.session_id == filter.session_id)
            and (needle is None or needle in m.content.casefold() or needle in m.key.casefold())
        ]
        by_type = dict(Counter(m.type.value for m in rows))
        rows.sort(key=filter.sort_key, reverse=filter.order_dir == "desc")
        page = tuple(rows[filter.offset: filter.offset + filter.limit])
        return ListPage(data=page, total=len(rows), by_type=by_type)

    def search(self, query: SearchQuery) -> builtins.list[BackendHit]:
        with self._lock:
            candidates = [m for m in self._memories.values() if query.admits(m)]
        if query.strategy == "exact":
            candidates.sort(key=lambda m: (m.created_at, m.id), reverse=True)
            return [BackendHit(memory=m, score=1.0 / (1 + i)) for i, m in enumerate(candidates[: query.limit])]
        return _keyword_ranking(candidates, query.text)[: query.limit]


def _keyword_ranking(memories: builtins.list[Memory], text: str) -> builtins.list[BackendHit]:
    """BM25 over key + content of the candidates (which already passed the query's filters)."""
    terms = set(_WORD.findall(text.casefold()))
    if not terms or not memories:
        return []
    docs = [Counter(_WORD.findall(f"{m.key} {m.content}".casefold())) for m in memories]
    lengths = [sum(d.values()) for d in docs]
    average = sum(lengths) / len(lengths) or 1.0
    frequency = {t: sum(1 for d in docs if t in d) for t in terms}
    hits = []
    for memory, doc, length in zip(memories, docs, lengths, strict=True):
        score = 0.0
        for term in terms:
            tf = doc.get(term, 0)
            if tf:
                idf = math.log(1 + (len(docs) - frequency[term] + 0.5) / (frequency[term] + 0.5))
                score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / average))
        if score > 0:
            hits.append(BackendHit(memory=memory, score=score))
    hits.sort(key=lambda h: (-h.score, h.memory.id))
    return hits
