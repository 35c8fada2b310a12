"""The storage protocol side of the service: what ``memroute serve`` answers under ``/api/storage`` so that
another process's ``http`` backend can use this deployment as its primary or as a fallback
(``docs/backends/http.md``, "memroute serve as the server").

It is backend-level on purpose: the caller's manager already generated ids, timestamps and upsert keys, and
replicates on its own, so these calls store exactly what they are given (``create`` with the caller's id,
``put`` of a whole memory) and search the primary's own index (keyword / recency with the caller's filters),
like any backend. Every call is tenant-checked: ``tenant`` is the key's tenant, or ``None`` for an admin key,
which may act on any tenant (and list all of them). Writes go through this deployment's manager (so its own
fallbacks get them) and its vector index.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any

from memroute.errors import NotFoundError, PermissionDeniedError, ValidationError
from memroute.interfaces import MemoryAccess
from memroute.models import (
    BackendHit,
    ListFilter,
    ListPage,
    Memory,
    MemoryPatch,
    NewMemory,
    SearchQuery,
    require_id,
    require_tenant,
)

__all__ = ["StorageAPI"]


class StorageAPI:
    """Backend-level, tenant-checked operations on a service (``mem.storage``)."""

    def __init__(self, service: Any) -> None:
        """``service``: the :class:`memroute.service.Memroute` (not imported: the service imports this)."""
        self._service = service
        self._manager = service._manager
        self._retrieval = service._retrieval

    @staticmethod
    def _check(tenant: str | None, owner: str | None) -> None:
        if tenant is not None and owner != tenant:
            raise PermissionDeniedError("this API key may only act on its own tenant")

    def _owned(self, memory_id: str, tenant: str | None) -> Memory | None:
        memory = self._manager.get(memory_id, api_key_id=tenant)
        if memory is None or (tenant is not None and memory.api_key_id != tenant):
            return None  # another tenant's id is a missing one
        return memory

    def _refuse_foreign(self, memory_id: str, owner: str) -> None:
        """Another tenant's id is a memory this caller cannot see: the 404 of a missing one (never a 403 or a
        409 that would tell the id exists)."""
        existing = self._manager.get(memory_id)
        if existing is not None and existing.api_key_id != owner:
            raise NotFoundError("Memory not found")

    def create(self, new: NewMemory, tenant: str | None) -> Memory:
        self._check(tenant, new.api_key_id)
        self._refuse_foreign(new.id, new.api_key_id)
        self._service._limits.check(content=new.content, metadata=new.metadata)
        self._service._quotas.check(new.api_key_id, [(new.content, new.metadata)])
        memory = self._manager.create(new)
        self._retrieval.on_written([memory])
        return memory

    def put(self, memory: Memory, tenant: str | None) -> None:
        self._check(tenant, memory.api_key_id)
        self._refuse_foreign(memory.id, memory.api_key_id)
        self._service._limits.check(content=memory.content, metadata=memory.metadata)
        self._service._quotas.check(memory.api_key_id, [(memory.content, memory.metadata)])
        self._manager.put(memory)
        self._retrieval.on_written([memory])

    def get(self, memory_id: str, tenant: str | None) -> Memory | None:
        return self._owned(memory_id, tenant)

    def update(self, memory_id: str, patch: MemoryPatch, tenant: str | None) -> Memory | None:
        owned = self._owned(memory_id, tenant)
        if owned is None:
            return None
        updated = self._manager.update(memory_id, patch, api_key_id=owned.api_key_id)
        if updated is not None:
            self._retrieval.on_written([updated])
        return updated

    def delete(self, memory_id: str, tenant: str | None) -> bool:
        owned = self._owned(memory_id, tenant)
        if owned is None:
            return False
        deleted = self._manager.delete(memory_id, api_key_id=owned.api_key_id)
        if deleted:
            self._retrieval.on_deleted(memory_id, owned.api_key_id)
        return deleted

    def list(self, filter: ListFilter, tenant: str | None) -> ListPage:
        if tenant is not None:
            if filter.api_key_id not in (None, tenant):
                raise PermissionDeniedError("this API key may only act on its own tenant")
            if filter.api_key_id is None:
                raise ValidationError("api_key_id: required for a tenant key", [("api_key_id", "required")])
        return self._manager.list(filter)

    def record_access(self, api_key_id: str, accesses: Mapping[str, MemoryAccess], tenant: str | None) -> int:
        """Write a batch of accesses another process's ``http`` backend coalesced, to this deployment's primary
        now (through its manager, as a telemetry call). Ids of another tenant are skipped by the backend."""
        owner = require_tenant(api_key_id)
        self._check(tenant, owner)
        for memory_id in accesses:
            require_id(memory_id)
        return int(self._manager.write_access(owner, accesses))

    def search(self, query: SearchQuery, tenant: str | None) -> builtins.list[BackendHit]:
        self._check(tenant, query.api_key_id)
        found: Any = self._manager.search(query)
        hits = getattr(found, "hits", found)
        return [hit for hit in hits if query.admits(hit.memory)][: query.limit]
