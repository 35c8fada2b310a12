"""Import from the system memroute re-implements: its SQLite ``memories`` table, read-only, into memroute.

The reference (OmniRoute's memory subsystem) keeps every memory in one SQLite table (schema in
docs/omniroute-compatibility.md, "Importing an OmniRoute database"). Each row's ``api_key_id`` becomes a
memroute tenant; id, type, key, content, metadata, session, timestamps, expiry and access telemetry are kept.

The reference's quirks, and what the import does with them:

* **Rows without an owner** (``api_key_id = ""``: its REST and MCP surfaces allowed them) cannot be carried:
  memroute has no memory outside a tenant. ``unowned_tenant`` names a tenant to give them to.
* **Duplicate keys**: the reference never enforced ``(api_key_id, key)`` (no unique index), memroute does.
  ``duplicates="newest"`` keeps the newest row of each pair (the one the reference's own upsert updates) and
  reports the others as superseded; ``"keep"`` carries them all, the older ones under ``<key>#<id prefix>``.
* **No key** (``NULL`` or ``""``, never upserted by the reference) gets ``omniroute:<id>``: unique, so no two
  such rows merge.
* **Metadata** that is not a JSON object reads as ``{}`` (as the reference reads it); the import says how many.
  camelCase fields inside it (``extractedAt``) are the user's data and are kept as they are.
* **Expired rows** are carried with their expiry (retrieval hides them, as the reference's did), or left out
  with ``skip_expired``.
* ``""`` sessions become "no session"; SQLite's ``datetime('now')`` timestamps (no ``T``, no zone) are UTC.

All or nothing: every row is read and checked before the first write. A row that cannot be carried (no
owner, empty content, an unknown type, an unreadable timestamp, over the ``[limits]``) stops a real import
with a :class:`~memroute.errors.ValidationError` listing why, unless ``skip_uncarried`` accepts leaving them
out; the dry run reports the same without writing. The write itself is :func:`memroute.service.transfer.
import_memories`: foreign ids refused, one ``put_many`` (one transaction on SQLite and PostgreSQL). Ids are
kept (a row whose id is not a UUID gets a UUID derived from it), so running the same import again writes the
same memories, never duplicates.
"""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

from memroute.config.limits import InputLimits
from memroute.errors import MemrouteError, ValidationError
from memroute.models import Memory, MemoryType, as_utc, is_memory_id, require_tenant, utcnow
from memroute.service.transfer import import_memories

if TYPE_CHECKING:
    import apsw

    from memroute.routing.manager import MemoryManager

__all__ = ["DUPLICATE_POLICIES", "OmnirouteImportReport", "SkippedRow", "import_omniroute"]

DUPLICATE_POLICIES: Final = ("newest", "keep")
Duplicates = Literal["newest", "keep"]
Progress = Callable[[str, int, int], None]
"""``progress(phase, done, total)``: phase ``"read"`` (rows checked) then ``"write"`` (memories written)."""

_ID_NAMESPACE: Final = uuid.UUID("6f1d2c3e-1f0a-5b7e-9a41-0c6e4d2b8a77")
_LISTED: Final = 100
"""At most this many skipped rows are listed one by one in a report (every one is counted)."""
_PROGRESS_EVERY: Final = 1000

# Column names of the modern table (migration 015 and later) and the legacy camelCase ``memory`` table.
_MODERN: Final = {"id": "id", "api_key_id": "api_key_id", "session_id": "session_id", "type": "type",
                  "key": "key", "content": "content", "metadata": "metadata", "created_at": "created_at",
                  "updated_at": "updated_at", "expires_at": "expires_at", "access_count": "access_count",
                  "last_accessed_at": "last_accessed_at"}
_LEGACY: Final = {**_MODERN, "api_key_id": "apiKeyId", "session_id": "sessionId", "created_at": "createdAt",
                  "updated_at": "updatedAt", "expires_at": "expiresAt", "access_count": "accessCount",
                  "last_accessed_at": "lastAccessedAt"}
_REQUIRED: Final = ("id", "api_key_id", "type", "content")


@attrs.frozen(kw_only=True)
class SkippedRow:
    """One row of the reference's table that is not carried, and why."""

    id: str
    api_key_id: str
    key: str
    reason: str


@attrs.frozen(kw_only=True)
class OmnirouteImportReport:
    """What an import from the reference's database did (or, with ``dry_run``, would do)."""

    source: str
    """The database file read."""
    table: str
    """``memories`` (the reference since migration 015), or the legacy ``memory`` table."""
    dry_run: bool
    rows: int
    """Rows in the reference's table."""
    carried: int
    """Rows that are (or would be) stored in memroute."""
    imported: int
    """Memories written: ``carried`` after a real import, 0 after a dry run."""
    tenants: dict[str, int]
    """Carried memories per tenant (the reference's ``api_key_id``, or ``unowned_tenant``)."""
    by_type: dict[str, int]
    expired: int
    """Carried rows already past their expiry (kept, hidden from retrieval as in the reference)."""
    keys_generated: int
    """Rows without a key, given ``omniroute:<id>``."""
    keys_renamed: int
    """Older duplicates carried under ``<key>#<id prefix>`` (``duplicates="keep"``)."""
    ids_derived: int
    """Rows whose id was not a UUID, given one derived from it (the same on every run)."""
    metadata_unreadable: int
    """Rows whose metadata was not a JSON object, carried with ``{}`` (the reference read them as ``{}``)."""
    replaces: int
    """Memories already in memroute that carried rows replace (same id, or same tenant and key)."""
    skipped: int
    """Rows not carried; ``skipped_by_reason`` says why, ``skipped_rows`` lists the first 100."""
    skipped_by_reason: dict[str, int]
    skipped_rows: tuple[SkippedRow, ...]


@attrs.frozen(kw_only=True)
class _Reading:
    table: str
    rows: int
    memories: list[tuple[int, Memory]]
    skipped: list[SkippedRow]
    expired: int
    keys_generated: int
    keys_renamed: int
    ids_derived: int
    metadata_unreadable: int


class _Uncarried(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _open_readonly(path: str | os.PathLike[str]) -> apsw.Connection:
    import apsw

    target = Path(path).expanduser()
    if not target.is_file():
        raise ValidationError(f"{target}: no such file (give the reference's SQLite database, e.g. "
                              "~/.omniroute/storage.sqlite)", [("path", "not found")])
    try:
        connection = apsw.Connection(str(target), flags=apsw.SQLITE_OPEN_READONLY)
        connection.execute("SELECT count(*) FROM sqlite_schema").fetchall()
    except apsw.Error as exc:
        raise ValidationError(f"{target}: not a readable SQLite database ({exc})", [("path", "not SQLite")]) from None
    return connection


def _columns(connection: apsw.Connection) -> tuple[str, dict[str, str]]:
    tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    table, names = ("memories", _MODERN) if "memories" in tables else ("memory", _LEGACY)
    if table not in tables:
        raise ValidationError("the database has no memories table (is it the reference's database?)",
                              [("path", "no memories table")])
    present = {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}
    missing = [names[field] for field in _REQUIRED if names[field] not in present]
    if missing:
        raise ValidationError(f"table {table}: missing column(s) {', '.join(missing)}",
                              [(f"{table}.{name}", "missing") for name in missing])
    return table, {field: column for field, column in names.items() if column in present}


def _rows(connection: apsw.Connection, table: str, columns: Mapping[str, str]) -> Iterator[dict[str, Any]]:
    fields = list(columns)
    select = ", ".join(f'"{columns[f]}"' for f in fields)
    for row in connection.execute(f'SELECT rowid, {select} FROM "{table}" ORDER BY rowid'):
        yield {"rowid": row[0], **dict(zip(fields, row[1:], strict=True))}


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _when(value: object, field: str) -> datetime | None:
    if value is None or value == "":
        return None
    try:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            # Some writers stored epoch milliseconds; seconds would be before 1971 at this size.
            return datetime.fromtimestamp(value / 1000 if value > 10**11 else value, tz=timezone.utc)
        return as_utc(str(value), field)
    except (ValidationError, ValueError, OverflowError, OSError):
        raise _Uncarried(f"{field}: not a timestamp ({_text(value)[:40]!r})") from None


def _metadata(value: object) -> tuple[dict[str, Any], bool]:
    """The row's metadata and whether it was readable (the reference reads anything else as ``{}``)."""
    if value is None or value == "":
        return {}, True
    try:
        data = json.loads(value) if isinstance(value, (str, bytes)) else None
    except (ValueError, RecursionError):
        data = None
    return (data, True) if isinstance(data, dict) else ({}, False)


def _memory_id(value: str) -> tuple[str, bool]:
    if is_memory_id(value):
        return value, False
    try:
        return str(uuid.UUID(value.strip())), False  # upper case, braces: the same UUID
    except ValueError:
        return str(uuid.uuid5(_ID_NAMESPACE, value)), True


def _memory(row: Mapping[str, Any], tenant: str, limits: InputLimits) -> tuple[Memory, bool, bool, bool]:
    """The row as a memory, and whether its key was generated, its id derived, its metadata unreadable."""
    memory_id, derived = _memory_id(_text(row["id"]))
    key = _text(row.get("key")).strip()
    generated = not key
    content = _text(row["content"])
    if not content.strip():
        raise _Uncarried("content: empty")
    try:
        kind = MemoryType(_text(row["type"]).strip().lower())
    except ValueError:
        raise _Uncarried(f"type: {_text(row['type'])[:40]!r} is not factual, episodic, procedural or "
                         "semantic") from None
    created = _when(row.get("created_at"), "created_at") or utcnow()
    updated = _when(row.get("updated_at"), "updated_at") or created
    metadata, readable = _metadata(row.get("metadata"))
    count = row.get("access_count")
    try:
        memory = Memory(
            id=memory_id, api_key_id=tenant, session_id=_text(row.get("session_id")) or None, type=kind,
            key=f"omniroute:{memory_id}" if generated else key, content=content, metadata=metadata,
            # A row edited by hand can say it was updated before it was created; memroute's never does.
            created_at=created, updated_at=max(updated, created), expires_at=_when(row.get("expires_at"), "expires_at"),
            access_count=count if isinstance(count, int) and count >= 0 else 0,
            last_accessed_at=_when(row.get("last_accessed_at"), "last_accessed_at"),
        )
        limits.check(content=memory.content, metadata=memory.metadata)
    except MemrouteError as exc:
        raise _Uncarried(" ".join(str(exc).split())) from None
    return memory, generated, derived, not readable


def _reason_kind(reason: str) -> str:
    """The part of a reason the counts group by (``"type"``, ``"no owner"``, ...)."""
    return reason.split(":", 1)[0]


def _read(
    path: str | os.PathLike[str],
    *,
    limits: InputLimits | None = None,
    unowned_tenant: str | None = None,
    duplicates: Duplicates = "newest",
    skip_expired: bool = False,
    progress: Progress | None = None,
) -> _Reading:
    """Read and check every row of the reference's database (opened read-only; nothing is written there)."""
    if duplicates not in DUPLICATE_POLICIES:
        raise ValidationError(f"duplicates: expected one of {', '.join(DUPLICATE_POLICIES)}, got {duplicates!r}",
                              [("duplicates", "invalid")])
    unowned = None if unowned_tenant is None else require_tenant(unowned_tenant)
    limits = limits or InputLimits()
    connection = _open_readonly(path)
    try:
        table, columns = _columns(connection)
        total = int(connection.execute(f'SELECT count(*) FROM "{table}"').fetchall()[0][0] or 0)
        kept: dict[tuple[str, str], tuple[int, Memory]] = {}
        extra: list[tuple[int, Memory]] = []
        skipped: list[SkippedRow] = []
        notes: dict[str, tuple[bool, bool, bool]] = {}  # per memory: key generated, id derived, metadata unreadable
        renamed = 0
        now = utcnow()
        done = 0
        for row in _rows(connection, table, columns):
            done += 1
            if progress is not None and done % _PROGRESS_EVERY == 0:
                progress("read", done, total)
            owner = _text(row["api_key_id"]).strip()
            tenant = owner or unowned
            where = SkippedRow(id=_text(row["id"]), api_key_id=owner, key=_text(row.get("key")), reason="")
            try:
                if tenant is None:
                    raise _Uncarried("no owner: api_key_id is empty (memroute keeps every memory under a tenant; "
                                     "--unowned-tenant NAME carries these)")
                try:
                    require_tenant(tenant)
                except ValidationError as exc:
                    raise _Uncarried(f"api_key_id: {exc}") from None
                memory, generated, derived, unreadable = _memory(row, tenant, limits)
                if memory.id in notes:  # only a table without the reference's PRIMARY KEY can repeat an id
                    raise _Uncarried(f"id: {memory.id} repeats an earlier row's id")
                if skip_expired and memory.expires_at is not None and memory.expires_at <= now:
                    raise _Uncarried("expired: past its expiry (--skip-expired)")
            except _Uncarried as exc:
                skipped.append(attrs.evolve(where, reason=exc.reason))
                continue
            notes[memory.id] = (generated, derived, unreadable)
            slot = (memory.api_key_id, memory.key)
            earlier = kept.get(slot)
            if earlier is None:
                kept[slot] = (row["rowid"], memory)
                continue
            newer, older = sorted((earlier, (row["rowid"], memory)), key=_recency, reverse=True)
            kept[slot] = newer
            if duplicates == "keep":
                extra.append((older[0], attrs.evolve(older[1], key=f"{older[1].key}#{older[1].id[:8]}")))
                renamed += 1
            else:
                skipped.append(SkippedRow(id=older[1].id, api_key_id=older[1].api_key_id, key=older[1].key,
                                          reason=f"superseded: a newer row ({newer[1].id}) has the same "
                                                 "api_key_id and key"))
        if progress is not None:
            progress("read", done, total)
    finally:
        connection.close()
    memories = sorted([*kept.values(), *extra], key=lambda item: item[0])
    carried = [notes[m.id] for _, m in memories]  # the counts are of carried rows, never of superseded ones
    return _Reading(table=table, rows=total, memories=memories, skipped=skipped,
                    expired=sum(1 for _, m in memories if m.expires_at is not None and m.expires_at <= now),
                    keys_generated=sum(n[0] for n in carried), keys_renamed=renamed,
                    ids_derived=sum(n[1] for n in carried), metadata_unreadable=sum(n[2] for n in carried))


def _recency(item: tuple[int, Memory]) -> tuple[datetime, datetime, int]:
    # The reference's upsert updates the newest row by created_at; updated_at and then rowid break ties.
    rowid, memory = item
    return memory.created_at, memory.updated_at, rowid


def _replaced(manager: MemoryManager, memories: list[tuple[int, Memory]]) -> int:
    """How many carried memories replace a stored one (the same id, or the same tenant and key). Reads each
    importing tenant's stored memories once: an import usually lands in empty or small tenants, so this costs
    far less than a lookup per imported row."""
    by_tenant: dict[str, list[Memory]] = {}
    for _, memory in memories:
        by_tenant.setdefault(memory.api_key_id, []).append(memory)
    count = 0
    for tenant, carried in by_tenant.items():
        ids: set[str] = set()
        keys: set[str] = set()
        for stored in manager.iter_all(tenant):
            ids.add(stored.id)
            keys.add(stored.key)
        if ids:
            count += sum(1 for m in carried if m.id in ids or m.key in keys)
    return count


def import_omniroute(
    manager: MemoryManager,
    path: str | os.PathLike[str],
    *,
    dry_run: bool = False,
    skip_uncarried: bool = False,
    unowned_tenant: str | None = None,
    duplicates: Duplicates = "newest",
    skip_expired: bool = False,
    limits: InputLimits | None = None,
    on_written: Callable[[list[Memory]], Any] | None = None,
    progress: Progress | None = None,
) -> OmnirouteImportReport:
    """Import the reference's database at ``path`` (see the module docstring); ``dry_run`` writes nothing."""
    reading = _read(path, limits=limits, unowned_tenant=unowned_tenant, duplicates=duplicates,
                             skip_expired=skip_expired, progress=progress)
    blocking = [s for s in reading.skipped if not s.reason.startswith(("superseded", "expired"))]
    if blocking and not dry_run and not skip_uncarried:
        reasons = Counter(_reason_kind(s.reason) for s in blocking)
        summary = ", ".join(f"{kind}: {n}" for kind, n in reasons.most_common())
        first = blocking[0]
        raise ValidationError(
            f"{len(blocking)} row(s) cannot be carried ({summary}); nothing was written. The first: id "
            f"{first.id}: {first.reason}. Run with a dry run to list them, or accept leaving them out "
            "(--skip-uncarried / skipUncarried=true)",
            [(f"row {s.id}", s.reason) for s in blocking[:_LISTED]],
        )
    batch = [memory for _, memory in reading.memories]
    replaces = _replaced(manager, reading.memories) if batch else 0
    imported = 0
    if not dry_run and batch:
        report = import_memories(manager, reading.memories, on_written=on_written,
                                 progress=None if progress is None else lambda n: progress("write", n, len(batch)))
        imported = report.imported
    return OmnirouteImportReport(
        source=str(Path(path).expanduser()), table=reading.table, dry_run=dry_run, rows=reading.rows,
        carried=len(batch), imported=imported,
        tenants=dict(sorted(Counter(m.api_key_id for m in batch).items())),
        by_type=dict(sorted(Counter(m.type.value for m in batch).items())),
        expired=reading.expired, keys_generated=reading.keys_generated, keys_renamed=reading.keys_renamed,
        ids_derived=reading.ids_derived, metadata_unreadable=reading.metadata_unreadable, replaces=replaces,
        skipped=len(reading.skipped),
        skipped_by_reason=dict(Counter(_reason_kind(s.reason) for s in reading.skipped).most_common()),
        skipped_rows=tuple(reading.skipped[:_LISTED]),
    )
