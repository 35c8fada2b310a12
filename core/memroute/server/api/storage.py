"""``/api/storage``: the memroute HTTP memory protocol (``docs/backends/http.md``), so that another process's
``http`` backend can use this deployment with ``base_url = "http://host:8765/api/storage"`` and no endpoint
mapping. Tenant keys act on their tenant; admin keys on any (an app serving many tenants uses one)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import attrs
from fastapi import Query, Request

from memroute.errors import NotFoundError
from memroute.interfaces import MemoryAccess
from memroute.models import (
    BackendHit,
    ListFilter,
    Memory,
    MemoryPatch,
    MemoryType,
    NewMemory,
    SearchQuery,
    as_utc,
)
from memroute.server.api import models as m
from memroute.server.api.memory import MEMORY_EXAMPLE, MemoryModel, ok
from memroute.server.auth import CurrentPrincipal, Principal, ScopedRouter
from memroute.server.schema import wire_model

router = ScopedRouter(prefix="/api/storage", tags=["storage protocol"])


@attrs.frozen(kw_only=True)
class StoragePatch:
    """The changed fields plus ``now`` (the new ``updated_at``); ``null`` clears session / expiry."""

    content: str | None = None
    key: str | None = None
    type: MemoryType | None = None
    session_id: str | None = None
    metadata: dict[str, Any] | None = None
    expires_at: datetime | None = None
    now: datetime | None = None


@attrs.frozen(kw_only=True)
class StorageAccess:
    """Accesses of one memory, coalesced by the caller: ``count`` of them, the latest at ``at``."""

    id: str = attrs.field(metadata={"min_length": 1, "max_length": 256})
    count: int = attrs.field(metadata={"ge": 1, "le": 1_000_000})
    at: datetime


@attrs.frozen(kw_only=True)
class StorageAccessBatch:
    """One tenant's batched accesses (``access_count``, ``last_accessed_at``), from an ``http`` backend."""

    api_key_id: str = attrs.field(metadata={"min_length": 1, "max_length": 256})
    accesses: tuple[StorageAccess, ...] = attrs.field(metadata={"max_length": 10_000})


@attrs.frozen(kw_only=True)
class StorageAccessResult:
    updated: int
    """Rows updated (ids of another tenant, or of no memory, are skipped)."""


@attrs.frozen(kw_only=True)
class StoragePage:
    data: tuple[Memory, ...]
    total: int
    by_type: dict[str, int]


NewBody = wire_model(NewMemory, mode="request", camel_case=False, name="StorageCreate")
PutBody = wire_model(Memory, mode="request", camel_case=False, name="StoragePut")
PatchBody = wire_model(StoragePatch, mode="request", camel_case=False)
AccessBody = wire_model(StorageAccessBatch, mode="request", camel_case=False)
_NOT_FOUND = {404: {"description": "no such memory for this key"}}


def _tenant(principal: Principal) -> str | None:
    return None if principal.is_admin else principal.acting_tenant


def _storage(request: Request) -> Any:
    return request.app.state.memroute.storage


@router.get("/health", scope="read", summary="Protocol health probe", responses=ok({"ok": True}))
def storage_health() -> dict[str, bool]:
    return {"ok": True}


@router.post("/memories", scope="write", response_model=MemoryModel, summary="create (an upsert on the key)",
             responses=ok(MEMORY_EXAMPLE))
def storage_create(request: Request, principal: CurrentPrincipal, body: NewBody) -> Memory:  # type: ignore[valid-type]
    new = NewMemory(**body.model_dump())  # type: ignore[attr-defined]
    memory: Memory = _storage(request).create(new, _tenant(principal))
    return memory


@router.get("/memories", scope="read", response_model=wire_model(StoragePage), summary="list",
            responses=ok({"data": [MEMORY_EXAMPLE], "total": 1, "byType": {"factual": 1}}))
def storage_list(
    request: Request, principal: CurrentPrincipal,
    api_key_id: Annotated[str | None, Query(max_length=256)] = None,
    type: MemoryType | None = None,
    session_id: Annotated[str | None, Query(max_length=256)] = None,
    query: Annotated[str | None, Query(max_length=4096)] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 50,
    offset: Annotated[int, Query(ge=0, le=2**53)] = 0,
    order_by: Annotated[str, Query(pattern="^(created_at|updated_at|last_accessed_at)$")] = "created_at",
    order_dir: Annotated[str, Query(pattern="^(asc|desc)$")] = "desc",
) -> StoragePage:
    tenant = _tenant(principal)
    filter = ListFilter(api_key_id=api_key_id if api_key_id is not None or tenant is None else tenant, type=type,
                        session_id=session_id or None, query=query or None, limit=limit, offset=offset,
                        order_by=order_by, order_dir=order_dir)
    page = _storage(request).list(filter, tenant)
    return StoragePage(data=page.data, total=page.total, by_type=dict(page.by_type))


@router.get("/memories/search", scope="read", response_model=list[wire_model(BackendHit)],  # type: ignore[misc]
            summary="search (the primary's own index)", responses=ok([{"memory": MEMORY_EXAMPLE, "score": 1.2}]))
def storage_search(
    request: Request, principal: CurrentPrincipal,
    api_key_id: Annotated[str, Query(min_length=1, max_length=256)],
    query: Annotated[str, Query(max_length=4096)] = "",
    strategy: Annotated[str, Query(pattern="^(exact|semantic|hybrid)$")] = "hybrid",
    limit: Annotated[int, Query(ge=1, le=1000)] = 20,
    session_id: Annotated[str | None, Query(max_length=256)] = None,
    retention_days: Annotated[int | None, Query(ge=1, le=3650)] = None,
    now: datetime | None = None,
) -> list[BackendHit]:
    search = SearchQuery(api_key_id=api_key_id, text=query, strategy=strategy, limit=limit,
                         session_id=session_id or None, retention_days=retention_days)
    if now is not None:
        search = attrs.evolve(search, now=now)
    hits: list[BackendHit] = _storage(request).search(search, _tenant(principal))
    return hits


@router.post("/memories/access", scope="write", response_model=wire_model(StorageAccessResult),
             summary="record access: add batched access counts (the http backend's telemetry)",
             responses=ok({"updated": 1}))
def storage_access(request: Request, principal: CurrentPrincipal, body: AccessBody) -> StorageAccessResult:  # type: ignore[valid-type]
    accesses: dict[str, MemoryAccess] = {}
    for item in body.accesses:  # type: ignore[attr-defined]
        seen = accesses.get(item.id)
        accesses[item.id] = MemoryAccess(count=item.count + (seen.count if seen else 0),
                                         at=max(as_utc(item.at, "at"), seen.at) if seen else as_utc(item.at, "at"))
    updated = _storage(request).record_access(body.api_key_id, accesses, _tenant(principal))  # type: ignore[attr-defined]
    return StorageAccessResult(updated=updated)


@router.get("/memories/{memory_id}", scope="read", response_model=MemoryModel, summary="get",
            responses={**ok(MEMORY_EXAMPLE), **_NOT_FOUND})
def storage_get(request: Request, principal: CurrentPrincipal, memory_id: str) -> Memory:
    memory: Memory | None = _storage(request).get(memory_id, _tenant(principal))
    if memory is None:
        raise NotFoundError("Memory not found")
    return memory


@router.put("/memories/{memory_id}", scope="write", response_model=wire_model(m.Success),
            summary="put: store this exact memory (replication)", responses=ok({"success": True}))
def storage_put(request: Request, principal: CurrentPrincipal, memory_id: str, body: PutBody) -> m.Success:  # type: ignore[valid-type]
    memory = Memory(**body.model_dump())  # type: ignore[attr-defined]
    if memory.id != memory_id:
        from memroute.errors import ValidationError

        raise ValidationError("id: the body's id differs from the path's", [("id", "mismatch")])
    _storage(request).put(memory, _tenant(principal))
    return m.Success(success=True)


@router.patch("/memories/{memory_id}", scope="write", response_model=MemoryModel, summary="update",
              responses={**ok(MEMORY_EXAMPLE), **_NOT_FOUND, 409: {"description": "key collision"}})
def storage_update(request: Request, principal: CurrentPrincipal, memory_id: str,
                   body: PatchBody) -> Memory:  # type: ignore[valid-type]
    changes = body.model_dump(exclude_unset=True)  # type: ignore[attr-defined]
    # null where a memory cannot hold one (the schema allows it, as "not given") leaves the field unchanged;
    # null for session_id / expires_at clears it.
    for unchangeable in ("now", "content", "key", "type"):
        if unchangeable in changes and changes[unchangeable] is None:
            del changes[unchangeable]
    updated: Memory | None = _storage(request).update(memory_id, MemoryPatch(**changes), _tenant(principal))
    if updated is None:
        raise NotFoundError("Memory not found")
    return updated


@router.delete("/memories/{memory_id}", scope="write", response_model=wire_model(m.Success), summary="delete",
               responses={**ok({"success": True}), **_NOT_FOUND})
def storage_delete(request: Request, principal: CurrentPrincipal, memory_id: str) -> m.Success:
    if not _storage(request).delete(memory_id, _tenant(principal)):
        raise NotFoundError("Memory not found")
    return m.Success(success=True)
