"""The history part of the service: reading a memory's history, and recording each change the service makes.

Every write of the service (add, update, delete, clear, import, and what the pipeline writes through them:
observe's facts, consolidation, summarization, prune) records one :class:`~memroute.models.HistoryEntry` per
memory changed, through the manager, on the first backend that keeps history
(:meth:`memroute.routing.manager.MemoryManager.append_history`). An add, update or delete on a primary that records
history in its writes (:class:`~memroute.interfaces.RecordedWrites`: SQLite, PostgreSQL) writes its entry in its own
transaction (``MemoryManager.create_recorded`` / ``update_recorded`` / ``delete_recorded``; the write fails with
it). Otherwise recording follows the write: the change is stored first, and a history entry that cannot be stored
is logged, never a reason to fail the write.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from memroute.errors import MemrouteError
from memroute.models import HistoryEntry, HistoryEvent, Memory, require_memory_id, require_tenant
from memroute.reports import HistoryReport
from memroute.service.base import ServiceBase

__all__ = ["HistoryMethods"]

log = logging.getLogger("memroute.service")


class HistoryMethods(ServiceBase):
    """``history`` and the recording helpers of :class:`~memroute.service.Memroute`."""

    def history(self, memory_id: str, *, api_key_id: str) -> HistoryReport | None:
        """The history of the memory ``memory_id`` of ``api_key_id``: every recorded change (created, updated,
        superseded, deleted; by which actor; old and new content, key and type; when), oldest first, with the
        memory as it is now. A deleted memory's history stays readable by its tenant (until a prune with
        ``delete_after_days`` removes it; see docs/pipeline.md, "History"). ``None`` when the tenant has no such
        memory and no history of one: another tenant's id answers exactly like a missing one. A malformed id
        raises :class:`~memroute.errors.ValidationError`."""
        memory_id = require_memory_id(memory_id)
        tenant = require_tenant(api_key_id)
        current = self._manager.get(memory_id, api_key_id=tenant)
        current = current if current is not None and current.api_key_id == tenant else None
        entries = tuple(self._manager.history(tenant, memory_id)) if self._manager.keeps_history else ()
        if current is None and not entries:
            return None
        return HistoryReport(memory_id=memory_id, api_key_id=tenant, current=current, entries=entries,
                             recorded=self._manager.keeps_history)

    def _record(self, changes: Iterable[tuple[Memory | None, Memory | None, str, HistoryEvent | None]]) -> None:
        """Record ``(before, after, actor, event)`` changes (no-op ones are skipped) when history is kept."""
        if not self._manager.keeps_history:
            return
        entries = [entry for before, after, actor, event in changes
                   if (entry := HistoryEntry.of_change(before, after, actor=actor, event=event)) is not None]
        if entries:
            self._manager.append_history(entries)

    def _record_one(self, before: Memory | None, after: Memory | None, actor: str,
                    event: HistoryEvent | None = None) -> None:
        self._record([(before, after, actor, event)])

    def _priors_by_key(self, wanted: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Memory | None]:
        """The memories an upsert of each ``(tenant, key)`` would change (``None``: it would create one), read
        only when history is kept: the entry of an upsert says what the memory said before."""
        if not self._manager.keeps_history:
            return {}
        priors: dict[tuple[str, str], Memory | None] = {}
        try:
            for tenant, key in wanted:
                if (tenant, key) not in priors:
                    found = self._manager.get_by_key(tenant, key)
                    priors[(tenant, key)] = found if found is not None and found.api_key_id == tenant else None
        except MemrouteError as exc:  # the write goes on; only its history is lost (and said so)
            log.warning("memroute: reading memories before a write failed (%s); its history is not recorded", exc)
            return {}
        return priors
