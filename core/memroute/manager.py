"""MemoryManager: routes every call to the primary backend with ordered fallbacks.

FOUNDATION STUB — replaced by the full manager (durable outbox, circuit breaker, scheduled health checks).
The public method signatures below are the contract the service relies on.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from memroute.interfaces import MemoryBackend
from memroute.models import BackendHit, ListFilter, ListPage, Memory, MemoryPatch, NewMemory, SearchQuery
from memroute.settings import ManagerSettings

__all__ = ["ManagedSearch", "MemoryManager"]


@attrs.frozen(kw_only=True)
class ManagedSearch:
    """A backend search leg as the manager served it."""

    hits: list[BackendHit]
    backend: str
    fallback: bool = False
    error: str | None = None
    """Why the primary did not serve (when ``fallback``)."""


class MemoryManager:
    def __init__(
        self,
        primary: MemoryBackend,
        fallbacks: Sequence[MemoryBackend] = (),
        *,
        settings: ManagerSettings | None = None,
        outbox_path: str | Path = ":memory:",
        prepare_connection: Any = None,
    ) -> None:
        self.primary = primary
        self.fallbacks = list(fallbacks)
        self.settings = settings or ManagerSettings()

    @property
    def backends(self) -> list[MemoryBackend]:
        return [self.primary, *self.fallbacks]

    def initialize(self) -> None:
        for backend in self.backends:
            backend.initialize()

    def close(self) -> None:
        for backend in self.backends:
            backend.close()

    def __enter__(self) -> MemoryManager:
        self.initialize()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def create(self, new: NewMemory) -> Memory:
        return self.primary.create(new)

    def put(self, memory: Memory) -> None:
        self.primary.put(memory)

    def get(self, memory_id: str) -> Memory | None:
        return self.primary.get(memory_id)

    def get_many(self, memory_ids: Sequence[str]) -> dict[str, Memory]:
        return self.primary.get_many(memory_ids)

    def update(self, memory_id: str, patch: MemoryPatch) -> Memory | None:
        return self.primary.update(memory_id, patch)

    def delete(self, memory_id: str) -> bool:
        return self.primary.delete(memory_id)

    def list(self, filter: ListFilter) -> ListPage:
        return self.primary.list(filter)

    def search(self, query: SearchQuery) -> ManagedSearch:
        return ManagedSearch(hits=self.primary.search(query), backend=self.primary.name)

    def flush(self, timeout: float | None = None) -> bool:
        """Drain the outbox now; True when it is empty."""
        return True

    def health(self) -> dict[str, Any]:
        return {
            "backends": [
                {"name": b.name, "type": b.type_name, "role": "primary" if b is self.primary else "fallback",
                 **attrs.asdict(b.health())}
                for b in self.backends
            ],
            "outbox": {"depth": 0},
        }
