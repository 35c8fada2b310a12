"""The SQLite backend's memory history (capability ``history``): the statements on ``memory_history`` (schema
migration 2) and row conversion. Kept apart from the backend class so it reads on its own."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

import apsw

from memroute.models import HistoryEntry
from memroute_builtins.backends.sqlite.schema import format_ts, parse_ts

__all__ = ["append", "purge", "read"]

_COLUMNS: Final = ("id, memory_id, api_key_id, event, actor, at, old_content, new_content, old_key, new_key, "
                   "old_type, new_type")
_INSERT: Final = (f"INSERT INTO memory_history({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                  "ON CONFLICT(id) DO NOTHING")
_SELECT: Final = (f"SELECT {_COLUMNS} FROM memory_history WHERE api_key_id = ? AND memory_id = ? "
                  "ORDER BY at, history_rowid")


def append(connection: apsw.Connection, entries: Sequence[HistoryEntry]) -> None:
    """Insert ``entries`` inside the caller's write transaction (an entry already stored is left as it is)."""
    connection.executemany(_INSERT, [
        (e.id, e.memory_id, e.api_key_id, e.event.value, e.actor, format_ts(e.at), e.old_content, e.new_content,
         e.old_key, e.new_key, e.old_type, e.new_type) for e in entries])


def read(connection: apsw.Connection, api_key_id: str, memory_id: str) -> list[HistoryEntry]:
    """The tenant's entries of one memory, oldest first."""
    return [_entry(row) for row in connection.execute(_SELECT, (api_key_id, memory_id)).fetchall()]


def purge(connection: apsw.Connection, api_key_id: str | None, before: datetime) -> int:
    """Remove the history of each memory (of one tenant, or all) that no longer exists and whose last entry was
    recorded before ``before``."""
    owner = "" if api_key_id is None else " AND h.api_key_id = ?"
    bindings: list[Any] = [] if api_key_id is None else [api_key_id]
    connection.execute(
        "DELETE FROM memory_history WHERE (api_key_id, memory_id) IN ("
        f"SELECT h.api_key_id, h.memory_id FROM memory_history h WHERE 1 = 1{owner} "
        "AND NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = h.memory_id AND m.api_key_id = h.api_key_id) "
        "GROUP BY h.api_key_id, h.memory_id HAVING max(h.at) < ?)", [*bindings, format_ts(before)])
    return int(connection.changes())


def _entry(row: Sequence[Any]) -> HistoryEntry:
    (entry_id, memory_id, api_key_id, event, actor, at, old_content, new_content, old_key, new_key, old_type,
     new_type) = row
    return HistoryEntry(id=entry_id, memory_id=memory_id, api_key_id=api_key_id, event=event, actor=actor,
                        at=parse_ts(at), old_content=old_content, new_content=new_content, old_key=old_key,
                        new_key=new_key, old_type=old_type, new_type=new_type)
