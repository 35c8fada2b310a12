"""The PostgreSQL backend's memory history (capability ``history``): the statements on ``memory_history``
(migration 4), each in a transaction opened for the tenant, so row-level security is the second wall here too.
The backend inserts a write's entries in the write's own transaction (:class:`~memroute.interfaces.RecordedWrites`,
:class:`~memroute.interfaces.RecordedImports`) with :attr:`HistorySql.insert`, one tenant per statement."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from memroute.models import HistoryEntry

__all__ = ["HistorySql", "columns_of", "to_entry"]

_COLUMNS: Final = ("id, memory_id, api_key_id, event, actor, at, old_content, new_content, old_key, new_key, "
                   "old_type, new_type")


class HistorySql:
    """The history statements of one schema."""

    def __init__(self, schema: str) -> None:
        table = f'"{schema}".memory_history'
        memories = f'"{schema}".memories'
        # Set-based, as put_many: one tenant's entries as parallel arrays unnested in the server (one statement
        # for an import's thousands of entries). The owner is one bound value, so on Citus the statement goes to
        # the tenant's shard. An entry already stored (same id) is left as it is.
        self.insert = (
            f"INSERT INTO {table} (id, api_key_id, memory_id, event, actor, at, old_content, new_content, old_key, "
            "new_key, old_type, new_type) SELECT id, %s::text, memory_id, event, actor, at, old_content, "
            "new_content, old_key, new_key, old_type, new_type FROM unnest(%s::text[], %s::text[], %s::text[], "
            "%s::text[], %s::timestamptz[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], "
            "%s::text[]) AS e(id, memory_id, event, actor, at, old_content, new_content, old_key, new_key, "
            "old_type, new_type) ON CONFLICT (api_key_id, id) DO NOTHING")
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


def columns_of(api_key_id: str, entries: Sequence[HistoryEntry]) -> list[Any]:
    """The parameters of :attr:`HistorySql.insert` for entries of ``api_key_id`` (the caller groups them by
    tenant): the owner, then one array per column."""
    return [api_key_id, [e.id for e in entries], [e.memory_id for e in entries], [e.event.value for e in entries],
            [e.actor for e in entries], [e.at for e in entries], [e.old_content for e in entries],
            [e.new_content for e in entries], [e.old_key for e in entries], [e.new_key for e in entries],
            [e.old_type for e in entries], [e.new_type for e in entries]]


def to_entry(row: Sequence[Any]) -> HistoryEntry:
    (entry_id, memory_id, api_key_id, event, actor, at, old_content, new_content, old_key, new_key, old_type,
     new_type) = row
    return HistoryEntry(id=entry_id, memory_id=memory_id, api_key_id=api_key_id, event=event, actor=actor, at=at,
                        old_content=old_content, new_content=new_content, old_key=old_key, new_key=new_key,
                        old_type=old_type, new_type=new_type)
