"""``/api/memory``: list, create, read, update, delete and search memories of the caller's tenant.

Each route authenticates (its scope), resolves the tenant (``principal.tenant_for``: another tenant's
``apiKeyId`` is 403 unless admin), calls one service method and returns the typed result. Another tenant's
memory id answers 404 exactly like a missing one, because the service cannot tell them apart either.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Annotated, Any, Literal

from fastapi import Query, Request

from memroute.aio import AsyncMemroute
from memroute.errors import NotFoundError, ValidationError
from memroute.models import Memory, MemoryType
from memroute.reports import HistoryReport
from memroute.server.api import models as m
from memroute.server.api.lean import InlineBudget, LeanRoute
from memroute.server.auth import CurrentPrincipal, ScopedRouter
from memroute.server.schema import wire_model
from memroute.service import Memroute

router = ScopedRouter(prefix="/api/memory", tags=["memory"])
"""The fixed paths (list, create, search): the app includes them first, since they are the hot routes and a
request is matched against the routes in order."""
by_id = ScopedRouter(prefix="/api/memory", tags=["memory"])
"""``/api/memory/{memory_id}``: included after the operations routes, whose fixed paths (``/health``,
``/export``, ...) must win over an id."""

MemoryModel = wire_model(Memory)
CreateBody = wire_model(m.MemoryCreate, mode="request")
UpdateBody = wire_model(m.MemoryUpdate, mode="request")
SearchBody = wire_model(m.SearchRequest, mode="request")

MEMORY_EXAMPLE: dict[str, Any] = {
    "id": "0b6f4c1e-6a8e-4c36-9d1e-2f6f1f0d8a11", "apiKeyId": "shop", "sessionId": None, "type": "factual",
    "key": "preference:typescript", "content": "I prefer TypeScript over JavaScript", "metadata": {},
    "createdAt": "2026-01-01T12:00:00Z", "updatedAt": "2026-01-01T12:00:00Z", "expiresAt": None,
    "accessCount": 2, "lastAccessedAt": "2026-01-02T09:30:00Z",
}
HISTORY_EXAMPLE: dict[str, Any] = {
    "id": "5c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f", "memoryId": MEMORY_EXAMPLE["id"], "apiKeyId": "shop",
    "event": "superseded", "actor": "extractor:regex", "at": "2026-01-03T08:00:00Z",
    "oldContent": "I prefer JavaScript", "newContent": "I prefer TypeScript over JavaScript", "oldKey": None,
    "newKey": None, "oldType": None, "newType": None,
}
_ORDER_FIELDS = {"createdAt": "created_at", "updatedAt": "updated_at", "lastAccessedAt": "last_accessed_at"}
TenantQuery = Annotated[str | None, Query(alias="apiKeyId", max_length=256,
                                          description="the tenant (admin keys only; default: the key's own)")]
_NOT_FOUND = {404: {"description": "no such memory for this tenant (another tenant's id included)"}}


def ok(example: Any, status: int = 200) -> dict[int | str, dict[str, Any]]:
    return {status: {"content": {"application/json": {"example": example}}}}


def svc(request: Request) -> Memroute:
    """The tenant-scoped service the app serves (``memroute.open``'s): the only thing a route calls."""
    mem: Memroute = request.app.state.memroute
    return mem


def asvc(request: Request) -> AsyncMemroute:
    """The async API over the app's service: a coroutine route awaits one call in its pool, where a sync
    route costs FastAPI two thread hops (the handler, then its response validation)."""
    amem: AsyncMemroute = request.app.state.memroute_async
    return amem


def _list_stats(stats: Any) -> m.ListStats:
    return m.ListStats(total=stats.total, by_type=dict(stats.by_type), tokens_used=stats.tokens_used,
                       hit_rate=stats.cache.hit_rate,
                       cache_stats=m.CacheCounters(hits=stats.cache.hits, misses=stats.cache.misses))


@router.get("", scope="read", response_model=wire_model(m.MemoryPage), summary="List memories (paged)",
            responses=ok({"data": [MEMORY_EXAMPLE], "total": 1, "page": 1, "limit": 50, "totalPages": 1,
                          "stats": {"total": 1, "byType": {"factual": 1, "episodic": 0, "procedural": 0,
                                                           "semantic": 0}, "tokensUsed": 9, "hitRate": 0.0,
                                    "cacheStats": {"hits": 0, "misses": 0}}}))
async def list_memories(
    request: Request,
    principal: CurrentPrincipal,
    api_key_id: TenantQuery = None,
    type: Annotated[MemoryType | None, Query()] = None,
    session_id: Annotated[str | None, Query(alias="sessionId", max_length=256)] = None,
    q: Annotated[str | None, Query(max_length=4096, description="case-insensitive substring of content or key")] = None,
    page: Annotated[int, Query(ge=1, le=1_000_000)] = 1,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int | None, Query(ge=0, le=2**53, description="wins over page when given")] = None,
    order_by: Annotated[Literal["created_at", "updated_at", "last_accessed_at", "createdAt", "updatedAt",
                                "lastAccessedAt"],
                        Query(alias="orderBy", description="the field to order by (snake_case or the reference's "
                                                           "camelCase); never-accessed memories sort as the "
                                                           "oldest by last_accessed_at")] = "created_at",
    order_dir: Annotated[Literal["asc", "desc"], Query(alias="orderDir")] = "desc",
    agent: Annotated[str | None, Query(max_length=128, description="only memories tagged with this agent")] = None,
) -> m.MemoryPage:
    """A page of the tenant's memories, newest first, with the tenant's statistics. ``page`` is honoured (the
    reference always served page 1 without ``offset``); ``offset`` wins when both are given."""
    tenant = principal.tenant_for(api_key_id)
    amem = asvc(request)
    start = offset if offset is not None else (page - 1) * limit
    result, stats = await asyncio.gather(
        amem.list(api_key_id=tenant, type=type, session_id=session_id or None, query=q or None, limit=limit,
                  offset=start, order_by=_ORDER_FIELDS.get(order_by, order_by), order_dir=order_dir,
                  agent=agent or None),
        amem.stats(tenant))
    shown_page = start // limit + 1
    return m.MemoryPage(data=result.data, total=result.total, page=shown_page, limit=limit,
                        total_pages=math.ceil(result.total / limit) if result.total else 0,
                        stats=_list_stats(stats))


@router.post("", scope="write", status_code=201, response_model=wire_model(m.MemoryCreated),
             summary="Store a memory (an upsert on the key)",
             responses=ok({"success": True, "id": MEMORY_EXAMPLE["id"], "memory": MEMORY_EXAMPLE}, 201))
async def create_memory(request: Request, principal: CurrentPrincipal, body: CreateBody) -> m.MemoryCreated:  # type: ignore[valid-type]
    tenant = principal.tenant_for(body.api_key_id, end_user=body.end_user)  # type: ignore[attr-defined]
    if body.consolidate:  # type: ignore[attr-defined]
        memory = await asvc(request).add(
            api_key_id=tenant, content=body.content, key=body.key, type=body.type,  # type: ignore[attr-defined]
            session_id=body.session_id or None, metadata=body.metadata,  # type: ignore[attr-defined]
            expires_at=body.expires_at, agent=body.agent, consolidate=True)  # type: ignore[attr-defined]
        return m.MemoryCreated(success=True, id=memory.id, memory=memory)
    # Validated here (no I/O), then queued for the service's group commit: no thread hop per request, one
    # batched write for the adds that arrive together (docs/server.md, "Concurrent writers").
    memory = await asyncio.wrap_future(svc(request).submit_add(
        api_key_id=tenant, content=body.content, key=body.key, type=body.type,  # type: ignore[attr-defined]
        session_id=body.session_id or None, metadata=body.metadata,  # type: ignore[attr-defined]
        expires_at=body.expires_at, agent=body.agent,  # type: ignore[attr-defined]
    ))
    return m.MemoryCreated(success=True, id=memory.id, memory=memory)


@router.post("/search", scope="read", response_model=wire_model(m.SearchResponse, name="SearchResult"),
             summary="Ranked memories for a query (keyword, vector or hybrid)", route_class_override=LeanRoute,
             responses=ok({"hits": [{"memory": MEMORY_EXAMPLE, "score": 0.71, "tier": "hybrid",
                                     "ranks": {"keyword": 1, "vector": 1},
                                     "legScores": {"keyword": 1.2, "vector": 0.71}, "saidAt": None}],
                           "provenance": {"backend": "main", "strategyRequested": "hybrid",
                                          "strategyUsed": "hybrid", "legs": ["keyword", "vector"],
                                          "degraded": False, "reason": None, "fallback": False,
                                          "vectorStore": "sqlite-vec", "rerank": None, "rerankError": None}}))
async def search_memories(request: Request, principal: CurrentPrincipal, body: SearchBody) -> Any:  # type: ignore[valid-type]
    """The same retrieval ``augment`` uses: expiry, retention and session scope applied on every leg. A tenant
    whose searches are short runs them on the event loop (``[server] inline_search_ms``), others in the async
    API's pool."""
    tenant = principal.tenant_for(body.api_key_id, end_user=body.end_user)  # type: ignore[attr-defined]
    options = {"api_key_id": tenant, "strategy": body.strategy, "limit": body.limit,  # type: ignore[attr-defined]
               "max_tokens": body.max_tokens, "session_id": body.session_id or None,  # type: ignore[attr-defined]
               "agent": body.agent}  # type: ignore[attr-defined]
    budget: InlineBudget = request.app.state.inline_search
    mem = svc(request)

    def search() -> Any:  # timed where it runs: the search's own time (a hop's wake-ups are not the search's)
        started = time.perf_counter()
        try:
            return mem.search(body.query, **options)  # type: ignore[attr-defined]
        finally:
            budget.record(tenant, time.perf_counter() - started)

    if budget.allows(tenant):
        return asvc(request).run_inline(search)
    return await asvc(request).run(search)


def _memory_id(memory_id: str) -> str:
    if not memory_id.strip() or len(memory_id) > 256:
        raise ValidationError("id: expected a non-empty id of at most 256 characters", [("id", "invalid")])
    return memory_id


@by_id.get("/{memory_id}", scope="read", response_model=wire_model(m.MemoryEnvelope),
            summary="One memory", responses={**ok({"memory": MEMORY_EXAMPLE}), **_NOT_FOUND})
async def get_memory(request: Request, principal: CurrentPrincipal, memory_id: str, api_key_id: TenantQuery = None,
                     ) -> m.MemoryEnvelope:
    memory = await _owned_or_404(request, principal.tenant_for(api_key_id), memory_id)
    return m.MemoryEnvelope(memory=memory)


async def _owned_or_404(request: Request, tenant: str, memory_id: str) -> Memory:
    try:
        memory = await asvc(request).get(_memory_id(memory_id), api_key_id=tenant)
    except ValidationError:
        memory = None  # a malformed id names no memory: the same 404 as a missing one
    if memory is None:
        raise NotFoundError("Memory not found")
    assert isinstance(memory, Memory)
    return memory


@by_id.get("/{memory_id}/history", scope="read", response_model=wire_model(HistoryReport),
            summary="The history of a memory (also after it was deleted)",
            responses={**ok({"memoryId": MEMORY_EXAMPLE["id"], "apiKeyId": "shop", "current": MEMORY_EXAMPLE,
                             "entries": [HISTORY_EXAMPLE], "recorded": True}), **_NOT_FOUND})
async def memory_history(request: Request, principal: CurrentPrincipal, memory_id: str,
                         api_key_id: TenantQuery = None) -> HistoryReport:
    """Every recorded change of the memory, oldest first (event, actor, old and new content, key and type,
    time), and the memory as it is now (``null`` once deleted). Another tenant's id is 404 like a missing one."""
    tenant = principal.tenant_for(api_key_id)
    try:
        report = await asvc(request).history(_memory_id(memory_id), api_key_id=tenant)
    except ValidationError:
        report = None  # a malformed id names no memory: the same 404 as a missing one
    if report is None:
        raise NotFoundError("Memory not found")
    assert isinstance(report, HistoryReport)
    return report


@by_id.put("/{memory_id}", scope="write", response_model=wire_model(m.MemoryUpdated),
            summary="Change fields of a memory",
            responses={**ok({"success": True, "memory": MEMORY_EXAMPLE}), **_NOT_FOUND,
                       409: {"description": "the new key is another memory's"}})
async def update_memory(request: Request, principal: CurrentPrincipal, memory_id: str,
                        body: UpdateBody, api_key_id: TenantQuery = None) -> m.MemoryUpdated:  # type: ignore[valid-type]
    """Only the fields present in the body change; ``metadata`` replaces the stored object."""
    changes = body.model_dump(exclude_unset=True, by_alias=False)  # type: ignore[attr-defined]
    if "session_id" in changes and changes["session_id"] == "":
        changes["session_id"] = None
    if not changes:
        raise ValidationError("update: nothing to change", [("(body)", "empty")])
    tenant = principal.tenant_for(api_key_id)
    await _owned_or_404(request, tenant, memory_id)
    updated = await asvc(request).update(memory_id, api_key_id=tenant, **changes)
    if updated is None:
        raise NotFoundError("Memory not found")
    return m.MemoryUpdated(success=True, memory=updated)


@by_id.delete("/{memory_id}", scope="write", response_model=wire_model(m.Success), summary="Delete a memory",
               responses={**ok({"success": True}), **_NOT_FOUND})
async def delete_memory(request: Request, principal: CurrentPrincipal, memory_id: str,
                        api_key_id: TenantQuery = None) -> m.Success:
    tenant = principal.tenant_for(api_key_id)
    await _owned_or_404(request, tenant, memory_id)
    if not await asvc(request).delete(memory_id, api_key_id=tenant):
        raise NotFoundError("Memory not found")
    return m.Success(success=True)
