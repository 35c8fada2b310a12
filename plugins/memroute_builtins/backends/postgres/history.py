"""The PostgreSQL backend's memory history (capability ``history``): the statements on ``memory_history``
(migration 4), each in a transaction opened for the tenant, so row-level security is the second wall here too."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from memroute.models import HistoryEntry

__all__ = ["HistorySql", "rows_of", "to_entry"]

_COLUMNS: Final = ("id, memory_id, api_key_id, event, actor, at, old_content, new_content, old_key, new_key, "
                   "old_type, new_type")


class HistorySql:
    """The history statements of one schema."""

    def __init__(self, schema: str) -> None:
        table = f'"{schema}".memory_history'
        memories = f'"{schema}".memories'
        self.insert = (f"INSERT INTO {table} ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                       "ON CONFLICT (api_key_id, id) DO NOTHING")
        self.select = (f"SELECT {_COLUMNS} FROM {table} WHERE api_key_id = %s AND memory_id = %s "
                       "ORDER BY at, seq")
        self._purge = (f"DELETE FROM {table} WHERE (api_key_id, memory_id) IN ("
                       f"SELECT h.api_key_id, h.memory_id FROM {table} h WHERE {{owner}} NOT EXISTS ("
                       f"SELECT 1 FROM {memories} m WHERE m.api_key_id = h.api_key_id AND m.id = h.memory_id) "
                       "GROUP BY h.api_key_id, h.memory_id HAVING max(h.at) < %s)")

    def purge(self, api_key_id: str | None, before: datetime) -> tuple[str, list[Any]]:
        """The statement removing the history of deleted memories whose last entry is before ``before``."""
        if api_key_id is None:
            return self._purge.format(owner=""), [before]
        return self._purge.format(owner="h.api_key_id = %s AND"), [api_key_id, before]


def rows_of(entries: Sequence[HistoryEntry]) -> list[tuple[Any, ...]]:
    return [(e.id, e.memory_id, e.api_key_id, e.event.value, e.actor, e.at, e.old_content, e.new_content,
             e.old_key, e.new_key, e.old_type, e.new_type) for e in entries]


def to_entry(row: Sequence[Any]) -> HistoryEntry:
    (entry_id, memory_id, api_key_id, event, actor, at, old_content, new_content, old_key, new_key, old_type,
     new_type) = row
    return HistoryEntry(id=entry_id, memory_id=memory_id, api_key_id=api_key_id, event=event, actor=actor, at=at,
                        old_content=old_content, new_content=new_content, old_key=old_key, new_key=new_key,
                        old_type=old_type, new_type=new_type)
