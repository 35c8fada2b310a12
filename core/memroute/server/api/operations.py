"""``/api/memory/...`` operations: pipeline health, retrieval preview, engine status, embedding providers,
summarize, background reindex, bulk clear, streamed export and all-or-nothing import."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import Query, Request
from fastapi.responses import StreamingResponse

from memroute.config.serialization import memory_to_dict
from memroute.errors import ConflictError, ValidationError
from memroute.models import utcnow
from memroute.reports import RetrievalPreview
from memroute.server.api import models as m
from memroute.server.api.lean import LeanRoute
from memroute.server.api.memory import MEMORY_EXAMPLE, TenantQuery, asvc, ok, svc
from memroute.server.auth import CurrentPrincipal, ScopedRouter
from memroute.server.schema import wire_model
from memroute.server.wire import jsonable

router = ScopedRouter(prefix="/api/memory", tags=["operations"])

PreviewBody = wire_model(m.PreviewRequest, mode="request")
SummarizeBody = wire_model(m.SummarizeRequest, mode="request")
ReindexBody = wire_model(m.ReindexRequest, mode="request")
ClearBody = wire_model(m.ClearRequest, mode="request")

_HEALTH_PROBE = "I prefer tea over coffee."


@router.get("/health", scope="read", response_model=wire_model(m.PipelineHealth, name="PipelineHealth"),
            summary="Extraction pipeline and backend health (writes nothing)",
            responses=ok({"working": True, "latencyMs": 1.8, "error": None, "backends": [
                {"name": "main", "role": "primary", "ok": True}]}))
def pipeline_health(request: Request) -> m.PipelineHealth:
    """Runs the extractor on a fixed sentence without storing anything and probes every backend (the
    reference wrote and deleted a test memory under a fake owner on every call)."""
    mem = svc(request)
    started = time.perf_counter()
    error = None
    try:
        facts = mem.extract(_HEALTH_PROBE)
        if not facts:
            error = "the extractor found no fact in the probe sentence"
    except Exception as exc:  # a probe reports, it never raises
        error = f"extraction failed: {type(exc).__name__}: {exc}"
    health = jsonable(mem.health())
    backends = tuple(health.get("backends", ()))
    primary_ok = any(b.get("role") == "primary" and b.get("ok") for b in backends)
    if error is None and not primary_ok:
        error = "the primary backend does not answer"
    return m.PipelineHealth(working=error is None, latency_ms=round((time.perf_counter() - started) * 1000, 3),
                            error=error, backends=backends)


_PREVIEW_EXAMPLE: dict[str, Any] = {
    "query": "typescript", "apiKeyId": "shop", "limit": 20, "totalTokensUsed": 9, "budgetMaxTokens": 2000,
    "memories": [{"id": MEMORY_EXAMPLE["id"], "type": "factual", "key": "preference:typescript",
                  "content": MEMORY_EXAMPLE["content"], "score": 0.71, "tokens": 9, "tier": "hybrid",
                  "ranks": {"keyword": 1, "vector": 2}, "legScores": {"keyword": 1.2, "vector": 0.71},
                  "vecScore": 0.71, "ftsScore": 1.2, "metadata": {"category": "preference"},
                  "saidAt": None}],
    "resolution": {"embeddingSource": "static", "embeddingModel": "minishlab/potion-base-8M",
                   "vectorStore": "sqlite-vec", "strategyRequested": "hybrid", "strategyUsed": "hybrid",
                   "legs": ["keyword", "vector"], "backend": "main", "fallback": False, "degraded": False,
                   "rerankApplied": False, "reranker": None, "fallbackReason": None},
}


@router.post("/retrieve-preview", scope="read", response_model=wire_model(RetrievalPreview),
             summary="What retrieval would inject for a query (the Playground)", responses=ok(_PREVIEW_EXAMPLE),
             route_class_override=LeanRoute)
async def retrieve_preview(request: Request, principal: CurrentPrincipal, body: PreviewBody) -> RetrievalPreview:  # type: ignore[valid-type]
    """The service's ``preview()``: each memory with its tier, per-leg ranks and scores and tokens, how the
    query was served (embedding, vector store, strategy, fallback and why) and the tokens used against the
    budget. Always one tenant, with the expiry, retention and session filters of retrieval (the reference's
    preview searched every key when ``apiKeyId`` was missing and ignored retention). ``strategy`` and
    ``maxTokens`` default to the memory settings in effect."""
    tenant = principal.tenant_for(body.api_key_id, end_user=body.end_user)  # type: ignore[attr-defined]
    preview: RetrievalPreview = await asvc(request).preview(
        body.query, api_key_id=tenant, strategy=body.strategy,  # type: ignore[attr-defined]
        max_tokens=body.max_tokens, limit=body.limit,  # type: ignore[attr-defined]
        session_id=body.session_id or None)  # type: ignore[attr-defined]
    return preview


@router.get("/engine-status", scope="read", summary="Keyword tier, embedding, vector store, maintenance",
            responses=ok({"keyword": {"available": True, "backend": "sqlite keyword search"},
                          "embedding": {"source": "static", "model": "minishlab/potion-base-8M", "dimensions": 256,
                                        "available": True},
                          "vector_store": {"backend": "sqlite-vec", "available": True, "rows": 12},
                          "group_commit": {"batches": 891, "items": 3079, "mean_batch": 3.46, "last_batch": 2,
                                           "largest_batch": 8, "max_batch": 64, "waiting": 0},
                          "extraction": {"extractors": ["regex", "llm"],
                                         "llm": {"model": "gpt-4o-mini", "tenant": "shop", "requests": 42,
                                                 "prompt_tokens": 16800, "completion_tokens": 2100,
                                                 "operations": {"add": 30, "update": 4, "none": 9},
                                                 "dropped": {}, "failures": {"timeout": 1}}},
                          "maintenance": {"prune": {"ran_at": "2026-01-01T12:00:00Z", "ok": True}},
                          "qdrant": {"enabled": False, "healthy": False, "latencyMs": None, "error": None}}))
def engine_status(request: Request, principal: CurrentPrincipal) -> dict[str, Any]:
    """The service's status report plus the last scheduled maintenance runs (from the shared state store).
    ``group_commit`` shows how this server process batched its adds (batches, items, mean / last / largest
    batch). ``extraction`` shows the extractor chain; a tenant key sees only its own tenant's counters of a
    background extractor (``llm``: requests, tokens, failures), an admin key every tenant's. ``qdrant`` is
    OmniRoute's block (``enabled``, ``healthy``, ``latencyMs``, ``error``), probed for real when the vector store
    is Qdrant. An admin key sees all of it; any other key only what configures its own searches (no server paths,
    deployment-wide counts, or anything about other tenants; :func:`tenant_view`)."""
    mem = request.app.state.memroute
    status = dict(jsonable(mem.status()))
    if not principal.is_admin:
        status["extraction"] = jsonable(mem.extraction_status(api_key_id=principal.tenant))
    status.pop("data_dir", None)  # server paths are an operator's business, not a client's
    status.pop("state_dir", None)
    maintenance = getattr(request.app.state, "maintenance", None)
    status["maintenance"] = maintenance.last_runs() if maintenance is not None else {}
    status["qdrant"] = qdrant_block(mem, status.get("vector_store") or {})
    return status if principal.is_admin else tenant_view(status, TENANT_VISIBLE_STATUS)


TENANT_VISIBLE_STATUS: dict[str, Any] = {
    "memory": True, "fusion": True,
    "backends": {"primary": True, "fallbacks": True, "instances": {"name": True, "type": True}},
    "keyword": {"backend": True, "ranking": True, "available": True, "served_by": True},
    "embedding": {"source": True, "model": True, "dimensions": True, "requested": True, "available": True},
    "vector_store": {"backend": True, "available": True, "signature": True},
    "rerank": {"enabled": True, "available": True, "reranker": True, "model": True},
    "health": {"backends": {"name": True, "type": True, "role": True, "ok": True, "breaker": True}},
    "extraction": True,  # already the tenant's own counters (engine_status asks for them)
    "qdrant": {"enabled": True, "healthy": True, "latencyMs": True},
}
"""What a tenant key sees of the engine status: an allow-list, so a field added to the report later stays an
operator's until it is listed here (the last prune's candidates once showed other tenants' memory ids)."""


def tenant_view(value: Any, allowed: Any) -> Any:
    """``value`` reduced to the fields ``allowed`` lists (``True``: the whole value; a dict: those fields, in a
    mapping or in each mapping of a list). Field names match in snake_case and camelCase alike."""
    if allowed is True:
        return value
    if isinstance(value, list):
        return [tenant_view(item, allowed) for item in value if isinstance(item, dict)]
    if not isinstance(value, dict):
        return None
    wanted = {name.replace("_", "").lower(): rule for name, rule in allowed.items()}
    return {name: tenant_view(item, wanted[name.replace("_", "").lower()]) for name, item in value.items()
            if name.replace("_", "").lower() in wanted}


def qdrant_block(mem: Any, vector_store: dict[str, Any]) -> dict[str, Any]:
    """The reference's engine-status ``qdrant`` block, named as it named it: ``enabled`` when the vector store
    in use is Qdrant, then a real probe's ``healthy`` and ``latencyMs`` and the ``error`` if any."""
    if vector_store.get("backend") != "qdrant":
        return {"enabled": False, "healthy": False, "latencyMs": None, "error": None}
    probe = mem.vector_store_health()
    if probe is None:
        return {"enabled": True, "healthy": False, "latencyMs": None, "error": vector_store.get("reason")}
    error = probe.error or vector_store.get("last_error")
    return {"enabled": True, "healthy": probe.ok and error is None, "latencyMs": round(probe.latency_ms, 3),
            "error": error}


@router.get("/embedding-providers", scope="read", response_model=wire_model(m.EmbeddingProviders),
            summary="Embedding sources this server can use",
            responses=ok({"providers": [{"provider": "static", "hasKey": True, "active": True, "models": [
                {"id": "static/minishlab/potion-base-8M", "name": "minishlab/potion-base-8M", "dimensions": 256}]}]}))
def embedding_providers(request: Request) -> m.EmbeddingProviders:
    mem = request.app.state.memroute
    embedding = jsonable(mem.status()).get("embedding", {})
    active = embedding.get("source")
    providers = []
    for name in sorted(mem.plugins.embedding_sources()):
        models: tuple[m.EmbeddingModelInfo, ...] = ()
        if name == active and embedding.get("model"):
            models = (m.EmbeddingModelInfo(id=f"{name}/{embedding['model']}", name=str(embedding["model"]),
                                           dimensions=embedding.get("dimensions")),)
        providers.append(m.EmbeddingProvider(provider=name, has_key=name == active and bool(embedding.get("available")),
                                             active=name == active, models=models))
    return m.EmbeddingProviders(providers=tuple(providers))


@router.post("/summarize", scope="write", response_model=wire_model(m.SummarizeResponse),
             summary="Summarize the tenant's old memories (a dry run by default)",
             responses=ok({"candidates": [MEMORY_EXAMPLE["id"]], "totalTokens": 9, "deletedCount": 0,
                           "summaryId": None, "summaryIds": [], "summaryPreview": "…", "dryRun": True}))
def summarize(request: Request, principal: CurrentPrincipal, body: SummarizeBody) -> m.SummarizeResponse:  # type: ignore[valid-type]
    tenant = principal.tenant_for(body.api_key_id, end_user=body.end_user)  # type: ignore[attr-defined]
    report = svc(request).summarize(tenant, body.older_than_days, dry_run=body.dry_run)  # type: ignore[attr-defined]
    return m.SummarizeResponse(candidates=tuple(report.candidates), total_tokens=report.candidate_tokens,
                               deleted_count=report.deleted, summary_id=(report.summary_ids or (None,))[0],
                               summary_ids=tuple(report.summary_ids), summary_preview=report.summary_preview,
                               dry_run=report.dry_run)


# --- reindex in the background -----------------------------------------------------------------------------

_reindex_lock = threading.Lock()


def _reindex_scope(principal: Any, requested: str | None) -> str | None:
    """The tenant a reindex request acts on, ``None`` for the whole deployment (an admin key naming none)."""
    if principal.is_admin and not requested:
        return None
    return str(principal.tenant_for(requested))


def _reindex_job(tenant: str | None) -> tuple[str, str]:
    """The lease and state entry of one reindex scope: a tenant's jobs never block another tenant's."""
    return ("reindex", "reindex") if tenant is None else (f"reindex:{tenant}", f"reindex:{tenant}")


def _reindex_status(mem: Any, tenant: str | None) -> m.ReindexStatus:
    data = mem.state.get_value("jobs", _reindex_job(tenant)[1]) or {}
    return m.ReindexStatus(api_key_id=tenant, state=data.get("state", "idle"), started=data.get("state") == "running",
                           force=bool(data.get("force", False)), done=int(data.get("done", 0)),
                           pending=int(data.get("pending", 0)), errors=int(data.get("errors", 0)),
                           started_at=data.get("started_at"), finished_at=data.get("finished_at"),
                           error=data.get("error"))


_REINDEX_EXAMPLE = {"apiKeyId": "shop", "state": "running", "started": True, "force": False, "done": 256,
                    "pending": 744, "errors": 0, "startedAt": "2026-01-01T12:00:00Z", "finishedAt": None,
                    "error": None}


@router.post("/reindex", scope="write", status_code=202, response_model=wire_model(m.ReindexStatus),
             summary="Start rebuilding the vector index in the background",
             responses={**ok(_REINDEX_EXAMPLE, 202), 409: {"description": "a reindex is already running"}})
def start_reindex(request: Request, principal: CurrentPrincipal,
                  body: ReindexBody) -> m.ReindexStatus:  # type: ignore[valid-type]
    """Returns at once; ``GET /api/memory/reindex`` shows progress from any server process. The queue is
    durable, so an interrupted reindex resumes where it stopped. A tenant key reindexes its own tenant only
    (other tenants keep their vectors and their searches); an admin key the whole deployment, or the tenant
    it names."""
    mem = request.app.state.memroute
    tenant = _reindex_scope(principal, body.api_key_id)  # type: ignore[attr-defined]
    lease, entry = _reindex_job(tenant)
    holder = f"{lease}:{id(mem)}:{time.time()}"
    with _reindex_lock:
        if not mem.state.try_lease(lease, holder, ttl_s=3600):
            raise ConflictError("a reindex is already running (GET /api/memory/reindex shows its progress)")
        record = {"state": "running", "force": bool(body.force), "done": 0, "pending": 0,  # type: ignore[attr-defined]
                  "errors": 0, "started_at": utcnow().isoformat(), "finished_at": None, "error": None}
        mem.state.put_value("jobs", entry, record)

    def run() -> None:
        def progress(done: int, remaining: int) -> None:
            mem.state.put_value("jobs", entry, {**record, "done": done, "pending": remaining})

        try:
            outcome = jsonable(mem.reindex(force=bool(body.force), progress=progress,  # type: ignore[attr-defined]
                                           api_key_id=tenant))
            final = {**record, "state": "done", "done": int(outcome.get("processed", 0)),
                     "pending": int(outcome.get("pending", 0)), "errors": int(outcome.get("errors", 0)),
                     "error": outcome.get("reason"), "finished_at": utcnow().isoformat()}
        except Exception as exc:
            final = {**record, "state": "failed", "error": f"{type(exc).__name__}: {exc}",
                     "finished_at": utcnow().isoformat()}
        try:
            mem.state.put_value("jobs", entry, final)
        finally:
            mem.state.release_lease(lease, holder)

    threading.Thread(target=run, name="memroute-reindex", daemon=True).start()
    return _reindex_status(mem, tenant)


@router.get("/reindex", scope="read", response_model=wire_model(m.ReindexStatus), summary="Reindex progress",
            responses=ok(_REINDEX_EXAMPLE))
def reindex_status(request: Request, principal: CurrentPrincipal,
                   api_key_id: TenantQuery = None) -> m.ReindexStatus:
    """The calling tenant's reindex; for an admin key, the deployment's (or the named tenant's)."""
    return _reindex_status(request.app.state.memroute, _reindex_scope(principal, api_key_id))


# --- bulk ----------------------------------------------------------------------------------------------------

@router.post("/clear", scope="write", response_model=wire_model(m.ClearResponse),
             summary="Delete the tenant's memories matching filters",
             responses=ok({"apiKeyId": "shop", "dryRun": False, "matched": 2, "deleted": 2,
                           "ids": [MEMORY_EXAMPLE["id"], "5d0c8a4e-0d7f-4e8e-8f0a-1b2c3d4e5f60"]}))
def clear(request: Request, principal: CurrentPrincipal, body: ClearBody) -> m.ClearResponse:  # type: ignore[valid-type]
    tenant = principal.tenant_for(body.api_key_id, end_user=body.end_user)  # type: ignore[attr-defined]
    report = svc(request).clear(tenant, type=body.type, session_id=body.session_id or None,  # type: ignore[attr-defined]
                                older_than_days=body.older_than_days, dry_run=body.dry_run)  # type: ignore[attr-defined]
    return m.ClearResponse(api_key_id=report.api_key_id, dry_run=report.dry_run, matched=report.matched,
                           deleted=report.deleted, ids=tuple(report.ids))


@router.get("/export", scope="read", summary="Every memory of the tenant as JSON Lines (streamed)",
            response_class=StreamingResponse,
            responses={200: {"content": {"application/x-ndjson": {
                "schema": {"type": "string"},
                "example": json.dumps({"id": MEMORY_EXAMPLE["id"], "api_key_id": "shop",
                                       "key": "preference:typescript"}) + "\n"}},
                "description": "one memory object a line, oldest first (the format import reads)"}})
def export(request: Request, principal: CurrentPrincipal, api_key_id: TenantQuery = None) -> StreamingResponse:
    tenant = principal.tenant_for(api_key_id)
    memories = svc(request).export(tenant)

    def lines() -> Iterator[bytes]:
        for memory in memories:
            yield (json.dumps(memory_to_dict(memory), ensure_ascii=False) + "\n").encode("utf-8")

    safe = re.sub(r"[^A-Za-z0-9._-]", "_", tenant)[:64]
    return StreamingResponse(lines(), media_type="application/x-ndjson",
                             headers={"content-disposition": f'attachment; filename="memroute-{safe}.jsonl"'})


@router.post("/import", scope="write", response_model=wire_model(m.ImportResponse),
             summary="Import JSON Lines (all or nothing)",
             openapi_extra={"requestBody": {"required": True, "content": {"application/x-ndjson": {
                 "schema": {"type": "string"}, "example": json.dumps(
                     {"id": MEMORY_EXAMPLE["id"], "api_key_id": "shop", "type": "factual",
                      "key": "preference:typescript", "content": "I prefer TypeScript", "metadata": {},
                      "created_at": "2026-01-01T12:00:00Z", "updated_at": "2026-01-01T12:00:00Z"}) + "\n"}}}},
             responses=ok({"imported": 1, "apiKeyId": "shop"}))
async def import_memories(request: Request, principal: CurrentPrincipal,
                          api_key_id: Annotated[str | None, Query(alias="apiKeyId", max_length=256)] = None,
                          ) -> m.ImportResponse:
    """The body is what export writes. Every line must belong to the tenant (or name none); the whole body is
    validated before anything is written, so a bad line (named in ``details``) writes nothing."""
    tenant = principal.tenant_for(api_key_id)
    raw = await request.body()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationError("body: not UTF-8 text", [("(body)", "encoding")]) from None
    from starlette.concurrency import run_in_threadpool

    report = await run_in_threadpool(svc(request).import_jsonl, text.splitlines(), api_key_id=tenant)
    return m.ImportResponse(imported=report.imported, api_key_id=tenant)
