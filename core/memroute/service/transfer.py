"""Import: JSONL (as ``memroute export`` writes) into the store, validated whole before the first write.

What an import guarantees (docs/manager.md, "Import"):

* **Nothing is written unless every line is valid.** Each line is parsed, checked against the model and the
  ``[limits]``, its id must be a canonical UUID (a non-UUID id used to stall the vector indexer for every
  tenant), and ids may not repeat with different owners. The first problem is a ``ValidationError`` naming
  the line.
* **An id never changes owner.** An id that already exists under another tenant is refused (a copied id
  with ``api_key_id: "A"`` used to replace B's memory: the replicated ``put`` replaces by id).
* **With ``api_key_id``** (a tenant's import), every line must belong to that tenant or name none (it is
  then filled in).
* **What a line may leave out is filled in**: no ``id`` gets a new one, no ``created_at`` the time of the
  import, no ``updated_at`` its ``created_at`` (docs/python-api.md, "The JSONL format"). A line without an id
  is a new memory each time the file is imported; an export's lines carry theirs, so a restore is repeatable.
* **One write.** The memories go to the serving backend in one ``put_many`` call: one transaction on SQLite
  and PostgreSQL, so a failure or a ``kill -9`` leaves all or nothing there. Backends without transactions
  (Obsidian, Notion, HTTP) may keep a prefix after a failure; the import is then **resumable**: ids and
  timestamps are kept, so running the same file again writes the same memories, never duplicates.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import attrs

from memroute.config.limits import InputLimits
from memroute.config.serialization import memory_from_dict
from memroute.errors import MemrouteError, NotFoundError, ValidationError
from memroute.models import HistoryEntry, Memory, is_memory_id, new_memory_id, require_tenant, utcnow

if TYPE_CHECKING:
    from memroute.routing.manager import MemoryManager

__all__ = ["ImportReport", "import_memories", "parse_jsonl"]

_LOOKUP_BATCH = 500


@attrs.frozen(kw_only=True)
class ImportReport:
    """What an import did. ``imported`` memories were written in one call to the serving backend."""

    imported: int
    lines: int
    """Non-blank lines read (one memory each)."""
    api_key_id: str | None
    """The tenant every line belonged to (a tenant's import), or ``None`` (an operator's, any tenants)."""
    tenants: int
    """How many distinct tenants the memories belong to."""

    @property
    def count(self) -> int:
        return self.imported


def _line_error(number: int, message: str) -> ValidationError:
    return ValidationError(f"line {number}: {message}", [(f"line {number}", message)])


def _fill_in(data: dict[str, Any], now: datetime) -> None:
    """Give a line what an export always carries and a hand-written line may leave out: an id, and the
    timestamps (``created_at`` the import's time, ``updated_at`` the line's ``created_at``)."""
    if data.get("id") is None:
        data["id"] = new_memory_id()
    if data.get("created_at") is None:
        data["created_at"] = now
    if data.get("updated_at") is None:
        data["updated_at"] = data["created_at"]


def parse_jsonl(lines: Iterable[str], *, api_key_id: str | None = None,
                limits: InputLimits | None = None) -> list[tuple[int, Memory]]:
    """Every memory of ``lines`` with its line number, or the first problem as a ``ValidationError`` naming
    its line. A line's missing ``id``, ``created_at`` and ``updated_at`` are filled in. Nothing is written."""
    tenant = None if api_key_id is None else require_tenant(api_key_id)
    now = utcnow()
    limits = limits or InputLimits()
    parsed: list[tuple[int, Memory]] = []
    owners: dict[str, str] = {}
    for number, line in enumerate(lines, start=1):
        if not isinstance(line, str):
            raise _line_error(number, f"expected text, got {type(line).__name__}")
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _line_error(number, f"not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise _line_error(number, "JSON nested too deeply") from None
        if not isinstance(data, dict):
            raise _line_error(number, "expected a JSON object (one memory)")
        if tenant is not None:
            owner = data.get("api_key_id")
            if owner is None or owner == "":
                data["api_key_id"] = tenant
            elif owner != tenant:
                raise _line_error(number, "api_key_id: belongs to another tenant than the one importing")
        if tenant is None and data.get("api_key_id") in (None, ""):
            raise _line_error(number, "api_key_id: missing: a line names its tenant unless the import is for one "
                                      "tenant (--api-key KEY, api_key_id=...)")
        _fill_in(data, now)
        if not is_memory_id(data.get("id")):
            raise _line_error(number, f"id: expected a canonical UUID, got {data.get('id')!r:.60}")
        try:
            memory = memory_from_dict(data)
            limits.check(content=memory.content, metadata=memory.metadata)
        except MemrouteError as exc:
            raise _line_error(number, str(exc)) from None
        previous = owners.setdefault(memory.id, memory.api_key_id)
        if previous != memory.api_key_id:
            raise _line_error(number, f"id: {memory.id} appears earlier in the input with another api_key_id")
        parsed.append((number, memory))
    return parsed


def _refuse_foreign_ids(manager: MemoryManager, parsed: Sequence[tuple[int, Memory]], *,
                        tenant_scoped: bool) -> dict[str, Memory]:
    """An id that exists under another tenant is refused: an import never moves a memory between tenants. To a
    tenant's import (``tenant_scoped``) that id is a memory it cannot see, so the refusal is the 404 of a missing
    memory, which says nothing about whether the id exists; an operator's restore is told why. Returns the
    memories the import will replace, by id (their history entries say what they said before)."""
    replaced: dict[str, Memory] = {}
    for start in range(0, len(parsed), _LOOKUP_BATCH):
        chunk = parsed[start:start + _LOOKUP_BATCH]
        existing = manager.get_many([m.id for _, m in chunk])
        replaced.update(existing)
        for number, memory in chunk:
            stored = existing.get(memory.id)
            if stored is not None and stored.api_key_id != memory.api_key_id:
                if tenant_scoped:
                    raise NotFoundError(f"line {number}: Memory not found (id {memory.id})")
                raise _line_error(number, f"id: {memory.id} is already used by another memory (of another "
                                          "tenant); an import never moves a memory between tenants")
    return replaced


def import_memories(
    manager: MemoryManager,
    memories: Sequence[tuple[int, Memory]],
    *,
    api_key_id: str | None = None,
    on_written: Callable[[list[Memory]], Any] | None = None,
    progress: Callable[[int], None] | None = None,
) -> ImportReport:
    """Write already-validated ``(line, memory)`` pairs: refuse foreign ids, then one ``put_many`` with the
    history of each memory the import creates or changes (actor ``import``), in the same transaction where the
    backend can (SQLite, PostgreSQL), else right after."""
    replaced = _refuse_foreign_ids(manager, memories, tenant_scoped=api_key_id is not None)
    batch = [memory for _, memory in memories]
    changes = (HistoryEntry.of_change(replaced.get(m.id), m, actor="import") for m in batch)
    history = [entry for entry in changes if entry is not None] if manager.keeps_history else []
    count = manager.put_many(batch, history)
    if progress is not None:
        progress(len(batch))
    if on_written is not None and batch:
        on_written(batch)
    return ImportReport(imported=int(count), lines=len(batch), api_key_id=api_key_id,
                        tenants=len({m.api_key_id for m in batch}))
