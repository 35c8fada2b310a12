"""The narrow port the conversation pipeline works against: the service operations it needs, nothing more.

:class:`memroute.service.Memroute` satisfies it; the service builds the pipeline (its composition root) and
hands itself in, so the pipeline never imports the service and there is no import cycle between them.
Everything the pipeline writes goes through these calls, so it is validated, indexed for vector search and
replicated to fallbacks like any other write.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, Protocol

from memroute.config.settings import MemorySettings
from memroute.models import HistoryEvent, Memory, MemoryType, SearchResult

__all__ = ["MemoryStore"]


class MemoryStore(Protocol):
    """The tenant-scoped memory operations the pipeline uses (see :class:`memroute.service.Memroute`)."""

    def add(
        self,
        *,
        api_key_id: str,
        content: str,
        key: str | None = None,
        type: MemoryType | str = MemoryType.FACTUAL,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        expires_at: datetime | str | None = None,
        actor: str = "api",
        history_event: HistoryEvent | str | None = None,
    ) -> Memory:
        """Upsert on ``(api_key_id, key)``; ``actor`` (and ``history_event``) go into the memory's history."""

    def update(self, memory_id: str, *, api_key_id: str, actor: str = "api",
               history_event: HistoryEvent | str | None = None, **changes: Any) -> Memory | None:
        """Change fields of one memory of ``api_key_id``; ``None`` when it has no such memory."""

    def delete(self, memory_id: str, *, api_key_id: str, actor: str = "api") -> bool:
        """Delete one memory of ``api_key_id``; False when it has no such memory."""

    def get_by_key(self, key: str, *, api_key_id: str) -> Memory | None:
        """The memory of ``api_key_id`` with exactly this key, or ``None``."""

    def search(
        self,
        query: str,
        *,
        api_key_id: str,
        strategy: str | None = None,
        limit: int | None = None,
        max_tokens: int | None = None,
        session_id: str | None = None,
        type: MemoryType | str | None = None,
        record_access: bool = True,
        now: datetime | str | None = None,
    ) -> SearchResult:
        """Ranked memories of ``api_key_id`` for ``query`` (each counted as an access unless
        ``record_access=False``); a time the query names is relative to ``now`` (default the clock)."""

    def record_access(self, memory_ids: Iterable[str], *, api_key_id: str) -> None:
        """Count one access of each of these memories of ``api_key_id`` (in the background)."""

    def export(self, api_key_id: str) -> Iterator[Memory]:
        """Every memory of ``api_key_id``, oldest first."""

    def export_all(self) -> Iterator[Memory]:
        """Every memory of every tenant, oldest first (``prune_all``)."""

    def memory_settings(self) -> MemorySettings:
        """The ``[memory]`` settings in effect now (the configured ones with the runtime overrides): the
        pipeline reads ``enabled``, ``max_tokens``, ``strategy``, ``retention_days`` and typed decay here on
        every call, never from the file settings it was built with."""
